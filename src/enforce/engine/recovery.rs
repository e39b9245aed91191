//! Recovery: what the engine does when it (re)starts and when the runtime tells it what runs.
//! Restoring the state file, pruning records of containers that are gone (no Synchronize on
//! pre-launched NRI v0.6.1 plugins) and reconciling with Synchronize live here, apart from the
//! per-event handling in `mod.rs`, because they are the paths that must never allocate
//! one exclusive CPU or GPU twice after a crash.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::{Engine, Placer, StartState};
use crate::enforce::adjust::CpusetUpdate;
use crate::enforce::container::{ContainerView, PodView};
use crate::enforce::engine::reconcile::{exempt_record_as_running, reconcile, record_as_running};
use crate::enforce::state::{Loaded, Record};

impl<P: Placer> Engine<P> {
    /// The start-up sequence: restores the state file ([`Engine::start`]), then releases the
    /// records of containers that ended while nri-align was away, judged by their processes
    /// under `host_root` ([`Engine::prune_gone`]): runtimes that launch plugins on NRI v0.6.1
    /// send no Synchronize. Synchronize, when it comes, reconciles the rest.
    pub fn recover(&mut self, host_root: &Path) -> StartState {
        let state = self.start();
        match &state {
            StartState::Fresh => tracing::info!("no previous state"),
            StartState::Restored { restored, dropped } => tracing::info!(
                restored,
                dropped = dropped.len(),
                "previous decisions restored"
            ),
            StartState::Corrupt(why) => tracing::warn!("previous state unusable: {why}"),
        }
        // Each record by its own cgroup (or its id as a whole cgroup name), never by substring.
        let live = crate::host::procfs::live_containers(
            host_root,
            self.doc
                .containers
                .iter()
                .map(|(id, r)| (id.as_str(), r.cgroups_path.as_str())),
        );
        self.prune_gone(live.as_ref());
        state
    }

    /// Loads the state file and restores its decisions. Without a Synchronize (pre-launched
    /// plugins on NRI v0.6.1) this is all the engine will know.
    pub fn start(&mut self) -> StartState {
        // An outage the load found (a torn tail on a disk still full, a dir that could not be
        // opened) is counted and the daemon's retry timer armed there.
        let Some(loaded) = self.persistence.load(self.metrics.as_deref()) else {
            return StartState::Fresh;
        };
        let doc = match loaded {
            Loaded::Fresh => return StartState::Fresh,
            Loaded::Corrupt(why) => {
                tracing::warn!("state unusable, rebuilding from Synchronize: {why}");
                return StartState::Corrupt(why);
            }
            Loaded::Doc(doc) => doc,
        };
        let mut dropped = Vec::new();
        for (id, rec) in doc.containers {
            match self.placer.restore(rec.assignment.clone()) {
                Ok(()) => {
                    self.doc.containers.insert(id, rec);
                }
                Err(r) => dropped.push((id, r.message)),
            }
        }
        // What was restored is what the file has; only the refused records change it.
        self.doc.containers.clear_dirty();
        for (id, why) in &dropped {
            tracing::warn!("recorded decision not restored: {id}: {why}");
            self.doc.containers.mark_dirty(id);
        }
        if !dropped.is_empty() {
            // The file must not bring back what the placer refused.
            self.persist();
        }
        self.adopt_recorded_pool();
        self.refresh_free();
        StartState::Restored {
            restored: self.doc.containers.len(),
            dropped: dropped
                .into_iter()
                .map(|(id, why)| format!("{id}: {why}"))
                .collect(),
        }
    }

