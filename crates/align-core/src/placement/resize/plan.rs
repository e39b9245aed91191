//! The allocator's side of an in-place resize: the new request resolved as at admission, the
//! CPUs chosen by `placement::resize` next to what the container holds, memory
//! nodes widened to follow them, its devices untouched, and a refusal that says what is free
//! next to it.

use super::{GrowRoom, Holding};
use crate::placement::allocator::{Allocator, Plan};
use crate::placement::assignment::{Assignment, MemoryPolicy};
use crate::placement::cpus;
use crate::placement::error::{fmt_bytes, fmt_nodes, PlacementError, ResizeRefusal};
use crate::placement::ledger::Ledger;
use crate::placement::policy::{GpuMode, PlacementConfig, Policy, ResizeShrink};
use crate::placement::request::Request;
use crate::placement::resolve::{resolve, Resolved};
use crate::topology::{CpuSet, NodeSet, Topology};

impl Allocator {
    /// Plans resizing container `req.container_id`, which holds `held`, to what `req` asks,
    /// keeping every CPU it holds on a grow and giving back only what `resize_shrink` allows
    /// on a shrink; its GPUs and NICs never change. `None` when this is not a resize of
    /// exclusive CPUs in place (the container is not recorded, holds no exclusive CPUs, would
    /// no longer have any, or changes between isolated and ordinary CPUs): the caller decides
    /// anew.
    pub fn plan_resize(
        &self,
        req: &Request,
        held: &Holding,
    ) -> Option<Result<Plan, PlacementError>> {
        let old = self.ledger.get(&req.container_id)?;
        if !old.exclusive || old.cpus != held.cpus {
            return None;
        }
        // Resolved as if it were not recorded: its own GPUs are not another's.
        let mut without = self.ledger.clone();
        without.release(&req.container_id);
        let config = PlacementConfig {
            gpu_mode: GpuMode::Keep,
            ..self.config.clone()
        };
        let r = match resolve(&without, &config, req) {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let was_isolated = held.cpus.is_subset(&self.ledger.topo().isolated_cpus);
        if !r.exclusive || r.cpus == 0 || r.isolated != was_isolated {
            return None;
        }
        Some(self.resized(&without, &r, old, held))
    }

    /// Records a plan of [`Allocator::plan_resize`] in place of the container's assignment; on
    /// a refusal the container keeps what it had.
    pub fn commit_resize(&mut self, plan: Plan) -> Result<Assignment, PlacementError> {
        let Plan {
            assignment: a,
            split,
        } = plan;
        self.ledger.replace(a.clone(), split)?;
        Ok(a)
    }

    fn resized(
        &self,
        without: &Ledger,
        r: &Resolved,
        old: &Assignment,
        held: &Holding,
    ) -> Result<Plan, PlacementError> {
        let topo = self.ledger.topo();
        let within = match r.eff.policy {
            // The policy admitted it on these nodes: a grow stays on them.
            Policy::SingleNumaNode | Policy::Restricted => Some(nodes_of(old, &held.cpus, topo)),
            Policy::None | Policy::BestEffort => None,
        };
        let near = Near {
            topo,
            r,
            old,
            held,
            free: without.free_cpus_for(r.isolated).difference(&held.cpus),
            within,
            whole_only: self.config.full_pcpus_only,
        };
        let cpus = if r.cpus > held.cpus.len() as u32 {
            near.grown(&self.ledger.shared_pool())?
        } else {
            near.shrunk(self.config.resize_shrink, &device_nodes(without, old))?
        };
        let a = widened(topo, old, &cpus, r.memory);
        let split = without.split_memory_of(&a).ok_or_else(|| {
            let free_mem: u64 = a
                .numa_nodes
                .iter()
                .filter_map(|id| topo.node_index(id))
                .map(|i| without.free_mem(i))
                .sum();
            near.refuse(
                format!(
                    "memory {} does not fit on NUMA {}",
                    fmt_bytes(a.memory_bytes),
                    fmt_nodes(&a.numa_nodes)
                ),
                format!("ask for at most {} of memory", fmt_bytes(free_mem)),
            )
        })?;
        Ok(Plan {
            assignment: a,
            split,
        })
    }
}

/// One resize's view of the host: the request, what the container holds and the free CPUs
/// it may grow on.
struct Near<'a> {
    topo: &'a Topology,
    r: &'a Resolved,
    old: &'a Assignment,
    held: &'a Holding,
    /// Free CPUs of the container's kind, its own excluded.
    free: CpuSet,
    /// Nodes it may grow on (`None`: any).
    within: Option<NodeSet>,
    whole_only: bool,
}

