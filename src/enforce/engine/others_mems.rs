//! Containers on a node where another NRI plugin owns `cpuset.mems` (`leave_to_others:
//! [mems]`, a DRA memory driver's plugin such as ffromani/dra-driver-memory): nri-align never
//! sets the field, and the memory nodes that plugin chose decide where the container's CPUs
//! go. They become the request's node choice, as a topology-aware scheduler's does
//! (`placement::scheduler`, source `memory-plugin`), so the search, the refusal under
//! `scheduler_choice: required` and the outcome metric are the scheduler's.
//!
//! CreateContainer shows the memory nodes where the other plugin's index is lower than
//! nri-align's. Where it is higher, PostStartContainer shows them, and a container whose CPUs
//! are elsewhere is placed again on those nodes, its devices kept. The same holds for memory
//! nodes that change after the start (UpdateContainer's new resources, the container as
//! Synchronize lists it): the CPUs follow, their update riding on that event's response.

use std::time::Instant;

use super::{log_decision, pod_name, Engine, Placer};
use crate::enforce::adjust::CpusetUpdate;
use crate::enforce::container::{ContainerView, PodView};
use crate::enforce::inputs::{build_request, Built};
use crate::enforce::state::Record;
use crate::placement::scheduler::{Scheduler, SchedulerChoice};
use crate::placement::{GpuMode, Request};
use crate::topology::NodeSet;

impl<P: Placer> Engine<P> {
    /// The NUMA nodes with CPUs that serve the memory nodes another plugin set in `c`;
    /// `None` when `mems` is not left, none is set, or the list does not parse (logged). A
    /// memory-only node (CXL, HBM) is served by the CPU node nearest to it.
    fn left_mems_nodes(&self, pod: &PodView, c: &ContainerView) -> Option<NodeSet> {
        let mems = &c.resources.cpuset_mems;
        if !self.config.leave_to_others.mems || self.cpus_left() || mems.is_unset() {
            return None;
        }
        let nodes = match mems.below(crate::topology::idset::MAX_ID) {
            Ok(n) if !n.is_empty() => n,
            _ => {
                tracing::warn!(pod = %pod_name(pod), container = %c.name, mems = %crate::untrusted::quoted(mems.text().trim()), "the memory nodes another plugin set are not a node list; placed as if none were set");
                return None;
            }
        };
        let topo = self.placer.topology();
        let with_cpus = || topo.numa_nodes.iter().filter(|m| !m.cpus.is_empty());
        Some(
            nodes
                .iter()
                .filter_map(|n| {
                    with_cpus()
                        .min_by_key(|m| (topo.distance(n, m.id), m.id))
                        .map(|m| m.id)
                })
                .collect(),
        )
    }

    /// At creation: the memory nodes another plugin set before nri-align was asked become the
    /// request's node choice. A scheduler's own choice is left as it is.
    pub(super) fn place_on_left_mems(&self, pod: &PodView, c: &ContainerView, built: &mut Built) {
        let Some(nodes) = self.left_mems_nodes(pod, c) else {
            return;
        };
        if let Some(choice) = &built.request.scheduler {
            tracing::info!(pod = %pod_name(pod), container = %c.name, nodes = %nodes, "{}'s choice places the container, not the memory nodes another plugin set", choice.scheduler.label());
            return;
        }
        tracing::info!(pod = %pod_name(pod), container = %c.name, nodes = %nodes, "memory nodes set by another plugin place the container");
        let mut choice = SchedulerChoice::new(Scheduler::MemoryPlugin);
        choice.nodes = nodes;
        built.request.scheduler = Some(choice);
    }

