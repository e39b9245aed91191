//! The enforcement engine: what happens on each NRI event, independent of the wire. It turns a
//! container into a request, asks the placer, builds the adjustment and the shared-pool updates,
//! persists the decision, counts it and logs one line. `plugin.rs` only converts NRI messages to
//! and from these calls.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::placement::{Assignment, GpuMode, PodTotals};
use crate::topology::CpuSet;

use crate::enforce::adjust::{AdjustError, Adjustment, CpusetUpdate};
use crate::enforce::container::{ContainerView, PodView, ResourcesView};
use crate::enforce::inputs::{build_request, pod_totals, RequestError};
use crate::enforce::state::{Record, ResourceSummary, StateDoc, StateStore};
use crate::host::devices::DeviceLookup;

pub use observe::{samples, RefusalObserver, StateObserver};
pub use placer::{Placer, Rejection};

/// Why a container was not admitted (the message reaches the CRI caller).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Its resources or devices could not be read.
    #[error("nri-align: {0}")]
    Request(#[from] RequestError),
    /// Placement refused it.
    #[error("nri-align: {}", .0.message)]
    Rejected(Rejection),
    /// The decision could not be turned into devices.
    #[error("nri-align: {0}")]
    Adjust(#[from] AdjustError),
    /// A new configuration does not fit this host.
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
}

/// The answer to CreateContainer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOutcome {
    /// Adjustment of the new container.
    pub adjustment: Adjustment,
    /// Cpuset updates of shared-pool containers.
    pub updates: Vec<CpusetUpdate>,
}

/// How start-up found the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartState {
    /// No state file.
    Fresh,
    /// Restored this many records; dropped those listed (conflicts).
    Restored {
        /// Records restored.
        restored: usize,
        /// Records that conflicted, with why.
        dropped: Vec<String>,
    },
    /// The file was unusable; waiting for Synchronize to rebuild.
    Corrupt(String),
}

/// Enforcement state for one runtime connection (and across reconnections).
///
/// The placer, the configuration, the records and the host's devices are the engine's; each
/// other part is a small state owned by the file that uses it, so that a step's signature
/// says which of them it may change.
pub struct Engine<P: Placer> {
    placer: P,
    config: Config,
    doc: StateDoc,
    metrics: Option<Arc<Metrics>>,
    devices: Box<dyn DeviceLookup + Send>,
    /// The pods known, for namespaces and the observers' pod set (`observe.rs`).
    pods: observe::PodSet,
    /// Who hears of changes, refusals and admissions (`observe.rs`).
    observers: observe::Observers,
    /// Where the records are written, and the daemon's retry timer (`persist.rs`).
    persistence: persist::Persistence,
    /// Devices systemd cannot be told about (`devlinks.rs`).
    device_links: devlinks::DeviceLinks,
    /// Pods whose kubelet-set cpuset was already logged (`lifecycle.rs`).
    kubelet_cpusets: lifecycle::KubeletCpusets,
    /// The online CPUs and memory nodes followed at run time (`hotplug.rs`); `None`: not
    /// followed.
    hotplug: Option<hotplug::Watch>,
    /// Memory nodes moved after creation, waiting for a response (`others.rs`).
    mems_moved: others::MovedMems,
    /// CFS quotas of containers and pods waiting for a response (`quota.rs`).
    quota: quota::PendingQuota,
    /// Whether the runtime takes a memory policy (`mempolicy.rs`).
    mempolicy: mempolicy::RuntimeMempolicy,
}

impl<P: Placer> Engine<P> {
    /// An engine over `placer` with `config`; `store` persists decisions when given.
    pub fn new(
        placer: P,
        config: Config,
        store: Option<StateStore>,
        metrics: Option<Arc<Metrics>>,
        devices: Box<dyn DeviceLookup + Send>,
    ) -> Self {
        let persistence = persist::Persistence::new(store, config.state_fsync);
        Self {
            placer,
            config,
            doc: StateDoc::default(),
            metrics,
            devices,
            pods: observe::PodSet::default(),
            observers: observe::Observers::default(),
            persistence,
            device_links: devlinks::DeviceLinks::default(),
            kubelet_cpusets: lifecycle::KubeletCpusets::default(),
            hotplug: None,
            mems_moved: others::MovedMems::default(),
            quota: quota::PendingQuota::default(),
            mempolicy: mempolicy::RuntimeMempolicy::default(),
        }
    }

