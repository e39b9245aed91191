//! CPU and memory hot-plug at run time. The topology is read once at start; what changes under
//! a running daemon is which of its CPUs are online (`echo 0 > cpuN/online`, a vCPU unplugged
//! through the hypervisor) and which nodes have memory. The two small files that say so
//! (`topology::read_online`) are read at every container event, every few seconds and at each
//! kernel uevent (`cli/run/hotplug.rs`), and a change is applied here:
//!
//! - an offline CPU leaves the shared pool (the shared containers get the smaller pool, sent
//!   and written the way a grown pool is after a removal) and is never handed out;
//! - an exclusive container that held it keeps its other CPUs and the offline one too (the
//!   ledger never holds less than the containers do), and is reported: one log line, the
//!   `held_cpus_offline` gauge, `verify` and `placements`. It gets a free CPU of its nodes
//!   instead only with `replace_offlined_cpus: true`;
//! - a CPU back online returns to the pool, or to its holder.
//!
//! A read that fails (a file gone mid hot-plug, a half-written list) changes nothing: the
//! topology in force stays, the failure is counted and logged once per kind.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use super::{Engine, Placer};
use crate::enforce::adjust::CpusetUpdate;
use crate::enforce::state::Records;
use crate::placement::cpus::pick_outside;
use crate::topology::{read_online, CpuSet, NodeSet, Online, OnlineError};

/// What the engine remembers between reads.
#[derive(Debug)]
pub(super) struct Watch {
    root: PathBuf,
    /// The last sets read (`None` before the first good read).
    last: Option<Online>,
    /// Kinds of failure already logged.
    logged: HashSet<&'static str>,
    /// Containers already reported as holding offline CPUs, with those CPUs.
    reported: BTreeMap<String, CpuSet>,
    /// Online CPUs unknown to the topology already reported.
    unknown: CpuSet,
}

impl Watch {
    fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            last: None,
            logged: HashSet::new(),
            reported: BTreeMap::new(),
            unknown: CpuSet::new(),
        }
    }

    /// Logs a failed read once per kind (at debug level after that).
    fn read_failed(&mut self, e: &OnlineError) {
        if self.logged.insert(e.kind()) {
            tracing::warn!(
                kind = e.kind(),
                "online CPUs or memory nodes not read, the topology in force is kept: {e} \
                 (said once per kind; nri_align_topology_read_failures_total counts them)"
            );
        } else {
            tracing::debug!(kind = e.kind(), "online sets not read: {e}");
        }
    }

    /// Warns of CPUs in `unknown` (online, unknown to the topology) not warned of before.
    fn report_unknown(&mut self, unknown: &CpuSet) {
        let new = unknown.difference(&self.unknown);
        self.unknown = unknown.clone();
        if !new.is_empty() {
            tracing::warn!(
                cpus = %new,
                "CPUs came online that were not online when the topology was read: they are \
                 not placed on until nri-align restarts (their core, cache and node are unknown)"
            );
        }
    }

    /// Logs each container of `held` (by id, with its offline CPUs) once per set of CPUs.
    fn report_offline_held(&mut self, held: BTreeMap<String, CpuSet>, records: &Records) {
        for (id, gone) in &held {
            if self.reported.get(id) != Some(gone) {
                let rec = records.get(id);
                tracing::warn!(
                    container = %id,
                    pod = %rec.map(|r| r.assignment.pod_name.as_str()).unwrap_or(""),
                    cpus = %rec.map(|r| r.assignment.cpus.to_string()).unwrap_or_default(),
                    offline = %gone,
                    "a container's exclusive CPUs went offline: it keeps the others and gets \
                     no replacement (replace_offlined_cpus: false); the CPUs are its again when \
                     they come back online"
                );
            }
        }
        self.reported = held;
    }
}

