//! The shared pool under the running containers: moving the shared containers after it when
//! an exclusive allocation, a release or a reload changes it, and refusing a configuration
//! that would leave it empty.

use super::{Engine, EngineError, Placer};
use crate::config::Config;
use crate::enforce::adjust::CpusetUpdate;
use crate::enforce::state::GroupKey;
use crate::placement::cpus::shared_on;
use crate::topology::CpuSet;

use super::lifecycle::exempt_target;

impl<P: Placer> Engine<P> {
    /// Refuses a configuration that, with the CPUs held exclusively now, would leave no shared
    /// CPU (the next shared container would get an empty cpuset, which runtimes read as
    /// "every CPU"), or that reserves a CPU a container holds exclusively.
    pub(super) fn check_live_allocations(&self, config: &Config) -> Result<(), EngineError> {
        let topo = self.placer.topology();
        let reserved = &config.placement.reserved_cpus;
        let mut held = CpuSet::new();
        for r in self.doc.containers.values() {
            if r.assignment.exclusive {
                held.extend_from(&r.assignment.cpus);
            }
        }
        let invalid = |message: String| {
            EngineError::Config(crate::config::ConfigError::Invalid {
                origin: "reload".into(),
                message: format!("{message}; the configuration in force is kept"),
            })
        };
        let clash = reserved.intersection(&held);
        if !clash.is_empty() {
            return Err(invalid(format!(
                "reserved_cpus {reserved} includes CPUs {clash} that containers hold exclusively \
                 (they keep them until removed): reserve other CPUs or remove those containers first"
            )));
        }
        // Online now, not at start: a CPU offlined since cannot be a shared one.
        let mut pool = self.placer.online();
        pool.subtract(reserved);
        pool.subtract(&held);
        pool.subtract(&topo.isolated_cpus);
        if pool.is_empty() {
            return Err(invalid(format!(
                "reserved_cpus {reserved} with the {} CPUs held exclusively ({held}) leaves no \
                 shared CPU for the other containers",
                held.len()
            )));
        }
        Ok(())
    }

    /// Gives the placer back the pool the shared containers were last moved onto, read from
    /// the records (after a restart, or once Synchronize rebuilt them), so that an exclusive
    /// headroom kept out of it stays out and nobody moves for the restart itself. The pool is
    /// the union of what the aligned shared groups run on: each runs on the pool on its
    /// nodes (or the whole pool), never on a CPU outside it.
    pub(super) fn adopt_recorded_pool(&mut self) {
        if self.cpus_left() {
            // Another plugin sets the shared containers' CPUs: they say nothing of the pool.
            return;
        }
        let mut pool = CpuSet::new();
        for (key, group) in self.doc.containers.groups() {
            if let (GroupKey::Nodes(_), Some(cpus)) = (key, group.aligned_to()) {
                pool.extend_from(cpus);
            }
        }
        if !pool.is_empty() {
            self.placer.adopt_pool(&pool);
        }
    }

    /// Moves every shared container (but `except`, which gets the pool in its own adjustment)
    /// onto the current pool and records what was sent. A shared container bound to NUMA nodes
    /// (pod scope, or its GPUs' node) follows the pool on those nodes only: moving it onto the
    /// whole pool would take a pod-scoped sidecar off its pod's node at the next exclusive
    /// allocation.
    ///
    /// The cost is proportional to what moves: the shared containers are grouped by the nodes
    /// they follow, and a group whose members all run on what the pool gives its nodes now
    /// is skipped whole (a shared container's creation moves nobody; an exclusive one moves
    /// the groups whose nodes lost CPUs, each member once).
    pub(super) fn follow_pool(&mut self, except: Option<&str>) -> Vec<CpusetUpdate> {
        if self.cpus_left() {
            // The other plugin moves its shared pool itself.
            return Vec::new();
        }
        let pool = self.placer.shared_pool();
        if pool.is_empty() {
            // Runtimes ignore a cpuset update without CPUs; sending one would only make the
            // record claim a move that never happened. Placement keeps the pool non-empty,
            // so this needs a reload that reserved the last shared CPUs.
            tracing::warn!("shared pool is empty: shared containers stay where they are");
            return Vec::new();
        }
        let topo = self.placer.topology();
        // Every shared group follows the pool on its nodes; the exempt containers follow the
        // reserved CPUs, or the pool when none are reserved.
        let exempt_target = exempt_target(&self.config.placement.reserved_cpus, &pool);
        let moves: Vec<(GroupKey, CpuSet)> = self
            .doc
            .containers
            .groups()
            .filter_map(|(key, group)| {
                let target = match key {
                    GroupKey::Nodes(nodes) => shared_on(topo, &pool, nodes),
                    GroupKey::Exempt => exempt_target.clone(),
                };
                (group.aligned_to() != Some(&target)).then(|| (key.clone(), target))
            })
            .collect();
        // Sized once: grown by doubling, the list of a 5,000-container pool was copied a
        // dozen times.
        let members = moves
            .iter()
            .filter_map(|(key, _)| self.doc.containers.group(key))
            .map(|g| g.len())
            .sum();
        let mut updates = Vec::with_capacity(members);
        for (key, target) in &moves {
            self.doc.containers.move_group(key, target, except, |id| {
                updates.push(CpusetUpdate {
                    container_id: id.to_string(),
                    cpus: target.clone(),
                })
            });
        }
        // Runtimes apply updates in the order given; a stable order keeps logs comparable
        // (one group's are in order already).
        if moves.len() > 1 {
            updates.sort_by(|a, b| a.container_id.cmp(&b.container_id));
        }
        updates
    }
}