    /// The placer (for reports).
    pub fn placer(&self) -> &P {
        &self.placer
    }

    /// The placer, to inject failures in tests.
    #[cfg(test)]
    pub(crate) fn placer_mut(&mut self) -> &mut P {
        &mut self.placer
    }

    /// The recorded containers.
    pub fn records(&self) -> &StateDoc {
        &self.doc
    }

    /// A container has started (PostStartContainer). Returns its cpuset again when an update
    /// moved it after it was created: the runtime applies an update of a container that is not
    /// running yet to its spec only, and one that lands while the runtime is creating the task
    /// from the old spec is lost (seen with containerd 1.7 and 2.1 when nri-align reconnects
    /// while containers start). Sending it once more to the running task closes that window.
    pub fn container_started(&self, id: &str) -> Option<CpusetUpdate> {
        if self.cpus_left() {
            return None;
        }
        let rec = self.doc.containers.get(id)?;
        (rec.applied_cpus != rec.assignment.cpus).then(|| CpusetUpdate {
            container_id: id.to_string(),
            cpus: rec.applied_cpus.clone(),
        })
    }

    /// The OCI cgroups path recorded for container `id`.
    pub fn cgroups_path(&self, id: &str) -> Option<&str> {
        self.doc.containers.get(id).map(|r| r.cgroups_path.as_str())
    }

    /// The cpuset recorded for container `id`, as an update (for updates that had to wait).
    pub fn current_cpuset(&self, id: &str) -> Option<CpusetUpdate> {
        if self.cpus_left() {
            return None;
        }
        self.doc.containers.get(id).map(|r| CpusetUpdate {
            container_id: id.to_string(),
            cpus: r.applied_cpus.clone(),
        })
    }

    /// Remembers a pod (RunPodSandbox), for namespaces of later containers and the pod set
    /// observers see.
    pub fn pod_started(&mut self, pod: &PodView) {
        if self.pods.insert(pod) {
            self.refresh_free();
        }
    }

    /// Decides a new container. `Ok(None)`: the container is exempt and left alone. The
    /// refusal observer hears the answer.
    pub fn create_container(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
    ) -> Result<Option<CreateOutcome>, EngineError> {
        let answer = self.decide_container(pod, c);
        self.observers.heard_create(pod, &answer);
        answer
    }

    /// [`Engine::create_container`] without telling the refusal observer.
    ///
    /// In phases (`create.rs`): the request is read, the placer plans without holding
    /// anything, the plan becomes the adjustment and the record, and only then, with nothing
    /// left that can fail, the plan is committed and the record persisted.
    fn decide_container(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
    ) -> Result<Option<CreateOutcome>, EngineError> {
        let mut out = self.create_decided(pod, c)?;
        if let Some(o) = out.as_mut() {
            // One place for every way a creation is answered (placed, restarted, exempt):
            // what another plugin owns never leaves nri-align.
            others::strip_left(&mut o.adjustment, self.config.leave_to_others);
            if o.adjustment.cpu_quota.is_some() {
                self.queue_pod_quota(&pod.id, Some(pod), false);
            }
        }
        Ok(out)
    }

    fn create_decided(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
    ) -> Result<Option<CreateOutcome>, EngineError> {
        self.pods.insert(pod);
        if self.doc.containers.contains_key(&c.id) {
            // A create for an id we hold (a retried create): start over.
            self.drop_record(&c.id);
        }
        self.kubelet_cpusets.note(pod, c, self.metrics.as_deref());
        if self.config.is_exempt(&pod.namespace) {
            return self.create_exempt(pod, c).map(Some);
        }
        let started = Instant::now();
        let mut built = self.read_request(pod, c, started)?;
        self.place_on_left_mems(pod, c, &mut built);
        self.share_pod_claims(pod, c, &mut built);
        if self.cpus_left() {
            return self.create_left_cpus(pod, c, built, started).map(Some);
        }
        if let Some(out) = self.take_over(pod, c, &built, started) {
            return Ok(Some(out));
        }
        self.reuse_finished(pod, c);
        if self.in_budget(pod) {
            return self.create_in_budget(pod, c, &built, started).map(Some);
        }
        let plan = self.plan_create(pod, c, &built, started)?;
        let planned = P::planned(&plan);
        let adjustment = self.adjustment_for(planned, c, &built.devices, started)?;
        let rec = create::new_record(planned, pod, c, &adjustment, &built);
        let mut adjustment = adjustment;
        adjustment.cpu_quota = self.quota_at_create(&rec);
        let updates = self.commit_create(pod, c, plan, rec, started)?;
        Ok(Some(CreateOutcome {
            adjustment,
            updates,
        }))
    }

