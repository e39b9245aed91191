//! The allocator: resolves a request (annotations, Guaranteed rule, devices), makes the joint
//! GPU-first choice under the policy (`choose`), and records it in the ledger.
//!
//! A decision is a function of the ledger, the settings and the request: [`Allocator::plan`]
//! makes it without recording, [`Allocator::commit`] records a plan, and
//! [`Allocator::place`] does both. The GPU mode travels with each call, so a caller that wants
//! `keep` for one decision never flips the allocator's settings.

use std::collections::HashMap;
use std::sync::Arc;

use super::assignment::{Assignment, ChoiceOutcome, MemoryPolicy};
use super::choose::{Candidate, GpuSearch, Search};
use super::cpus;
use super::device_map::DeviceMap;
use super::error::{fmt_bytes, fmt_nodes, PlacementError};
use super::ledger::{Ledger, NodeFree};
use super::nics;
use super::numa::{self, Cap, Need};
use super::policy::{GpuMode, PlacementConfig, Policy, Scope};
use super::ranking::gpus::LinkTable;
use super::reject;
use super::request::{PodTotals, Request};
use super::resolve::{resolve, Resolved};
use super::spread;
use crate::topology::{CpuSet, NodeSet, Topology};

/// Owns the live allocations and decides placements.
#[derive(Debug, Clone)]
pub struct Allocator {
    // The resize plan (`resize::plan`) reads and records through these two.
    pub(super) ledger: Ledger,
    pub(super) config: PlacementConfig,
    links: LinkTable,
    pod_nodes: HashMap<String, NodeSet>,
    pod_totals: HashMap<String, PodTotals>,
    /// Containers recorded per pod uid, so a release knows its pod's last container without
    /// walking every assignment.
    pod_members: HashMap<String, usize>,
    /// How GPU sets are enumerated (the exhaustive search stays as the tests' reference).
    gpu_search: GpuSearch,
}

/// A decision not yet recorded: the assignment and how its memory splits over its nodes.
/// [`Allocator::commit`] records it; nothing else can, so a plan is only ever recorded by the
/// allocator that made it, before anything else changed there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub(super) assignment: Assignment,
    pub(super) split: Vec<(usize, u64)>,
}

impl Plan {
    /// The decision.
    pub fn assignment(&self) -> &Assignment {
        &self.assignment
    }
}

impl Allocator {
    /// An allocator with nothing allocated.
    pub fn new(topology: Arc<Topology>, config: PlacementConfig) -> Self {
        let links = LinkTable::new(&topology);
        let mut ledger = Ledger::new(topology, config.reserved_cpus.clone());
        ledger.set_headroom(config.exclusive_headroom);
        Self {
            ledger,
            config,
            links,
            pod_nodes: HashMap::new(),
            pod_totals: HashMap::new(),
            pod_members: HashMap::new(),
            gpu_search: GpuSearch::default(),
        }
    }

    /// Enumerates GPU sets by `mode` from now on ([`GpuSearch::Reduced`] unless set).
    pub fn set_gpu_search(&mut self, mode: GpuSearch) {
        self.gpu_search = mode;
    }

    /// Tells the allocator what pod `uid` will ask for in all, before its first container (see
    /// [`PodTotals`]). Kept until [`Allocator::forget_pod`] or the pod's last release.
    pub fn expect_pod(&mut self, uid: &str, totals: PodTotals) {
        self.pod_totals.insert(uid.to_string(), totals);
    }

    /// Drops what [`Allocator::expect_pod`] said about pod `uid`.
    pub fn forget_pod(&mut self, uid: &str) {
        self.pod_totals.remove(uid);
    }

    /// Decides with the configured GPU mode and records.
    pub fn place(&mut self, req: &Request) -> Result<Assignment, PlacementError> {
        self.place_in(req, self.config.gpu_mode)
    }

    /// Decides with GPU mode `mode` for this one decision and records.
    pub fn place_in(&mut self, req: &Request, mode: GpuMode) -> Result<Assignment, PlacementError> {
        let plan = self.plan_in(req, mode)?;
        self.commit(plan)
    }