    /// Releases recorded containers that no longer run, judged by `live` (the ids that do),
    /// for runtimes that send no Synchronize (pre-launched plugins on NRI v0.6.1). `None`
    /// means liveness is unknown and nothing is released. Returns the released ids.
    pub fn prune_gone(&mut self, live: Option<&HashSet<String>>) -> Vec<String> {
        let Some(live) = live else {
            if !self.doc.containers.is_empty() {
                tracing::warn!(
                    "cannot see any recorded container's processes; keeping all records"
                );
            }
            return Vec::new();
        };
        // A pod's budget has no process: it goes when none of its pod's containers is left.
        let gone_member = |id: &String| !live.contains(id.as_str());
        let gone: Vec<String> = self
            .doc
            .containers
            .iter()
            .filter(|(id, rec)| match rec.pod_budget {
                None => gone_member(id),
                Some(_) => self
                    .doc
                    .containers
                    .pod_containers(&rec.pod_sandbox_id)
                    .iter()
                    .filter(|m| *m != *id)
                    .all(gone_member),
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            self.placer.release(id);
            if let Some(rec) = self.doc.containers.remove(id) {
                self.budget_member_gone(&rec, true);
            }
            tracing::info!(container = %id, "released: no process left");
        }
        if !gone.is_empty() {
            // Shared containers pick the new pool up with their next event or Synchronize.
            self.persist();
            self.refresh_free();
        }
        gone
    }

    /// Reconciles with the runtime's pods and containers (once, after the last chunk).
    pub fn synchronize(
        &mut self,
        pods: &[PodView],
        containers: &[ContainerView],
    ) -> Vec<CpusetUpdate> {
        self.pods.replace(pods);
        // Exempt containers are reconciled only when recorded (they follow the pool, never
        // onto CPUs held exclusively); the live ones without a record are recorded as exempt
        // below, after the plan, so they follow the pool too.
        let (managed, unrecorded_exempt): (Vec<ContainerView>, Vec<ContainerView>) =
            containers.iter().cloned().partition(|c| {
                self.doc.containers.contains_key(&c.id)
                    || !self.config.is_exempt(&self.namespace_of(&c.pod_sandbox_id))
            });
        let plan = reconcile(
            &self.doc,
            pods,
            &managed,
            self.placer.topology(),
            &self.config.placement,
        );
        let rebuilt: HashSet<&str> = plan
            .rebuild
            .iter()
            .map(|r| r.assignment.container_id.as_str())
            .collect();
        for id in &plan.release {
            self.placer.release(id);
            if let Some(rec) = self.doc.containers.remove(id) {
                self.budget_member_gone(&rec, true);
            }
            if rebuilt.contains(id.as_str()) {
                tracing::warn!(container = %id, "runs without its adjustment and with other devices than recorded: re-recording it as it runs");
            } else {
                tracing::info!(container = %id, "released: gone while nri-align was away");
            }
        }
        for rec in plan.keep.iter().filter(|r| r.stopped) {
            if let Some(mut r) = self.doc.containers.get_mut(&rec.assignment.container_id) {
                r.stopped = true;
            }
        }
        for mut rec in plan.rebuild {
            self.share_running_claims(&mut rec);
            self.track_running(rec);
        }
        for c in unrecorded_exempt.iter().filter(|c| c.state.is_live()) {
            let pod = pods
                .iter()
                .find(|p| p.id == c.pod_sandbox_id)
                .cloned()
                .unwrap_or_default();
            self.track_exempt(&pod, c);
        }
        self.adopt_recorded_pool();
        let mut updates = self.follow_pod_pools();
        updates.extend(self.follow_pool(None));
        updates.extend(self.follow_others_listed(pods, &managed));
        let updates = last_per_container(updates);
        let moving: HashSet<String> = updates.iter().map(|u| u.container_id.clone()).collect();
        // A recorded container that does not run with the recorded cpuset lost its adjustment
        // or an update: nri-align died after deciding and before the runtime applied the
        // answer (the runtime then creates the container without the plugin). The record is
        // what the ledger accounts for, so it is re-asserted.
        let mut updates = updates;
        let drifted = self.resend_drifted(&managed, &moving);
        updates.extend(self.own_updates(drifted));
        self.quota_after_restart(pods, &managed);
        self.persist();
        self.refresh_free();
        updates
    }

    /// What another plugin changed in the live `managed` containers while no event told
    /// nri-align (its own updates are none): where it owns the cpuset, the record follows what
    /// runs and the memory nodes follow it with this response; where it owns the memory
    /// nodes, the CPUs move onto them. Returns those moves and the pool's.
    fn follow_others_listed(
        &mut self,
        pods: &[PodView],
        managed: &[ContainerView],
    ) -> Vec<CpusetUpdate> {
        let mut updates = Vec::new();
        for c in managed.iter().filter(|c| c.state.is_live()) {
            self.check_systemd_device_links(c, &[]);
            if !self.cpus_left() && !self.config.leave_to_others.mems {
                continue;
            }
            let pod = pods
                .iter()
                .find(|p| p.id == c.pod_sandbox_id)
                .cloned()
                .unwrap_or_default();
            if self.cpus_left() {
                self.follow_others_update(&pod, c, &c.resources);
            } else {
                updates.extend(self.follow_left_mems(&pod, c));
            }
        }
        updates
    }

    /// The updates that re-assert the record of each live managed container that runs on
    /// other CPUs than recorded, except those the pool already moves (`moving`).
    fn resend_drifted(
        &self,
        managed: &[ContainerView],
        moving: &HashSet<String>,
    ) -> Vec<CpusetUpdate> {
        let mut updates = Vec::new();
        let online = self.placer.topology().online_cpus();
        let mut shared_resent = 0usize;
        for c in managed.iter().filter(|c| c.state.is_live()) {
            let Some(rec) = self.doc.containers.get(&c.id) else {
                continue;
            };
            if moving.contains(&c.id) {
                continue;
            }
            let has = super::reconcile::runtime_cpus(
                self.placer.topology(),
                &c.resources.cpuset_cpus,
                &c.id,
            )
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| online.clone());
            if has != rec.applied_cpus {
                if rec.assignment.exclusive {
                    tracing::warn!(container = %c.id, has = %has, recorded = %rec.applied_cpus, "exclusive container runs on other CPUs than recorded; re-applying the record");
                } else {
                    // Expected, not a fault: a pool update answered just before nri-align
                    // stopped, or CRI-O after its own restart (it reports a container's
                    // cpuset as created, not as updated since). One summary line below.
                    tracing::debug!(container = %c.id, has = %has, recorded = %rec.applied_cpus, "shared container's reported cpuset is not the pool's; re-sending the pool");
                    shared_resent += 1;
                }
                updates.push(CpusetUpdate {
                    container_id: c.id.clone(),
                    cpus: rec.applied_cpus.clone(),
                });
            }
        }
        if shared_resent > 0 {
            tracing::info!(containers = shared_resent, "re-sent the shared pool's cpuset to shared containers the runtime reports on another one (a pool update not applied before nri-align stopped, or CRI-O reporting cpusets as created after its restart)");
        }
        updates
    }