    /// Re-evaluates a container after a CRI resource update (an in-place resize). Returns the
    /// updates to send (the container itself when its CPUs change, and shared-pool members);
    /// the container's CFS quota, where the kubelet's is not the one it should have, waits in
    /// [`Engine::take_quota_updates`]. GPUs and NICs never change on a running container.
    /// Exclusive CPUs are resized in place (`resize.rs`): a grow keeps every CPU held, a
    /// shrink gives back only CPUs added since admission, and a refusal leaves the container
    /// as it was.
    pub fn update_container(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
        new: &ResourcesView,
    ) -> Result<Vec<CpusetUpdate>, EngineError> {
        let was_exclusive = self.is_exclusive(&c.id);
        let updates = self.update_decided(pod, c, new)?;
        self.quota_after_update(c, new);
        if was_exclusive || self.is_exclusive(&c.id) {
            self.queue_pod_quota(&pod.id, Some(pod), was_exclusive);
        }
        Ok(updates)
    }

    fn update_decided(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
        new: &ResourcesView,
    ) -> Result<Vec<CpusetUpdate>, EngineError> {
        if self.cpus_left() {
            self.follow_others_update(pod, c, new);
            return Ok(Vec::new());
        }
        let Some(old) = self.doc.containers.get(&c.id).cloned() else {
            return Ok(Vec::new());
        };
        if old.exempt {
            return Ok(Vec::new());
        }
        if old.in_pod_budget {
            // Its pod's budget is resized as a whole, by UpdatePodSandbox (`pod_budget.rs`).
            tracing::info!(container = %c.id, "update of a container in a pod budget: the budget follows UpdatePodSandbox");
            return Ok(Vec::new());
        }
        let mut updated = c.clone();
        updated.resources = new.clone();
        // Huge pages are not resized in place (the kubelet resizes CPU and memory): an update
        // that does not name them keeps the container's, rather than giving up its pages.
        if new.hugepage_limits.is_empty() {
            updated
                .resources
                .hugepage_limits
                .clone_from(&c.resources.hugepage_limits);
        }
        let req = build_request(self.placer.topology(), pod, &updated)?;
        if ResourceSummary::of(&req) == old.resources {
            // The same request: only memory nodes another plugin owns may have moved, and
            // the CPUs go where they are (nothing where `mems` is nri-align's).
            return Ok(self.follow_left_mems(pod, &updated));
        }
        let started = Instant::now();
        let mut req = req;
        req.allocated_gpus = old.assignment.gpus.clone();
        req.allocated_nics = old.assignment.nics.clone();
        self.keep_shared_nics(&old, &mut req);
        self.keep_left_mems(pod, &updated, &old, &mut req);
        if let Some(resized) = self.resize_in_place(pod, c, &req, &old, started) {
            return resized;
        }
        // Not a resize of exclusive CPUs in place (shared to exclusive or back): decided anew
        // with the container's own resources free. Should anything below panic while they are
        // released, the plugin's poisoned-lock recovery (`resync_placer`) restores the record
        // into the placer.
        self.placer.release(&c.id);
        let placed = self.placer.place(&req, GpuMode::Keep);
        let a = match placed.and_then(|a| self.keep_devices(a, &old.assignment)) {
            Ok(a) => a,
            Err(r) => {
                if let Err(e) = self.placer.restore(old.assignment.clone()) {
                    tracing::error!(container = %c.id, "previous decision lost: {}", e.message);
                    self.doc.containers.remove(&c.id);
                    self.persist();
                }
                self.count_rejection(&r.reason, started);
                return Err(EngineError::Rejected(r));
            }
        };
        let rec = Record {
            applied_cpus: a.cpus.clone(),
            assignment: a,
            resources: ResourceSummary::of(&req),
            // A decision nri-align made for the new request, whatever the record was.
            found_running: false,
            kubelet_cpu_quota: new.cpu_quota.or(old.kubelet_cpu_quota),
            ..old.clone()
        };
        Ok(self.record_update(pod, c, &old, rec.readmitted(), started))
    }