impl<P: Placer> Engine<P> {
    /// Follows the online CPUs and memory nodes of the host under `root` from now on (at each
    /// [`Engine::poll_hotplug`]).
    pub fn watch_hotplug(&mut self, root: &Path) {
        self.hotplug = Some(Watch::new(root));
    }

    /// Reads the online sets and applies a change since the last read. Returns the cpuset
    /// updates it causes (the shared containers, and replaced exclusive ones); nothing when
    /// nothing changed, hot-plug is not followed, or the read failed.
    pub fn poll_hotplug(&mut self) -> Vec<CpusetUpdate> {
        let Some(w) = self.hotplug.as_mut() else {
            return Vec::new();
        };
        let online = match read_online(&w.root) {
            Ok(o) => o,
            Err(e) => {
                self.read_failed(&e);
                return Vec::new();
            }
        };
        if w.last.as_ref() == Some(&online) {
            return Vec::new();
        }
        let first = w.last.replace(online.clone()).is_none();
        if first {
            // After a restart a container may hold a CPU that was offline before the
            // topology was read: reported even though nothing changed since.
            self.report_offline_held();
        }
        self.apply_online(&online)
    }

    fn read_failed(&mut self, e: &OnlineError) {
        if let Some(m) = &self.metrics {
            m.hotplug().read_failed(e.kind());
        }
        if let Some(w) = self.hotplug.as_mut() {
            w.read_failed(e);
        }
    }

    /// Applies online sets read from the host; returns the updates to send.
    fn apply_online(&mut self, online: &Online) -> Vec<CpusetUpdate> {
        let before = self.placer.online();
        let mem_before = self.placer.mem_offline();
        let mem_offline = self.mem_offline_of(online);
        // The placer's online CPUs leave out those outside the containers' cpuset.
        let outside = &self.placer.topology().outside_cpuset;
        if before == online.cpus.difference(outside) && mem_before == mem_offline {
            return Vec::new();
        }
        let unknown = self.placer.set_online(&online.cpus, &mem_offline);
        let after = self.placer.online();
        tracing::info!(
            online = %online.cpus,
            went_offline = %before.difference(&after),
            came_online = %after.difference(&before),
            memory_offline_nodes = %mem_offline,
            "online CPUs or memory nodes changed: the shared pool follows"
        );
        if let Some(m) = &self.metrics {
            m.hotplug().changed();
        }
        if let Some(w) = self.hotplug.as_mut() {
            w.report_unknown(&unknown);
        }
        let mut updates = self.replace_offlined();
        self.report_offline_held();
        let moved = self.follow_pool(None);
        let replaced: HashSet<String> = updates.iter().map(|u| u.container_id.clone()).collect();
        updates.extend(
            moved
                .into_iter()
                .filter(|u| !replaced.contains(&u.container_id)),
        );
        updates.extend(self.holders_of(&after.difference(&before), &replaced));
        self.persist();
        self.refresh_free();
        updates
    }

    /// Cpuset updates giving the exclusive holders of `back` (CPUs online again) their CPUs
    /// again, but those in `skip`: cgroup v1 takes an offlined CPU out of every cpuset for
    /// good, so without one the holder would never run on it again.
    fn holders_of(&self, back: &CpuSet, skip: &HashSet<String>) -> Vec<CpusetUpdate> {
        if back.is_empty() || self.cpus_left() {
            return Vec::new();
        }
        self.doc
            .containers
            .iter()
            .filter(|(id, r)| {
                r.assignment.exclusive
                    && !r.assignment.cpus.is_disjoint(back)
                    && !skip.contains(*id)
            })
            .map(|(id, r)| CpusetUpdate {
                container_id: id.clone(),
                cpus: r.applied_cpus.clone(),
            })
            .collect()
    }