    /// Decides with the configured GPU mode, without recording.
    pub fn plan(&self, req: &Request) -> Result<Assignment, PlacementError> {
        self.plan_in(req, self.config.gpu_mode)
            .map(|p| p.assignment)
    }

    /// Decides with GPU mode `mode`, without recording.
    pub fn plan_in(&self, req: &Request, mode: GpuMode) -> Result<Plan, PlacementError> {
        let config = PlacementConfig {
            gpu_mode: mode,
            ..self.config.clone()
        };
        self.decide(&config, req)
    }

    /// Records a plan of this allocator. Refuses one whose resources another container took
    /// since it was made (the ledger checks every CPU, GPU and byte again).
    pub fn commit(&mut self, plan: Plan) -> Result<Assignment, PlacementError> {
        let Plan {
            assignment: a,
            split,
        } = plan;
        self.ledger.record(a.clone(), split)?;
        *self.pod_members.entry(a.pod_uid.clone()).or_default() += 1;
        if !a.numa_nodes.is_empty() {
            self.pod_nodes
                .entry(a.pod_uid.clone())
                .or_insert_with(|| a.numa_nodes.clone());
        }
        Ok(a)
    }

    /// Forgets a container; its exclusive CPUs, memory, GPUs and NICs come back.
    pub fn release(&mut self, container_id: &str) -> Option<Assignment> {
        let a = self.ledger.release(container_id)?;
        let left = self.pod_members.get_mut(&a.pod_uid).map_or(0, |n| {
            *n = n.saturating_sub(1);
            *n
        });
        if left == 0 {
            self.pod_members.remove(&a.pod_uid);
            self.pod_nodes.remove(&a.pod_uid);
            self.pod_totals.remove(&a.pod_uid);
        }
        Some(a)
    }

    /// Re-records a persisted decision; refuses a CPU or GPU another container holds.
    pub fn restore(&mut self, a: Assignment) -> Result<(), PlacementError> {
        let topo = self.ledger.topo_arc();
        let split = self
            .ledger
            .split_memory_of(&a)
            .ok_or_else(|| PlacementError::Restore {
                container: a.container_id.clone(),
                reason: format!(
                    "{} of memory no longer free on {}",
                    fmt_bytes(a.memory_bytes),
                    fmt_nodes(&a.numa_nodes)
                ),
            })?;
        // A CPU that is offline now but present (hot-unplugged or offlined while its holder
        // runs) stays the holder's: refusing the record would free its other CPUs under it.
        let mut known = self.ledger.online().clone();
        known.extend_from(&topo.offline_cpus);
        // Likewise a CPU a record holds that is outside the containers' cpuset now (narrowed
        // while nri-align was away): its holder keeps it rather than losing the rest.
        known.extend_from(&topo.outside_cpuset);
        if !a.cpus.is_subset(&known) {
            return Err(PlacementError::Restore {
                container: a.container_id.clone(),
                reason: format!("cpus {} are not all present", a.cpus),
            });
        }
        let (uid, nodes) = (a.pod_uid.clone(), a.numa_nodes.clone());
        self.ledger.record(a, split)?;
        *self.pod_members.entry(uid.clone()).or_default() += 1;
        if !nodes.is_empty() {
            self.pod_nodes.entry(uid).or_insert(nodes);
        }
        Ok(())
    }

    /// Follows a CPU or memory hot-plug ([`Ledger::set_online`]); returns the online CPUs the
    /// topology does not describe (not placed on until it is read again).
    pub fn set_online(&mut self, cpus: &CpuSet, mem_offline: &NodeSet) -> CpuSet {
        self.ledger.set_online(cpus, mem_offline)
    }

    /// The ledger (what is held and free).
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Online minus reserved minus exclusively allocated CPUs (isolated ones excluded), minus
    /// the exclusive headroom when one is set.
    pub fn shared_pool(&self) -> CpuSet {
        self.ledger.shared_pool()
    }