    /// Releases a container (RemoveContainer); idempotent.
    pub fn release_container(&mut self, id: &str) -> Vec<CpusetUpdate> {
        let Some(rec) = self.doc.containers.remove(id) else {
            return Vec::new();
        };
        self.placer.release(id);
        self.pass_on_claims(id, &rec);
        tracing::info!(container = %id, "released");
        self.budget_member_gone(&rec, true);
        let mut updates = self.follow_pod_pool(&rec.pod_sandbox_id, None);
        updates.extend(self.follow_pool(None));
        self.persist();
        self.refresh_free();
        updates
    }

    /// Releases every container of a pod (RemovePodSandbox).
    pub fn release_pod(&mut self, sandbox_id: &str) -> Vec<CpusetUpdate> {
        let ids = self.doc.containers.pod_containers(sandbox_id);
        if let Some(p) = self.pods.get(sandbox_id) {
            self.observers.pod_removed(p);
        }
        let pod_gone = self.pods.remove(sandbox_id);
        // A later release may move the same container again: the last one counts.
        let mut updates: std::collections::BTreeMap<String, CpuSet> = Default::default();
        for id in ids {
            for u in self.release_container(&id) {
                updates.insert(u.container_id, u.cpus);
            }
        }
        if pod_gone {
            self.refresh_free();
        }
        updates
            .into_iter()
            .map(|(container_id, cpus)| CpusetUpdate { container_id, cpus })
            .collect()
    }