    /// The nodes of the topology whose memory is not online in `online` (none when the host
    /// has no node directory).
    fn mem_offline_of(&self, online: &Online) -> NodeSet {
        let Some(with_memory) = &online.mem_nodes else {
            return NodeSet::new();
        };
        self.placer
            .topology()
            .numa_nodes
            .iter()
            .filter(|n| n.memory_bytes > 0 && !with_memory.contains(n.id))
            .map(|n| n.id)
            .collect()
    }

    /// The exclusive containers that hold CPUs which are offline now, with those CPUs.
    fn offline_holders(&self) -> BTreeMap<String, CpuSet> {
        let online = self.placer.online();
        self.doc
            .containers
            .iter()
            .filter(|(_, r)| r.assignment.exclusive)
            .filter_map(|(id, r)| {
                let gone = r.assignment.cpus.difference(&online);
                (!gone.is_empty()).then(|| (id.clone(), gone))
            })
            .collect()
    }

    /// Logs each container that holds CPUs gone offline once per set of CPUs, and sets the
    /// gauge to how many held CPUs are offline.
    fn report_offline_held(&mut self) {
        let held = self.offline_holders();
        if let Some(m) = &self.metrics {
            m.hotplug()
                .set_held_offline(held.values().map(CpuSet::len).sum());
        }
        if let Some(w) = self.hotplug.as_mut() {
            w.report_offline_held(held, &self.doc.containers);
        }
    }

    /// With `replace_offlined_cpus`, gives each exclusive container that holds offline CPUs
    /// as many free CPUs of its nodes instead; returns their cpuset updates. A container for
    /// which too few are free keeps what it has (and is reported).
    fn replace_offlined(&mut self) -> Vec<CpusetUpdate> {
        if !self.config.replace_offlined_cpus || self.cpus_left() {
            return Vec::new();
        }
        let mut updates = Vec::new();
        for (id, gone) in self.offline_holders() {
            if let Some(cpus) = self.replace_one(&id, &gone) {
                updates.push(CpusetUpdate {
                    container_id: id,
                    cpus,
                });
            }
        }
        updates
    }

    /// Replaces `gone` in container `id`'s decision by free CPUs of its nodes; its new CPUs.
    fn replace_one(&mut self, id: &str, gone: &CpuSet) -> Option<CpuSet> {
        let old = self.doc.containers.get(id)?.assignment.clone();
        let topo = self.placer.topology();
        let free = self.placer.free_by_node();
        let nodes: Vec<CpuSet> = free
            .iter()
            .filter(|n| old.numa_nodes.is_empty() || old.numa_nodes.contains(n.node))
            .map(|n| n.cpus.difference(&topo.isolated_cpus))
            .collect();
        // From the exclusive headroom first, as for a new exclusive container.
        let pool = self.placer.shared_pool();
        let Some(new) = pick_outside(topo, &nodes, &pool, gone.len() as u32, false) else {
            tracing::warn!(container = %id, offline = %gone, "no free CPU on the container's nodes to replace its offline CPUs: it keeps the others");
            return None;
        };
        let mut a = old.clone();
        a.cpus = old.cpus.difference(gone).union(&new);
        self.placer.release(id);
        if let Err(r) = self.placer.restore(a.clone()) {
            tracing::error!(container = %id, "offline CPUs not replaced: {}", r.message);
            if let Err(r) = self.placer.restore(old) {
                tracing::error!(container = %id, "previous decision lost: {}", r.message);
            }
            return None;
        }
        tracing::warn!(container = %id, offline = %gone, replaced_by = %new, cpus = %a.cpus, "a container's exclusive CPUs went offline: replaced by free CPUs of its nodes (replace_offlined_cpus: true)");
        if let Some(m) = &self.metrics {
            m.hotplug().replaced(gone.len());
        }
        let cpus = a.cpus.clone();
        if let Some(mut rec) = self.doc.containers.get_mut(id) {
            rec.applied_cpus = cpus.clone();
            rec.assignment = a;
        }
        Some(cpus)
    }
}

#[cfg(test)]
#[path = "hotplug_tests.rs"]
mod tests;