    /// Takes `pool` as the shared pool where it is still valid ([`Ledger::adopt_pool`]).
    pub fn adopt_pool(&mut self, pool: &CpuSet) {
        self.ledger.adopt_pool(pool);
    }

    /// Live assignments.
    pub fn assignments(&self) -> impl Iterator<Item = &Assignment> {
        self.ledger.assignments()
    }

    /// Free capacity per NUMA node.
    pub fn free_by_node(&self) -> Vec<NodeFree> {
        self.ledger.free_by_node()
    }

    /// The GPUs (indices in the topology) the kubelet lists as allocatable now: the only ones
    /// placement chooses for a container the device plugin did not give them to (see
    /// [`Ledger::gpu_choosable`]).
    pub fn set_allocatable_gpus(&mut self, allocatable: &std::collections::BTreeSet<usize>) {
        self.ledger.set_allocatable_gpus(allocatable);
    }

    /// Applies a reloaded configuration; allocations stay as they are.
    pub fn set_config(&mut self, config: PlacementConfig) {
        self.ledger.set_reserved(config.reserved_cpus.clone());
        self.ledger.set_headroom(config.exclusive_headroom);
        self.config = config;
    }

    /// The configuration in force.
    pub fn config(&self) -> &PlacementConfig {
        &self.config
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        self.ledger.topo()
    }

    fn decide(&self, config: &PlacementConfig, req: &Request) -> Result<Plan, PlacementError> {
        let r = resolve(&self.ledger, config, req)?;
        let mut plan = self.decide_resolved(config, req, &r)?;
        let a = &mut plan.assignment;
        a.mempolicy = MemoryPolicy::for_container(
            r.eff.mempolicy,
            self.ledger.topo(),
            &a.mems,
            &a.numa_nodes,
        );
        let mut plan = self.with_choice(&r, plan);
        // Every path gives a shared container the pool (or its part on the container's
        // nodes); a hot-plug can leave it empty, and an empty cpuset is no cpuset at all to
        // the runtime: the container would run on every CPU, the exclusive ones included.
        if !plan.assignment.exclusive && plan.assignment.cpus.is_empty() {
            return Err(PlacementError::NoSharedCpu {
                container: r.who.clone(),
                online: self.ledger.online().to_string(),
            });
        }
        let a = &mut plan.assignment;
        a.device_map = DeviceMap::of(self.ledger.topo(), a);
        Ok(plan)
    }

    /// The decision for a resolved request; the scheduler's choice, when there is one, is in
    /// the allowed nodes and the search's constraints.
    fn decide_resolved(
        &self,
        config: &PlacementConfig,
        req: &Request,
        r: &Resolved,
    ) -> Result<Plan, PlacementError> {
        let mut a = Assignment {
            generic_devices: req
                .generic_devices
                .iter()
                .map(|d| d.pci_bus_id.clone())
                .collect(),
            ..req.blank_assignment(r.exclusive, r.eff.policy)
        };
        if let Some(holder) = self.ledger.get(&req.container_id) {
            return Err(PlacementError::Conflict {
                resource: "container".into(),
                id: req.container_id.clone(),
                holder: holder.container_id.clone(),
            });
        }
        let pinned = (r.eff.scope == Scope::Pod)
            .then(|| self.pod_nodes.get(&req.pod.uid))
            .flatten();
        // A scheduler's choice binds whatever the node's policy: it is the pod's placement.
        let chosen = r.choice.as_ref().filter(|h| h.binds());
        if r.eff.policy == Policy::None && chosen.is_none() {
            return self.unaligned(config, r, a);
        }
        if chosen.is_none()
            && !r.exclusive
            && r.gpu_count == 0
            && r.nic_count == 0
            && r.shared_gpus.is_empty()
            && r.device_nodes.is_empty()
            && r.hugepages.is_empty()
            && pinned.is_none()
        {
            a.cpus = self.ledger.shared_pool();
            // A CPU node without memory stands for its nearest node with memory.
            let topo = self.ledger.topo();
            a.mems = topo.memory_nodes_for(&topo.cpu_nodes());
            a.aligned = true;
            a.reason = "shared pool; nothing to align".into();
            return Ok(Plan {
                assignment: a,
                split: Vec::new(),
            });
        }
        let n = self.ledger.topo().numa_nodes.len();
        let all = chosen
            .and_then(|h| h.allowed.clone())
            .unwrap_or_else(|| vec![true; n]);
        let Some(pin) = pinned else {
            return self.bound(config, r, a, &all, None);
        };
        let allowed: Vec<bool> = self
            .ledger
            .topo()
            .numa_nodes
            .iter()
            .zip(&all)
            .map(|(x, ok)| *ok && pin.contains(x.id))
            .collect();
        match self.bound(config, r, a.clone(), &allowed, Some(pin)) {
            Err(PlacementError::Unalignable { .. }) if r.eff.policy == Policy::BestEffort => {
                let mut p = self.bound(config, r, a, &all, None)?;
                p.assignment.aligned = false;
                p.assignment.reason = format!(
                    "best-effort: does not fit the pod's {}; {}",
                    fmt_nodes(pin),
                    p.assignment.reason
                );
                Ok(p)
            }
            other => other,
        }
    }