    /// Takes in a started container the engine has never seen (at PostStartContainer): the
    /// runtime created it while no plugin was connected, and the Synchronize of the plugin that
    /// connected next did not list it, its creation being unfinished (CRI-O lists a container
    /// only once created; seen in the plugin kill -9 burst). It is recorded as it runs, as
    /// Synchronize would have done, so nothing it holds is handed out again and, as a shared
    /// container, it follows the pool from now on. Returns the updates to send with the next
    /// response (it runs on every CPU until then). A known container is followed where
    /// another plugin owns its cpuset or memory nodes (`others.rs`, `others_mems.rs`); the
    /// updates are then its own move and the pool's. An exempt one is recorded as exempt: it
    /// holds nothing and follows the pool too.
    pub fn adopt_started(&mut self, pod: &PodView, c: &ContainerView) -> Vec<CpusetUpdate> {
        if self.doc.containers.contains_key(&c.id) {
            // Where another plugin owns the cpuset and comes after nri-align, the started
            // container shows what it set: the record follows, and so do its memory nodes
            // (`Engine::moved_mems`).
            if self.cpus_left() {
                self.follow_others_update(pod, c, &c.resources);
                return Vec::new();
            }
            // Where the memory nodes are another plugin's and it comes after nri-align, they
            // show now: the CPUs go where the memory is.
            return self.follow_left_mems(pod, c);
        }
        self.pods.insert_new(pod);
        if self.config.is_exempt(&pod.namespace) {
            self.track_exempt(pod, c);
        } else {
            tracing::warn!(container = %c.id, name = %c.name, "started without nri-align's adjustment (created while no plugin was connected, after Synchronize)");
            self.check_systemd_device_links(c, &[]);
            let rec = record_as_running(self.placer.topology(), &self.config.placement, pod, c);
            if !self.track_running(rec) {
                return Vec::new();
            }
        }
        let updates = self.follow_pool(None);
        self.persist();
        self.refresh_free();
        updates
    }