impl Near<'_> {
    /// The CPUs after a grow: every CPU held and the nearest free ones, the shared pool
    /// keeping one CPU.
    fn grown(&self, pool: &CpuSet) -> Result<CpuSet, PlacementError> {
        let (topo, r, held) = (self.topo, self.r, self.held);
        let more = r.cpus - held.cpus.len() as u32;
        let room = GrowRoom {
            free: &self.free,
            pool,
            within: self.within.as_ref(),
            whole_only: self.whole_only,
        };
        let added = super::grow(topo, &held.cpus, more, room).filter(|a| {
            let shareable_left = self.free.difference(a).difference(&topo.isolated_cpus);
            r.isolated || !shareable_left.is_empty()
        });
        match added {
            Some(added) => Ok(held.cpus.union(&added)),
            None => Err(self.refuse(
                format!("{more} more CPU(s) do not fit next to them"),
                format!(
                    "ask for at most {}, or free CPUs on its NUMA nodes",
                    self.most_fit()
                ),
            )),
        }
    }

    /// The CPUs after a shrink under `mode`, giving back those farthest from `anchors` when
    /// it reaches the admitted ones.
    fn shrunk(&self, mode: ResizeShrink, anchors: &NodeSet) -> Result<CpuSet, PlacementError> {
        let held = self.held;
        let had = held.cpus.len() as u32;
        let fewer = had - self.r.cpus;
        match super::shrink(self.topo, held, fewer, mode, anchors, self.whole_only) {
            Ok(given) => Ok(held.cpus.difference(&given)),
            Err(short) => Err(self.refuse(
                format!(
                    "it was admitted with {} CPU(s) and gives back only CPUs added since \
                     (resize_shrink: {mode})",
                    held.admitted.len()
                ),
                format!(
                    "ask for at least {}, or set resize_shrink: any",
                    had.saturating_sub(short.can_give)
                ),
            )),
        }
    }

    /// The most CPUs the container could have next to what it holds.
    fn most_fit(&self) -> u32 {
        let topo = self.topo;
        let near = free_within(topo, &self.free, self.within.as_ref());
        let mut n = cpus::capacity(topo, &near, self.whole_only);
        // The shared pool keeps one CPU when every shareable free CPU is next to it.
        let shareable = self.free.difference(&topo.isolated_cpus);
        if !self.r.isolated && !shareable.is_empty() && shareable.is_subset(&near) {
            let core = if self.whole_only {
                cpus::threads_per_core(topo)
            } else {
                1
            };
            n = n.saturating_sub(core);
        }
        self.held.cpus.len() as u32 + n
    }

    /// The refusal: `problem`, what the container holds and what is free next to it, `fits`.
    fn refuse(&self, problem: String, fits: String) -> PlacementError {
        let topo = self.topo;
        let near: Vec<String> = super::nearest_nodes(topo, &self.held.cpus, self.within.as_ref())
            .into_iter()
            .filter_map(|id| {
                let on = self.free.intersection(&topo.node(id)?.cpus);
                Some(if on.is_empty() {
                    format!("node {id}: 0")
                } else {
                    format!("node {id}: {} ({on})", on.len())
                })
            })
            .collect();
        PlacementError::Resize(Box::new(ResizeRefusal {
            container: self.r.who.clone(),
            policy: self.r.eff.policy,
            had: self.held.cpus.len() as u32,
            asked: self.r.cpus,
            problem,
            held: self.held.cpus.to_string(),
            nodes: fmt_nodes(&nodes_of(self.old, &self.held.cpus, topo)),
            free_near: if near.is_empty() {
                "none".into()
            } else {
                near.join(", ")
            },
            fits,
        }))
    }
}

/// `old` with CPUs `cpus`: its NUMA and memory nodes widened to the nodes of `cpus` (never
/// narrowed), its memory accounted as the new limit `memory` where it was bound, its devices
/// as they were.
fn widened(topo: &Topology, old: &Assignment, cpus: &CpuSet, memory: u64) -> Assignment {
    let cpu_nodes = cpu_nodes(topo, cpus);
    let mut numa_nodes = old.numa_nodes.clone();
    if !numa_nodes.is_empty() {
        numa_nodes.extend_from(&cpu_nodes);
    }
    let mut mems = old.mems.clone();
    if !mems.is_empty() {
        mems.extend_from(&topo.memory_nodes_for(&cpu_nodes));
    }
    let bound = !old.numa_nodes.is_empty() && (old.memory_bytes > 0 || memory > 0);
    let mempolicy = old
        .mempolicy
        .as_ref()
        .and_then(|p| MemoryPolicy::for_container(p.mode, topo, &mems, &cpu_nodes));
    Assignment {
        cpus: cpus.clone(),
        aligned: old.aligned && numa_nodes == old.numa_nodes,
        reason: format!(
            "resized in place from {} to {} CPUs (kept {})",
            old.cpus.len(),
            cpus.len(),
            old.cpus.intersection(cpus)
        ),
        memory_bytes: if bound { memory } else { 0 },
        numa_nodes,
        mems,
        mempolicy,
        ..old.clone()
    }
}

fn free_within(topo: &Topology, free: &CpuSet, within: Option<&NodeSet>) -> CpuSet {
    match within {
        None => free.clone(),
        Some(w) => free
            .iter()
            .filter(|c| {
                topo.cpus
                    .iter()
                    .any(|x| x.id == *c && w.contains(x.numa_node))
            })
            .collect(),
    }
}

/// The container's NUMA nodes: those it was aligned on, else those of its CPUs.
fn nodes_of(old: &Assignment, cpus: &CpuSet, topo: &Topology) -> NodeSet {
    if old.numa_nodes.is_empty() {
        cpu_nodes(topo, cpus)
    } else {
        old.numa_nodes.clone()
    }
}

fn cpu_nodes(topo: &Topology, cpus: &CpuSet) -> NodeSet {
    topo.cpus
        .iter()
        .filter(|c| cpus.contains(c.id))
        .map(|c| c.numa_node)
        .collect()
}

/// The NUMA nodes of the container's GPUs, NICs and generic devices (what a shrink keeps
/// closest).
fn device_nodes(ledger: &Ledger, a: &Assignment) -> NodeSet {
    let topo = ledger.topo();
    let gpus = a
        .gpus
        .iter()
        .chain(&a.shared_gpus)
        .filter_map(|b| ledger.gpu_index(b).ok())
        .filter_map(|g| ledger.gpu_node(g));
    let nics = a
        .nics
        .iter()
        .filter_map(|n| ledger.nic_index(n).ok())
        .filter_map(|n| ledger.nic_node(n));
    let generic = a
        .generic_devices
        .iter()
        .filter_map(|b| topo.pci(b))
        .filter_map(|d| d.numa_node)
        .filter_map(|id| topo.node_index(id));
    let idx: Vec<usize> = gpus.chain(nics).chain(generic).collect();
    ledger.ids(&idx)
}