    /// The scheduler's part of a decision: `cpuset.mems` (and a shared container's CPUs) on
    /// the nodes it named, and whether its choice was honoured, in the reason and the outcome.
    fn with_choice(&self, r: &Resolved, mut plan: Plan) -> Plan {
        let a = &mut plan.assignment;
        if let Some(h) = &r.choice {
            let topo = self.ledger.topo();
            if !h.nodes.is_empty() {
                a.mems = topo.memory_nodes_for(&h.nodes.union(&a.numa_nodes));
                if !a.exclusive {
                    a.cpus = self.ledger.shared_on(&h.nodes);
                }
            }
            a.reason = format!("{}'s choice: {}", h.scheduler.label(), a.reason);
            a.scheduler_choice = Some(ChoiceOutcome {
                scheduler: h.scheduler,
                honoured: true,
            });
        } else if let Some((scheduler, why)) = &r.overridden {
            a.reason = format!(
                "{}; {}'s choice set aside (scheduler_choice: preferred): {}",
                a.reason,
                scheduler.label(),
                crate::untrusted::message(why)
            );
            a.scheduler_choice = Some(ChoiceOutcome {
                scheduler: *scheduler,
                honoured: false,
            });
        }
        plan
    }

    /// Policy `none`: devices as allocated, exclusive CPUs packed, memory not bound.
    fn unaligned(
        &self,
        config: &PlacementConfig,
        r: &Resolved,
        mut a: Assignment,
    ) -> Result<Plan, PlacementError> {
        let topo = self.ledger.topo();
        // Devices as allocated; in remap mode a GPU the plugin handed out may already be
        // another container's (remapped earlier), so such a GPU is swapped for a free one.
        let mut g: Vec<usize> = r
            .alloc_gpus
            .iter()
            .copied()
            .filter(|x| config.gpu_mode == GpuMode::Keep || self.ledger.gpu_free(*x))
            .collect();
        let extra: Vec<usize> = self
            .ledger
            .free_gpus()
            .into_iter()
            .filter(|x| !g.contains(x) && self.ledger.gpu_choosable(*x))
            .take(r.gpu_count.saturating_sub(g.len()))
            .collect();
        g.extend(extra);
        let (nic_idx, _) = nics::choose(&self.ledger, &g, &[], r.nic_count, &r.alloc_nics);
        if r.exclusive {
            let caps = numa::caps_for(&self.ledger, config.full_pcpus_only, r.isolated);
            let need = Need {
                cpus: r.cpus,
                whole: config.full_pcpus_only,
                ..Need::default()
            };
            let everywhere = vec![true; caps.len()];
            let nodes = numa::choose(topo, &caps, &everywhere, &need, r.eff.numa_choice)
                .ok_or_else(|| reject::insufficient(&self.ledger, config, r, &caps))?;
            a.cpus = self.pick_cpus(config, &caps, &nodes, r, None)?;
        } else {
            a.cpus = self.ledger.shared_pool();
        }
        a.mems = topo.memory_nodes_for(&topo.cpu_nodes());
        // Unbound: the pages come from any CPU node, first come first, all of them in `mems`.
        let caps = numa::caps(&self.ledger, false);
        let cpu_nodes: Vec<usize> = (0..caps.len()).filter(|i| caps[*i].has_cpus).collect();
        a.hugepages = numa::huge_split(&caps, &cpu_nodes, &r.hugepages)
            .ok_or_else(|| reject::insufficient(&self.ledger, config, r, &caps))?;
        a.gpus = g.iter().map(|x| topo.gpus[*x].pci_bus_id.clone()).collect();
        a.shared_gpus = bus_ids(topo, &r.shared_gpus);
        a.chosen_gpus = chosen(topo, &g, r);
        a.nics = nic_idx.iter().map(|x| topo.nics[*x].name.clone()).collect();
        a.aligned = false;
        a.reason = "policy none: no alignment".into();
        Ok(Plan {
            assignment: a,
            split: Vec::new(),
        })
    }