    /// Takes in what the runtime's CRI lists ([`crate::enforce::cri_listing`]), for runtimes that
    /// send no Synchronize: every created or running container the engine has no record of is
    /// recorded as it runs, as Synchronize would have done. Unlike Synchronize it never
    /// releases a record: a container created between the listing and this call is not in the
    /// listing and must keep what it holds. Exempt ones are recorded as exempt (they hold
    /// nothing and follow the pool). Returns how many containers were taken in and the pool
    /// updates to send with the next response.
    pub fn adopt_listed(
        &mut self,
        pods: &[PodView],
        containers: &[ContainerView],
    ) -> (usize, Vec<CpusetUpdate>) {
        let mut new_pods = false;
        for p in pods {
            new_pods |= self.pods.insert_new(p);
        }
        // Indexed once: a node lists hundreds of pods and containers.
        let pods_by_id: HashMap<&str, &PodView> = pods.iter().map(|p| (p.id.as_str(), p)).collect();
        let mut adopted = 0usize;
        for c in containers.iter().filter(|c| c.state.is_live()) {
            if self.doc.containers.contains_key(&c.id) {
                continue;
            }
            // A container of a pod the listing missed (removed in between) still holds its CPUs.
            let orphan;
            let pod = match pods_by_id.get(c.pod_sandbox_id.as_str()).copied() {
                Some(p) => p,
                None => {
                    orphan = PodView {
                        id: c.pod_sandbox_id.clone(),
                        ..PodView::default()
                    };
                    &orphan
                }
            };
            if self.config.is_exempt(&pod.namespace) {
                adopted += usize::from(self.track_exempt(pod, c));
                continue;
            }
            tracing::warn!(container = %c.id, name = %c.name, "running without a record (state lost, or created while nri-align was away): recording it as it runs");
            self.check_systemd_device_links(c, &[]);
            let rec = record_as_running(self.placer.topology(), &self.config.placement, pod, c);
            if self.track_running(rec) {
                adopted += 1;
            }
        }
        if adopted == 0 {
            if new_pods {
                self.refresh_free();
            }
            return (0, Vec::new());
        }
        let updates = self.follow_pool(None);
        self.persist();
        self.refresh_free();
        (adopted, updates)
    }

    /// Records a running container of an exempt namespace as exempt, so that it follows the
    /// shared pool from now on. `false` when the placer refuses even that.
    fn track_exempt(&mut self, pod: &PodView, c: &ContainerView) -> bool {
        let rec = exempt_record_as_running(self.placer.topology(), pod, c);
        if let Err(r) = self.placer.restore(rec.assignment.clone()) {
            tracing::warn!(container = %c.id, "not tracked: {}", r.message);
            return false;
        }
        tracing::info!(container = %c.id, name = %c.name, cpus = %rec.applied_cpus, "exempt namespace, running without a record: recorded, follows the shared pool");
        self.doc.containers.insert(c.id.clone(), rec);
        true
    }

    /// Records a running container as it runs; when what it holds is already held, as a shared
    /// one. `false` when even that cannot be tracked.
    fn track_running(&mut self, mut rec: Record) -> bool {
        let id = rec.assignment.container_id.clone();
        let mut restored = self.placer.restore(rec.assignment.clone());
        if restored.is_err() && !rec.assignment.hugepages.is_empty() {
            // Its pages were laid over its nodes by their size, not by what others hold: where
            // they do not fit beside the others', track it without them rather than not at all.
            tracing::warn!(container = %id, "recorded without its huge pages: its nodes' pages are held by others");
            rec.assignment.hugepages.clear();
            restored = self.placer.restore(rec.assignment.clone());
        }
        if let Err(r) = restored {
            // Two running containers claim the same exclusive CPUs: keep it running but
            // count it as shared, so nothing is allocated twice.
            tracing::warn!(container = %id, "recorded as shared: {}", r.message);
            rec.assignment.exclusive = false;
            rec.assignment.gpus.clear();
            rec.assignment.nics.clear();
            if let Err(r) = self.placer.restore(rec.assignment.clone()) {
                tracing::warn!(container = %id, "not tracked: {}", r.message);
                return false;
            }
        }
        tracing::info!(container = %id, cpus = %rec.assignment.cpus, "recorded as running");
        self.doc.containers.insert(id, rec);
        true
    }
}

/// `updates` with each container once, at the cpuset its last update names (a later pool
/// move supersedes an earlier one), in the order each was first named.
fn last_per_container(updates: Vec<CpusetUpdate>) -> Vec<CpusetUpdate> {
    let mut out: Vec<CpusetUpdate> = Vec::with_capacity(updates.len());
    let mut at: HashMap<String, usize> = HashMap::new();
    for u in updates {
        match at.get(&u.container_id) {
            Some(&i) => out[i] = u,
            None => {
                at.insert(u.container_id.clone(), out.len());
                out.push(u);
            }
        }
    }
    out
}
