//! The allocator: resolves a request (annotations, Guaranteed rule, devices), makes the joint
//! GPU-first choice under the policy, and records it in the ledger.

use std::collections::HashMap;
use std::sync::Arc;

use super::annotations::MemNodes;
use super::cpus;
use super::error::{fmt_bytes, fmt_nodes, PlacementError};
use super::gpus::{self, LinkTable};
use super::ledger::{Ledger, NodeFree};
use super::nics;
use super::numa::{self, Cap, Need};
use super::policy::{GpuMode, PlacementConfig, Policy, Scope};
use super::reject;
use super::request::{Assignment, Request};
pub use super::resolve::{resolve, Resolved};
use crate::topology::{CpuSet, NodeSet, Topology};

/// Owns the live allocations and decides placements.
#[derive(Debug, Clone)]
pub struct Allocator {
    ledger: Ledger,
    config: PlacementConfig,
    links: LinkTable,
    pod_nodes: HashMap<String, NodeSet>,
    pod_totals: HashMap<String, PodTotals>,
}

/// What a whole pod asks for, when it is known before its first container is placed
/// (`simulate` knows the workload; the plugin can read the pod's resources). In pod scope the
/// first container pins the pod's node set, so that set is chosen to hold the whole pod when
/// one within the policy's width can; otherwise the first container is sized alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodTotals {
    /// Exclusive CPUs of all the pod's containers.
    pub exclusive_cpus: u32,
    /// Memory limits of the containers that are bound to nodes, summed.
    pub memory_bytes: u64,
    /// GPUs of all containers.
    pub gpus: u32,
    /// NICs of all containers.
    pub nics: u32,
}

impl PodTotals {
    /// Totals of `reqs` by the kubelet's Guaranteed rule (annotations aside: a sizing hint).
    pub fn of(reqs: &[Request]) -> PodTotals {
        let mut t = PodTotals::default();
        for r in reqs {
            let m = r.cpu_request_milli;
            if r.cpu_limit_milli == Some(m) && m > 0 && m % 1000 == 0 {
                t.exclusive_cpus = t
                    .exclusive_cpus
                    .saturating_add(u32::try_from(m / 1000).unwrap_or(u32::MAX));
                t.memory_bytes = t
                    .memory_bytes
                    .saturating_add(r.memory_limit_bytes.unwrap_or(0));
            }
            t.gpus = t.gpus.saturating_add(r.allocated_gpus.len() as u32);
            t.nics = t.nics.saturating_add(r.allocated_nics.len() as u32);
        }
        t
    }
}

/// A candidate: node indices in order, GPU indices, NIC indices, admissible under the policy.
type Pick = (Vec<usize>, Vec<usize>, Vec<usize>, bool);

/// How a candidate GPU set ranks, best last: admissible under the policy; fewer pairs without
/// NVLink; link score plus look-ahead; fewer, then closer nodes; better NIC paths; more link
/// score left among the free GPUs; the tightest CPU fit.
type Key = (
    bool,
    std::cmp::Reverse<usize>,
    u32,
    std::cmp::Reverse<usize>,
    std::cmp::Reverse<u32>,
    std::cmp::Reverse<u32>,
    u32,
    std::cmp::Reverse<u32>,
);

struct Choice {
    a: Assignment,
    split: Vec<(usize, u64)>,
}