    pub(super) fn pick_cpus(
        &self,
        config: &PlacementConfig,
        caps: &[Cap],
        nodes: &[usize],
        r: &Resolved,
        shares: Option<&[u32]>,
    ) -> Result<CpuSet, PlacementError> {
        let avail: Vec<&CpuSet> = nodes.iter().map(|i| &caps[*i].avail).collect();
        // The headroom first: CPUs taken from it move no shared container.
        let pool = self.ledger.shared_pool();
        let topo = self.ledger.topo();
        let whole = config.full_pcpus_only;
        let picked = match shares {
            Some(s) => cpus::pick_shares_outside(topo, &avail, s, &pool, whole),
            None => cpus::pick_outside(topo, avail, &pool, r.cpus, whole),
        }
        .ok_or_else(|| reject::insufficient(&self.ledger, config, r, caps))?;
        if r.isolated {
            // Isolated CPUs are never in the shared pool: taking them cannot empty it.
            return Ok(picked);
        }
        // The shared pool never goes empty (the kubelet gets the same from its mandatory
        // reserved CPUs): containers without exclusive CPUs must run somewhere, and runtimes
        // ignore a cpuset update with no CPUs, so shared containers would silently stay on
        // the CPUs just handed out "exclusively". The headroom is given back to the pool
        // before it goes empty, so what counts is every free shareable CPU.
        let pool = self.ledger.free_cpus_for(false);
        if !pool.is_empty() && pool.is_subset(&picked) {
            return Err(PlacementError::SharedPoolExhausted {
                container: r.who.clone(),
                asked: r.cpus,
                pool: pool.to_string(),
            });
        }
        Ok(picked)
    }

    /// The joint choice on the allowed nodes: the search's best candidate, then the assignment
    /// on it.
    fn bound(
        &self,
        config: &PlacementConfig,
        r: &Resolved,
        a: Assignment,
        allowed: &[bool],
        pin: Option<&NodeSet>,
    ) -> Result<Plan, PlacementError> {
        let pod_totals = self.pod_totals.get(&a.pod_uid);
        let search = Search::new(
            &self.ledger,
            &self.links,
            config,
            r,
            allowed,
            pod_totals,
            pin,
        )
        .with_gpu_search(self.gpu_search);
        let caps = search.caps();
        if !search.host_has_enough() {
            return Err(reject::insufficient(&self.ledger, config, r, caps));
        }
        let best = if r.gpu_count > 0 {
            search.best_with_gpus()?
        } else {
            search.best_without_gpus()
        };
        match best {
            Some(c) if c.admissible => self.assign(config, r, a, &search, c),
            _ => Err(search.unalignable()),
        }
    }