    /// Applies a new configuration (SIGHUP, drop-in). Returns the pool updates it causes, since
    /// reserved CPUs may have changed (the plugin sends them with the next response).
    pub fn reload(&mut self, config: Config) -> Result<Vec<CpusetUpdate>, EngineError> {
        config.validate_for(self.placer.topology())?;
        self.check_live_allocations(&config)?;
        for key in self.config.restart_only_changes(&config) {
            // A runtime's drop-in only arrives after start-up, so for a pre-launched plugin
            // these keys can only come from flags or --config (a wrapper script works).
            tracing::warn!(
                "{key} changed: it is read only at start-up (flags or --config), \
                 so it takes effect after a restart with it there"
            );
        }
        self.placer.set_config(config.placement.clone());
        self.persistence.set_fsync(config.state_fsync);
        let quota_before = self.config.exclusive_cpu_quota;
        self.config = config;
        self.config_changed();
        self.quota_after_reload(quota_before);
        let updates = self.follow_pool(None);
        self.persist();
        self.refresh_free();
        Ok(updates)
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Before the first container of `pod` is placed, tells the placer what the whole pod asks
    /// for, when the runtime passed the pod's resources: in pod scope that container pins the
    /// pod's node set, which must then hold its siblings too.
    fn expect_pod(&mut self, pod: &PodView) {
        let Some(totals) = pod.resources.as_ref().map(pod_totals) else {
            return;
        };
        let first = !self.doc.containers.has_pod(&pod.id);
        if first && totals != PodTotals::default() {
            self.placer.expect_pod(&pod.uid, totals);
        }
    }

    /// Whether container `id` has a record holding exclusive CPUs.
    fn is_exclusive(&self, id: &str) -> bool {
        self.doc
            .containers
            .get(id)
            .is_some_and(|r| r.assignment.exclusive)
    }

    /// Forgets container `id` in the records and the placer together, and persists that.
    fn drop_record(&mut self, id: &str) {
        let rec = self.doc.containers.remove(id);
        self.mems_moved.forget(id);
        self.quota.forget(id);
        self.placer.release(id);
        if let Some(rec) = rec {
            // Its pod's shared containers follow with the next decision in the pod.
            self.budget_member_gone(&rec, false);
        }
        self.persist();
        self.refresh_free();
    }

    /// Makes the placer hold exactly the recorded decisions, after a panic left them apart
    /// (the plugin calls it when it finds its lock poisoned). The records are the source of
    /// truth: the placer forgets what they do not have and takes back what they do; a record
    /// it refuses (a conflict) is dropped and the drop persisted. Returns how many containers
    /// it had to fix.
    pub fn resync_placer(&mut self) -> usize {
        let mut fixed = 0;
        let mut held: HashMap<String, Assignment> = HashMap::new();
        for a in self.placer.held() {
            let recorded = self.doc.containers.get(&a.container_id);
            if recorded.is_some_and(|r| r.assignment == a) {
                held.insert(a.container_id.clone(), a);
            } else {
                self.placer.release(&a.container_id);
                fixed += 1;
            }
        }
        let missing: Vec<String> = self
            .doc
            .containers
            .keys()
            .filter(|id| !held.contains_key(*id))
            .cloned()
            .collect();
        for id in missing {
            fixed += 1;
            let Some(rec) = self.doc.containers.get(&id) else {
                continue;
            };
            if let Err(r) = self.placer.restore(rec.assignment.clone()) {
                tracing::error!(container = %id, "record dropped after a panic: {}", r.message);
                self.doc.containers.remove(&id);
            }
        }
        if fixed > 0 {
            tracing::warn!(
                containers = fixed,
                "placer re-synchronised with the records"
            );
            self.adopt_recorded_pool();
            self.persist();
            self.refresh_free();
        }
        fixed
    }

    fn namespace_of(&self, sandbox_id: &str) -> String {
        self.pods
            .get(sandbox_id)
            .map(|p| p.namespace.clone())
            .unwrap_or_default()
    }

    /// After container `id`'s record went into the table: writes it, then moves the shared
    /// containers after the pool and writes where they went. Returns the updates to send and
    /// where the time since `started` went.
    ///
    /// The record is written before the move, not after it: a pool move rewrites thousands of
    /// records on a large node, and the record's line written on the caches the move leaves
    /// took three times as long (23-40 against 7-13 µs at 5,000 live). Both writes are done
    /// before the response goes out, as before; a crash between them leaves the log saying the
    /// groups run where the runtime still runs them (it has not had the updates).
    fn persist_and_follow_pool(
        &mut self,
        id: &str,
        started: Instant,
    ) -> (Vec<CpusetUpdate>, Timing) {
        let decided = started.elapsed();
        self.persist();
        let persisted = started.elapsed();
        let updates = self.follow_pool(Some(id));
        self.persist();
        let took = started.elapsed();
        let timing = Timing {
            took,
            pool: took - persisted,
            persist: persisted - decided,
        };
        (updates, timing)
    }

    fn count_rejection(&self, reason: &str, started: Instant) {
        if let Some(m) = &self.metrics {
            m.rejected(reason, started.elapsed());
        }
    }
}

fn pod_name(pod: &PodView) -> String {
    format!("{}/{}", pod.namespace, pod.name)
}

/// Where a decision's time went, for its log line.
struct Timing {
    /// From the request to the persisted record (the plugin's own time, as `latency_us`).
    took: std::time::Duration,
    /// Moving shared containers onto the pool, and writing where they went.
    pool: std::time::Duration,
    /// Writing the container's own record.
    persist: std::time::Duration,
}

fn log_decision(pod: &PodView, c: &ContainerView, a: &Assignment, t: Timing, updates: usize) {
    tracing::info!(
        pod = %pod_name(pod),
        container = %c.name,
        policy = %a.policy,
        cpus = %a.cpus,
        exclusive = a.exclusive,
        mems = %a.mems,
        gpus = %a.gpus.join(","),
        nics = %a.nics.join(","),
        aligned = a.aligned,
        latency_us = t.took.as_micros() as u64,
        pool_us = t.pool.as_micros() as u64,
        persist_us = t.persist.as_micros() as u64,
        pool_updates = updates,
        reason = %a.reason,
        "decision"
    );
}

mod claims;
mod create;
mod devlinks;
mod hotplug;
mod lifecycle;
mod mempolicy;
mod observe;
mod others;
mod others_mems;
mod persist;
pub mod placer;
mod pod_budget;
mod pool;
pub mod quota;
pub mod reconcile;
mod recovery;
mod resize;

#[cfg(test)]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario test reads as one story of events and checks; cut into helpers, the \
              sequence it proves would no longer be in view"
)]
mod tests;