    /// For a decision re-made after a CRI update of recorded container `old`: its CPUs stay
    /// where the memory another plugin chose is. The nodes the update shows, else (an update
    /// that leaves `cpuset.mems` as it was sends none) those a memory plugin's nodes placed it
    /// on before; a scheduler's own choice is left as it is.
    pub(super) fn keep_left_mems(
        &self,
        pod: &PodView,
        c: &ContainerView,
        old: &Record,
        req: &mut Request,
    ) {
        if req.scheduler.is_some() || !self.config.leave_to_others.mems || self.cpus_left() {
            return;
        }
        let placed_there = old
            .assignment
            .scheduler_choice
            .is_some_and(|o| o.scheduler == Scheduler::MemoryPlugin && o.honoured);
        let nodes = match self.left_mems_nodes(pod, c) {
            Some(n) => n,
            None if placed_there && !old.assignment.numa_nodes.is_empty() => {
                old.assignment.numa_nodes.clone()
            }
            None => return,
        };
        let mut choice = SchedulerChoice::new(Scheduler::MemoryPlugin);
        choice.nodes = nodes;
        req.scheduler = Some(choice);
    }

    /// After creation (PostStartContainer shows what a plugin after nri-align set;
    /// UpdateContainer and Synchronize what it changed since): a recorded container whose NUMA nodes are not within those of the memory nodes another
    /// plugin set is placed again there, its devices kept. Returns its new cpuset and the
    /// pool's moves; nothing when it is where its memory is, was placed by a scheduler, or
    /// does not fit there (it keeps running where it is, and the log says so).
    pub(super) fn follow_left_mems(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
    ) -> Vec<CpusetUpdate> {
        // Every CRI update with an unchanged request comes here: nothing to do, and no record
        // copied, unless the memory nodes are another plugin's.
        if !self.config.leave_to_others.mems || self.cpus_left() {
            return Vec::new();
        }
        let Some(old) = self.doc.containers.get(&c.id).cloned() else {
            return Vec::new();
        };
        let by_scheduler = old
            .assignment
            .scheduler_choice
            .is_some_and(|o| o.scheduler != Scheduler::MemoryPlugin);
        if old.exempt || by_scheduler {
            return Vec::new();
        }
        let Some(nodes) = self.left_mems_nodes(pod, c) else {
            return Vec::new();
        };
        let now = &old.assignment.numa_nodes;
        if !now.is_empty() && now.is_subset(&nodes) {
            return Vec::new();
        }
        let started = Instant::now();
        let Ok(mut req) = build_request(self.placer.topology(), pod, c) else {
            return Vec::new();
        };
        req.allocated_gpus = old.assignment.gpus.clone();
        req.allocated_nics = old.assignment.nics.clone();
        self.keep_shared_nics(&old, &mut req);
        let mut choice = SchedulerChoice::new(Scheduler::MemoryPlugin);
        choice.nodes = nodes.clone();
        req.scheduler = Some(choice);
        // Placed with its own resources free; a panic meanwhile is undone by the plugin's
        // poisoned-lock recovery (`resync_placer`), as for a CRI update.
        self.placer.release(&c.id);
        let placed = self.placer.place(&req, GpuMode::Keep);
        let a = match placed.and_then(|a| self.keep_devices(a, &old.assignment)) {
            Ok(a) => a,
            Err(r) => {
                tracing::warn!(pod = %pod_name(pod), container = %c.name, nodes = %nodes, "not moved onto the nodes of the memory another plugin set: {}", r.message);
                if self.placer.restore(old.assignment.clone()).is_err() {
                    self.doc.containers.remove(&c.id);
                    self.persist();
                }
                return Vec::new();
            }
        };
        let mut updates: Vec<_> = CpusetUpdate::if_moved(&c.id, &a.cpus, &old.applied_cpus)
            .into_iter()
            .collect();
        let rec = Record {
            applied_cpus: a.cpus.clone(),
            memory_nodes_moved: old.memory_nodes_moved
                || (!old.assignment.mems.is_empty() && a.mems != old.assignment.mems),
            assignment: a.clone(),
            ..old
        };
        self.doc.containers.insert(c.id.clone(), rec);
        let (moved, timing) = self.persist_and_follow_pool(&c.id, started);
        updates.extend(moved);
        self.refresh_free();
        log_decision(pod, c, &a, timing, updates.len());
        updates
    }
}