    /// The assignment on the chosen candidate: CPUs (exclusive, or the shared pool on its
    /// nodes), the memory split, memory nodes, devices, whether it is aligned and why.
    fn assign(
        &self,
        config: &PlacementConfig,
        r: &Resolved,
        mut a: Assignment,
        search: &Search,
        c: Candidate,
    ) -> Result<Plan, PlacementError> {
        let topo = self.ledger.topo();
        let caps = search.caps();
        a.numa_nodes = self.ledger.ids(&c.nodes);
        a.cpus = if r.exclusive {
            let shares = spread::node_shares(&self.ledger, r, &c.nodes, &c.gpus, &c.nics, caps);
            self.pick_cpus(config, caps, &c.nodes, r, shares.as_deref())?
        } else {
            self.ledger.shared_on(&a.numa_nodes)
        };
        let split = self
            .ledger
            .split_memory(&c.nodes, r.memory)
            .ok_or_else(|| reject::insufficient(&self.ledger, config, r, caps))?;
        // The chosen nodes hold the pages (the search made sure): `mems` below covers them.
        a.hugepages = numa::huge_split(caps, &c.nodes, &r.hugepages)
            .ok_or_else(|| reject::insufficient(&self.ledger, config, r, caps))?;
        // The chosen nodes' memory; a chosen node without memory (memory-side initiators,
        // CXL and HBM systems) is bound to its nearest node with memory.
        a.mems = topo.memory_nodes_for(&a.numa_nodes);
        if r.eff.mems == super::annotations::MemNodes::WithMemoryOnly {
            a.mems
                .extend_from(&numa::attached_memory_nodes(topo, &a.numa_nodes));
        }
        a.memory_bytes = r.memory;
        a.gpus = c
            .gpus
            .iter()
            .map(|x| topo.gpus[*x].pci_bus_id.clone())
            .collect();
        a.nics = c.nics.iter().map(|x| topo.nics[*x].name.clone()).collect();
        a.shared_gpus = bus_ids(topo, &r.shared_gpus);
        a.chosen_gpus = chosen(topo, &c.gpus, r);
        a.aligned = search.devices_inside(&c)
            && c.nodes.len() <= numa::min_width(&self.ledger, search.full_need()).max(1);
        a.reason = self.reason(&a, &c);
        Ok(Plan {
            assignment: a,
            split,
        })
    }

    /// Why, in one line: aligned or spanning, the GPU set's link score, the NICs' PCIe paths.
    fn reason(&self, a: &Assignment, c: &Candidate) -> String {
        let mut reason = if a.aligned {
            format!("aligned on {}", fmt_nodes(&a.numa_nodes))
        } else {
            format!("best-effort: spans {}", fmt_nodes(&a.numa_nodes))
        };
        if !c.gpus.is_empty() {
            reason.push_str(&format!(
                ", gpu link score {}",
                self.links.set_score(&c.gpus)
            ));
        }
        if !c.nics.is_empty() && !c.gpus.is_empty() {
            let lv: Vec<&str> = c
                .nics
                .iter()
                .map(|x| {
                    c.gpus
                        .iter()
                        .map(|y| nics::level(&self.ledger, *x, *y))
                        .min()
                        .unwrap_or(crate::topology::PcieLevel::CrossSocket)
                        .label()
                })
                .collect();
            reason.push_str(&format!(", nic path {}", lv.join("/")));
        }
        reason
    }
}

/// PCI bus ids of GPU indices.
fn bus_ids(topo: &Topology, idx: &[usize]) -> Vec<String> {
    idx.iter()
        .filter_map(|x| topo.gpus.get(*x))
        .map(|g| g.pci_bus_id.clone())
        .collect()
}

/// Bus ids of the GPUs of `gpus` the device plugin did not allocate: those nri-align chose,
/// and those the scheduler chose (the kubelet did not allocate them either).
fn chosen(topo: &Topology, gpus: &[usize], r: &Resolved) -> Vec<String> {
    let by_scheduler = |g: &usize| r.choice.as_ref().is_some_and(|h| h.gpus.contains(g));
    let mine: Vec<usize> = gpus
        .iter()
        .copied()
        .filter(|g| !r.alloc_gpus.contains(g) || by_scheduler(g))
        .collect();
    bus_ids(topo, &mine)
}
