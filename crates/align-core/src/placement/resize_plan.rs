//! The allocator's side of an in-place resize: the new request resolved as at admission, the
//! CPUs chosen by `placement::resize` next to what the container holds, memory
//! nodes widened to follow them, its devices untouched, and a refusal that says what is free
//! next to it.

use super::super::cpus;
use super::super::error::{fmt_bytes, fmt_nodes, PlacementError, ResizeRefusal};
use super::super::ledger::Ledger;
use super::super::policy::{GpuMode, PlacementConfig, Policy};
use super::super::request::{Assignment, MemoryPolicy, Request};
use super::super::resize::{self, GrowRoom, Holding};
use super::super::resolve::{resolve, Resolved};
use super::{Allocator, Plan};
use crate::topology::{CpuSet, NodeSet};

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
        let whole_only = self.config.full_pcpus_only;
        let had = held.cpus.len() as u32;
        let within = match r.eff.policy {
            // The policy admitted it on these nodes: a grow stays on them.
            Policy::SingleNumaNode | Policy::Restricted => Some(nodes_of(old, &held.cpus, topo)),
            Policy::None | Policy::BestEffort => None,
        };
        let free = without.free_cpus_for(r.isolated).difference(&held.cpus);
        let refusal = |problem: String, fits: String| {
            refuse(topo, r, old, held, &free, within.as_ref(), problem, fits)
        };
        let cpus = if r.cpus > had {
            let room = GrowRoom {
                free: &free,
                pool: &self.ledger.shared_pool(),
                within: within.as_ref(),
                whole_only,
            };
            let fit = most_fit(topo, held, &free, within.as_ref(), whole_only, r.isolated);
            let added = resize::grow(topo, &held.cpus, r.cpus - had, room).filter(|a| {
                r.isolated
                    || !free
                        .difference(a)
                        .difference(&topo.isolated_cpus)
                        .is_empty()
            });
            let Some(added) = added else {
                return Err(refusal(
                    format!("{} more CPU(s) do not fit next to them", r.cpus - had),
                    format!("ask for at most {fit}, or free CPUs on its NUMA nodes"),
                ));
            };
            held.cpus.union(&added)
        } else {
            let anchors = device_nodes(without, old);
            match resize::shrink(topo, held, had - r.cpus, self.config.resize_shrink, &anchors, whole_only) {
                Ok(given) => held.cpus.difference(&given),
                Err(short) => {
                    return Err(refusal(
                        format!(
                            "it was admitted with {} CPU(s) and gives back only CPUs added since (resize_shrink: {})",
                            held.admitted.len(),
                            self.config.resize_shrink
                        ),
                        format!(
                            "ask for at least {}, or set resize_shrink: any",
                            had.saturating_sub(short.can_give)
                        ),
                    ))
                }
            }
        };
        let a = widened(topo, old, &cpus, r.memory);
        let order: Vec<usize> = a
            .numa_nodes
            .iter()
            .filter_map(|id| topo.node_index(id))
            .collect();
        let split = if a.memory_bytes == 0 {
            Vec::new()
        } else {
            without
                .split_memory(&order, a.memory_bytes)
                .ok_or_else(|| {
                    let free_mem: u64 = order.iter().map(|i| without.free_mem(*i)).sum();
                    refusal(
                        format!(
                            "memory {} does not fit on NUMA {}",
                            fmt_bytes(a.memory_bytes),
                            fmt_nodes(&a.numa_nodes)
                        ),
                        format!("ask for at most {} of memory", fmt_bytes(free_mem)),
                    )
                })?
        };
        Ok(Plan {
            assignment: a,
            split,
        })
    }
}

/// `old` with CPUs `cpus`: its NUMA and memory nodes widened to the nodes of `cpus` (never
/// narrowed), its memory accounted as the new limit `memory` where it was bound, its devices
/// as they were.
fn widened(
    topo: &crate::topology::Topology,
    old: &Assignment,
    cpus: &CpuSet,
    memory: u64,
) -> Assignment {
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

/// The most CPUs the container could have next to what it holds.
fn most_fit(
    topo: &crate::topology::Topology,
    held: &Holding,
    free: &CpuSet,
    within: Option<&NodeSet>,
    whole_only: bool,
    isolated: bool,
) -> u32 {
    let near = free_within(topo, free, within);
    let mut n = cpus::capacity(topo, &near, whole_only);
    // The shared pool keeps one CPU when every shareable free CPU is next to it.
    let shareable = free.difference(&topo.isolated_cpus);
    if !isolated && !shareable.is_empty() && shareable.is_subset(&near) {
        n = n.saturating_sub(if whole_only {
            cpus::threads_per_core(topo)
        } else {
            1
        });
    }
    held.cpus.len() as u32 + n
}

fn free_within(
    topo: &crate::topology::Topology,
    free: &CpuSet,
    within: Option<&NodeSet>,
) -> CpuSet {
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

#[allow(clippy::too_many_arguments)]
fn refuse(
    topo: &crate::topology::Topology,
    r: &Resolved,
    old: &Assignment,
    held: &Holding,
    free: &CpuSet,
    within: Option<&NodeSet>,
    problem: String,
    fits: String,
) -> PlacementError {
    let near: Vec<String> = resize::nearest_nodes(topo, &held.cpus, within)
        .into_iter()
        .filter_map(|id| {
            let on = free.intersection(&topo.node(id)?.cpus);
            Some(if on.is_empty() {
                format!("node {id}: 0")
            } else {
                format!("node {id}: {} ({on})", on.len())
            })
        })
        .collect();
    PlacementError::Resize(Box::new(ResizeRefusal {
        container: r.who.clone(),
        policy: r.eff.policy,
        had: held.cpus.len() as u32,
        asked: r.cpus,
        problem,
        held: held.cpus.to_string(),
        nodes: fmt_nodes(&nodes_of(old, &held.cpus, topo)),
        free_near: if near.is_empty() {
            "none".into()
        } else {
            near.join(", ")
        },
        fits,
    }))
}

/// The container's NUMA nodes: those it was aligned on, else those of its CPUs.
fn nodes_of(old: &Assignment, cpus: &CpuSet, topo: &crate::topology::Topology) -> NodeSet {
    if old.numa_nodes.is_empty() {
        cpu_nodes(topo, cpus)
    } else {
        old.numa_nodes.clone()
    }
}

fn cpu_nodes(topo: &crate::topology::Topology, cpus: &CpuSet) -> NodeSet {
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