impl Allocator {
    /// An allocator with nothing allocated.
    pub fn new(topology: Arc<Topology>, config: PlacementConfig) -> Self {
        let links = LinkTable::new(&topology);
        Self {
            ledger: Ledger::new(topology, config.reserved_cpus.clone()),
            config,
            links,
            pod_nodes: HashMap::new(),
            pod_totals: HashMap::new(),
        }
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

    /// Decides and records.
    pub fn place(&mut self, req: &Request) -> Result<Assignment, PlacementError> {
        let c = self.decide(req)?;
        self.ledger.record(c.a.clone(), c.split)?;
        if !c.a.numa_nodes.is_empty() {
            self.pod_nodes
                .entry(c.a.pod_uid.clone())
                .or_insert_with(|| c.a.numa_nodes.clone());
        }
        Ok(c.a)
    }

    /// Decides without recording.
    pub fn plan(&self, req: &Request) -> Result<Assignment, PlacementError> {
        self.decide(req).map(|c| c.a)
    }

    /// Forgets a container; its exclusive CPUs, memory, GPUs and NICs come back.
    pub fn release(&mut self, container_id: &str) -> Option<Assignment> {
        let a = self.ledger.release(container_id)?;
        if !self.ledger.assignments().any(|x| x.pod_uid == a.pod_uid) {
            self.pod_nodes.remove(&a.pod_uid);
            self.pod_totals.remove(&a.pod_uid);
        }
        Some(a)
    }

    /// Re-records a persisted decision; refuses a CPU or GPU another container holds.
    pub fn restore(&mut self, a: Assignment) -> Result<(), PlacementError> {
        let topo = self.ledger.topo_arc();
        let order: Vec<usize> = a
            .numa_nodes
            .iter()
            .filter_map(|id| topo.node_index(id))
            .collect();
        let split = if a.memory_bytes == 0 {
            Vec::new()
        } else {
            self.ledger
                .split_memory(&order, a.memory_bytes)
                .ok_or_else(|| PlacementError::Restore {
                    container: a.container_id.clone(),
                    reason: format!(
                        "{} of memory no longer free on {}",
                        fmt_bytes(a.memory_bytes),
                        fmt_nodes(&a.numa_nodes)
                    ),
                })?
        };
        if !a.cpus.is_subset(&topo.online_cpus()) {
            return Err(PlacementError::Restore {
                container: a.container_id.clone(),
                reason: format!("cpus {} are not all online", a.cpus),
            });
        }
        let (uid, nodes) = (a.pod_uid.clone(), a.numa_nodes.clone());
        self.ledger.record(a, split)?;
        if !nodes.is_empty() {
            self.pod_nodes.entry(uid).or_insert(nodes);
        }
        Ok(())
    }

    /// Online minus reserved minus exclusively allocated CPUs (isolated ones excluded).
    pub fn shared_pool(&self) -> CpuSet {
        self.ledger.shared_pool()
    }

    /// The CPUs a shared-pool assignment should have with the pool as it is now: the pool on
    /// its NUMA nodes, or the whole pool when those nodes have none left.
    pub fn shared_cpus_for(&self, a: &Assignment) -> CpuSet {
        let pool = self.ledger.shared_pool();
        let topo = self.ledger.topo();
        let mut local = CpuSet::new();
        for id in a.numa_nodes.iter() {
            if let Some(n) = topo.node(id) {
                local.extend_from(&pool.intersection(&n.cpus));
            }
        }
        if local.is_empty() {
            pool
        } else {
            local
        }
    }

    /// Live assignments.
    pub fn assignments(&self) -> impl Iterator<Item = &Assignment> {
        self.ledger.assignments()
    }

    /// Free capacity per NUMA node.
    pub fn free_by_node(&self) -> Vec<NodeFree> {
        self.ledger.free_by_node()
    }

    /// Applies a reloaded configuration; allocations stay as they are.
    pub fn set_config(&mut self, config: PlacementConfig) {
        self.ledger.set_reserved(config.reserved_cpus.clone());
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

    /// Interconnect score of a GPU set (bus ids): NVLink/NVSwitch and PCIe pair scores summed.
    pub fn gpu_link_score(&self, bus_ids: &[String]) -> u32 {
        let idx: Vec<usize> = bus_ids
            .iter()
            .filter_map(|b| self.ledger.gpu_index(b).ok())
            .collect();
        self.links.set_score(&idx)
    }

    /// Resolves a request: annotations, the Guaranteed rule, device indices.
    pub fn resolve(&self, req: &Request) -> Result<Resolved, PlacementError> {
        resolve(&self.ledger, &self.config, req)
    }

    fn decide(&self, req: &Request) -> Result<Choice, PlacementError> {
        let r = self.resolve(req)?;
        let mut a = Assignment {
            container_id: req.container_id.clone(),
            container_name: req.container_name.clone(),
            pod_uid: req.pod.uid.clone(),
            pod_name: format!("{}/{}", req.pod.namespace, req.pod.name),
            exclusive: r.exclusive,
            policy: r.eff.policy,
            ..Assignment::default()
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
        if r.eff.policy == Policy::None {
            return self.unaligned(&r, a);
        }
        if !r.exclusive && r.gpu_count == 0 && r.nic_count == 0 && pinned.is_none() {
            a.cpus = self.ledger.shared_pool();
            a.mems = self.ledger.topo().cpu_nodes();
            a.aligned = true;
            a.reason = "shared pool; nothing to align".into();
            return Ok(Choice {
                a,
                split: Vec::new(),
            });
        }
        let n = self.ledger.topo().numa_nodes.len();
        let all = vec![true; n];
        let Some(pin) = pinned else {
            return self.bound(&r, a, &all, None);
        };
        let allowed: Vec<bool> = self
            .ledger
            .topo()
            .numa_nodes
            .iter()
            .map(|x| pin.contains(x.id))
            .collect();
        match self.bound(&r, a.clone(), &allowed, Some(pin)) {
            Err(PlacementError::Unalignable { .. }) if r.eff.policy == Policy::BestEffort => {
                let mut c = self.bound(&r, a, &all, None)?;
                c.a.aligned = false;
                c.a.reason = format!(
                    "best-effort: does not fit the pod's {}; {}",
                    fmt_nodes(pin),
                    c.a.reason
                );
                Ok(c)
            }
            other => other,
        }
    }

    /// Policy `none`: devices as allocated, exclusive CPUs packed, memory not bound.
    fn unaligned(&self, r: &Resolved, mut a: Assignment) -> Result<Choice, PlacementError> {
        let topo = self.ledger.topo();
        // Devices as allocated; in remap mode a GPU the plugin handed out may already be
        // another container's (remapped earlier), so such a GPU is swapped for a free one.
        let mut g: Vec<usize> = r
            .alloc_gpus
            .iter()
            .copied()
            .filter(|x| self.config.gpu_mode == GpuMode::Keep || self.ledger.gpu_free(*x))
            .collect();
        let extra: Vec<usize> = self
            .ledger
            .free_gpus()
            .into_iter()
            .filter(|x| !g.contains(x))
            .take(r.gpu_count.saturating_sub(g.len()))
            .collect();
        g.extend(extra);
        let (nic_idx, _) = nics::choose(&self.ledger, &g, &[], r.nic_count, &r.alloc_nics);
        if r.exclusive {
            let caps = numa::caps(&self.ledger, self.config.full_pcpus_only);
            let need = Need {
                cpus: r.cpus,
                whole: self.config.full_pcpus_only,
                ..Need::default()
            };
            let nodes = numa::choose(topo, &caps, &vec![true; caps.len()], &need)
                .ok_or_else(|| reject::insufficient(&self.ledger, &self.config, r, &caps))?;
            a.cpus = self.pick_cpus(&caps, &nodes, r)?;
        } else {
            a.cpus = self.ledger.shared_pool();
        }
        a.mems = topo.cpu_nodes();
        a.gpus = g.iter().map(|x| topo.gpus[*x].pci_bus_id.clone()).collect();
        a.nics = nic_idx.iter().map(|x| topo.nics[*x].name.clone()).collect();
        a.aligned = false;
        a.reason = "policy none: no alignment".into();
        Ok(Choice {
            a,
            split: Vec::new(),
        })
    }

    fn pick_cpus(
        &self,
        caps: &[Cap],
        nodes: &[usize],
        r: &Resolved,
    ) -> Result<CpuSet, PlacementError> {
        let avail: Vec<CpuSet> = nodes.iter().map(|i| caps[*i].avail.clone()).collect();
        let picked = cpus::pick(
            self.ledger.topo(),
            &avail,
            r.cpus,
            self.config.full_pcpus_only,
        )
        .ok_or_else(|| reject::insufficient(&self.ledger, &self.config, r, caps))?;
        // The shared pool never goes empty (the kubelet gets the same from its mandatory
        // reserved CPUs): containers without exclusive CPUs must run somewhere, and runtimes
        // ignore a cpuset update with no CPUs, so shared containers would silently stay on
        // the CPUs just handed out "exclusively".
        let pool = self.ledger.shared_pool();
        if !pool.is_empty() && pool.is_subset(&picked) {
            return Err(PlacementError::SharedPoolExhausted {
                container: r.who.clone(),
                asked: r.cpus,
                pool: pool.to_string(),
            });
        }
        Ok(picked)
    }

    /// The joint choice on the allowed nodes.
    fn bound(
        &self,
        r: &Resolved,
        mut a: Assignment,
        allowed: &[bool],
        pin: Option<&NodeSet>,
    ) -> Result<Choice, PlacementError> {
        let topo = self.ledger.topo();
        let whole = self.config.full_pcpus_only;
        let caps = numa::caps(&self.ledger, whole);
        let keep = self.config.gpu_mode == GpuMode::Keep;
        let need = Need {
            cpus: if r.exclusive { r.cpus } else { 0 },
            whole,
            memory: r.memory,
            gpus: 0,
            nics: r.nic_count as u32,
            shared: !r.exclusive,
        };
        let full_need = Need {
            gpus: r.gpu_count as u32,
            ..need.clone()
        };
        let cpu_nodes: Vec<usize> = (0..caps.len()).filter(|i| caps[*i].has_cpus).collect();
        if !numa::fits(&caps, &cpu_nodes, &full_need) && (r.gpu_count == 0 || !keep) {
            return Err(reject::insufficient(&self.ledger, &self.config, r, &caps));
        }
        let limit = match r.eff.policy {
            Policy::SingleNumaNode => 1,
            Policy::Restricted => numa::min_width(&self.ledger, &full_need),
            _ => usize::MAX,
        };
        // The first container of a pod in pod scope pins the pod: size its node set for the
        // whole pod when the pod's totals are known (the kubelet's pod scope sums them too).
        let pod_need = (r.eff.scope == Scope::Pod && pin.is_none())
            .then(|| self.pod_totals.get(&a.pod_uid))
            .flatten()
            .map(|t| Need {
                cpus: if r.exclusive {
                    need.cpus.max(t.exclusive_cpus)
                } else {
                    need.cpus
                },
                memory: need.memory.max(t.memory_bytes),
                gpus: need.gpus.max(t.gpus),
                nics: need.nics.max(t.nics),
                ..need.clone()
            })
            .filter(|p| *p != need);
        // Nodes for the pod when they stay within the policy's width, else for the container.
        let sized = |found: Option<Vec<usize>>, own: &dyn Fn() -> Option<Vec<usize>>| match found {
            Some(n) if n.len() <= limit => Some(n),
            _ => own(),
        };
        let fixed_nics = if keep {
            r.alloc_nics.clone()
        } else {
            Vec::new()
        };
        // (nodes in order, gpus, nics, admissible)
        let mut best: Option<Pick> = None;
        if r.gpu_count > 0 {
            let must = if keep {
                r.alloc_gpus.clone()
            } else {
                Vec::new()
            };
            let free = self.ledger.free_gpus();
            let sets = gpus::candidates(&self.links, &free, &must, r.gpu_count);
            if sets.is_empty() {
                return Err(reject::insufficient(&self.ledger, &self.config, r, &caps));
            }
            let mut best_key = None;
            let exact = gpus::lookahead_exact(sets.len(), free.len(), r.gpu_count);
            for s in sets {
                // The GPU-only part of the key first: once an admissible set is known, a set
                // whose links (with the look-ahead) rank lower cannot win, and skipping its node
                // growth and NIC pairing keeps 8-of-16 searches in milliseconds.
                let unlinked = std::cmp::Reverse(gpus::unlinked_pairs(&self.links, &s));
                // Anti-fragmentation: this set plus the best sets of the same and of twice the
                // size left after it (go-gpuallocator's partition idea, one step deep), never
                // at the price of a pair without NVLink.
                let rest: Vec<usize> = free.iter().copied().filter(|g| !s.contains(g)).collect();
                let score = self.links.set_score(&s)
                    + gpus::lookahead(&self.links, &rest, r.gpu_count, exact);
                if let Some((k, _)) = &best_key {
                    let k: &Key = k;
                    if k.0 && (unlinked, score) < (k.1, k.2) {
                        continue;
                    }
                }
                let mut seed: Vec<usize> = Vec::new();
                for g in &s {
                    if let Some(i) = self.ledger.gpu_node(*g) {
                        if allowed[i] && !seed.contains(&i) {
                            seed.push(i);
                        }
                    }
                }
                let pod_nodes = pod_need
                    .as_ref()
                    .and_then(|p| numa::grow(topo, &caps, allowed, seed.clone(), p));
                let own = || numa::grow(topo, &caps, allowed, seed.clone(), &need);
                let Some(nodes) = sized(pod_nodes, &own) else {
                    continue;
                };
                let (nic_idx, nic_cost) =
                    nics::choose(&self.ledger, &s, &nodes, r.nic_count, &fixed_nics);
                let inside = s
                    .iter()
                    .all(|g| self.ledger.gpu_node(*g).is_some_and(|i| nodes.contains(&i)))
                    && nic_idx
                        .iter()
                        .all(|x| self.ledger.nic_node(*x).is_some_and(|i| nodes.contains(&i)));
                let admissible =
                    r.eff.policy == Policy::BestEffort || (inside && nodes.len() <= limit);
                let leftover: u32 = nodes.iter().map(|i| caps[*i].cpu).sum();
                let key: Key = (
                    admissible,
                    unlinked,
                    score,
                    std::cmp::Reverse(nodes.len()),
                    std::cmp::Reverse(numa::spread(topo, &nodes)),
                    std::cmp::Reverse(nic_cost),
                    self.links.remaining(&free, &s),
                    std::cmp::Reverse(leftover),
                );
                // Ties go to the lowest GPU indices, whatever order the candidates came in.
                let better = match &best_key {
                    None => true,
                    Some((k, bs)) => key > *k || (key == *k && s < *bs),
                };
                if better {
                    best_key = Some((key, s.clone()));
                    best = Some((nodes, s, nic_idx, admissible));
                }
            }
        } else if let Some(nodes) = sized(
            pod_need
                .as_ref()
                .and_then(|p| numa::choose(topo, &caps, allowed, p)),
            &|| numa::choose(topo, &caps, allowed, &need),
        ) {
            let (nic_idx, _) = nics::choose(&self.ledger, &[], &nodes, r.nic_count, &fixed_nics);
            let inside = nic_idx
                .iter()
                .all(|x| self.ledger.nic_node(*x).is_some_and(|i| nodes.contains(&i)));
            let ok = r.eff.policy == Policy::BestEffort || (inside && nodes.len() <= limit);
            best = Some((nodes, Vec::new(), nic_idx, ok));
        }
        let Some((nodes, g, nic_idx, true)) = best else {
            return Err(reject::unalignable(
                &self.ledger,
                r,
                &caps,
                allowed,
                &reject::Shape { pin, limit },
                &full_need,
            ));
        };
        a.cpus = if r.exclusive {
            self.pick_cpus(&caps, &nodes, r)?
        } else {
            let pool = self.ledger.shared_pool();
            let local: CpuSet = nodes.iter().fold(CpuSet::new(), |acc, i| {
                acc.union(&pool.intersection(&topo.numa_nodes[*i].cpus))
            });
            if local.is_empty() {
                pool
            } else {
                local
            }
        };
        let split = self
            .ledger
            .split_memory(&nodes, r.memory)
            .ok_or_else(|| reject::insufficient(&self.ledger, &self.config, r, &caps))?;
        a.numa_nodes = self.ledger.ids(&nodes);
        a.mems = a.numa_nodes.clone();
        if r.eff.mems == MemNodes::WithMemoryOnly {
            a.mems
                .extend_from(&numa::attached_memory_nodes(topo, &a.numa_nodes));
        }
        a.memory_bytes = r.memory;
        a.gpus = g.iter().map(|x| topo.gpus[*x].pci_bus_id.clone()).collect();
        a.nics = nic_idx.iter().map(|x| topo.nics[*x].name.clone()).collect();
        a.aligned = g
            .iter()
            .all(|x| self.ledger.gpu_node(*x).is_some_and(|i| nodes.contains(&i)))
            && nic_idx
                .iter()
                .all(|x| self.ledger.nic_node(*x).is_some_and(|i| nodes.contains(&i)))
            && nodes.len() <= numa::min_width(&self.ledger, &full_need).max(1);
        let mut reason = if a.aligned {
            format!("aligned on {}", fmt_nodes(&a.numa_nodes))
        } else {
            format!("best-effort: spans {}", fmt_nodes(&a.numa_nodes))
        };
        if !g.is_empty() {
            reason.push_str(&format!(", gpu link score {}", self.links.set_score(&g)));
        }
        if !nic_idx.is_empty() && !g.is_empty() {
            let lv: Vec<&str> = nic_idx
                .iter()
                .map(|x| {
                    g.iter()
                        .map(|y| nics::level(&self.ledger, *x, *y))
                        .min()
                        .unwrap_or(crate::topology::PcieLevel::CrossSocket)
                        .label()
                })
                .collect();
            reason.push_str(&format!(", nic path {}", lv.join("/")));
        }
        a.reason = reason;
        Ok(Choice { a, split })
    }
}
