//! The NRI plugin: `nri_protocol::stub::Plugin` implemented by handing every event to the
//! [`Engine`]; `convert.rs` turns the NRI messages into the engine's types and back.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use nri_protocol::api::{
    self, Container, ContainerUpdate, CreateContainerResponse, EventMask, LinuxResources,
    MessageField, PodSandbox, StopContainerResponse, UpdateContainerResponse,
    UpdatePodSandboxRequest,
};
use nri_protocol::stub::{HandlerError, HandlerResult, Plugin};
use nri_protocol::version::RuntimeInfo;

use super::convert::{
    container_adjustment, container_update_mems, container_update_quota, container_update_to,
    container_view, pod_view, resources_view, set_update_quota,
};
use super::node_facts::{node_facts, Sources};
use crate::config::Config;
use crate::enforce::adjust::CpusetUpdate;
use crate::enforce::container::NodeFacts;
use crate::enforce::engine::{Engine, EngineError, Placer};
use crate::enforce::inputs::resolve_cdi;
use crate::enforce::podresources::KubeletSource;
use crate::metrics::Metrics;
use crate::placement::GpuMode;

/// The events nri-align handles (all known to NRI v0.6.1, so no version gating is needed).
pub fn wanted_events() -> EventMask {
    use api::Event::*;
    EventMask::of(&[
        RUN_POD_SANDBOX,
        STOP_POD_SANDBOX,
        REMOVE_POD_SANDBOX,
        CREATE_CONTAINER,
        POST_START_CONTAINER,
        UPDATE_CONTAINER,
        STOP_CONTAINER,
        REMOVE_CONTAINER,
    ])
}

/// The plugin: an engine behind a mutex (the runtime sends one request at a time, and the
/// SIGHUP reload shares it).
///
/// Updates of other containers travel to the runtime only in the responses that can carry
/// them (Synchronize, CreateContainer, UpdateContainer, StopContainer). Updates decided where no
/// such response exists (RemoveContainer, pod removal, a reload, a container that started
/// after an update of its spec) are queued for the next one.
///
/// nri-align never calls the runtime's UpdateContainers, not even from a task spawned after the
/// handler returned. NRI's adaptation from v0.6.1 to v0.11 (containerd 1.7 to 2.1) serves it
/// as `updateContainers`: the adaptation lock, then the runtime's `updateFn`, which in
/// containerd takes containerd's own NRI lock; every lifecycle event takes them the other way
/// round (containerd's lock, then the adaptation's for the plugin calls). Sent from inside a
/// handler it waits for the adaptation lock its own event holds; sent after the handler
/// returned it deadlocks with any create or start that begins at the same moment, for good
/// (containerd#13733, reproduced here with 50 concurrent creations on 1.7.24 and 2.1.9). A
/// timeout on the plugin's side does not undo it: the runtime's side stays stuck once both
/// locks are taken. NRI v0.12 no longer takes the adaptation lock there, but what each
/// runtime's `updateFn` locks is its own (CRI-O's was not checked), Configure names the
/// runtime's version, not its NRI's, and a wrong guess stalls the node: no runtime is treated
/// as known safe, and one path serves every runtime.
///
/// Freed CPUs must still reach the shared containers promptly (a removed exclusive pod's CPUs
/// would otherwise sit idle until the node's next container event). So when a removal grows
/// the pool, the shared containers' cpusets are also written to their cgroups directly, from a
/// blocking task spawned by the handler (`regrow`), under the engine lock: no decision can
/// shrink the pool between reading the record and writing the cgroup, and a later decision's
/// shrink reaches the runtime in its response after the write. The runtime is never asked for
/// anything, so it cannot be stalled. The update also stays queued, so the runtime's own record
/// of the container follows with the next response (until then, a runtime that rewrites the
/// container's cgroup from its record puts back the smaller pool: never a CPU held
/// exclusively, only fewer shared ones).
pub struct AlignPlugin<P: Placer> {
    engine: Arc<Mutex<Engine<P>>>,
    /// Whether a config file was given (it then wins over the runtime's drop-in config).
    have_config_file: bool,
    /// Containers whose cpuset goes out with the next response that can carry updates.
    pending: Mutex<BTreeSet<String>>,
    /// The kubelet's PodResources API, asked before the engine is locked.
    kubelet: Option<Arc<KubeletSource>>,
    /// The CDI spec registry, looked up (in memory) before the engine is locked.
    cdi: Option<Arc<crate::host::cdi::CdiRegistry>>,
    metrics: Option<Arc<Metrics>>,
    /// True while the running containers are being listed over CRI (a runtime that sends
    /// this plugin no Synchronize, `enforce::cri_listing`): creations wait for the listing.
    learning: tokio::sync::watch::Sender<bool>,
    /// Where the host's `/proc` and cgroup mounts are for direct cpuset writes (`/`; a
    /// temporary tree in tests).
    host_root: std::path::PathBuf,
}

/// How long a creation waits for the running containers to be listed. Below the runtime's
/// NRI request timeout (2 s by default) with room for the decision and a PodResources lookup;
/// containerd 1.7 serves CRI only after its launched plugins are configured, so creations and
/// the listing become possible at the same moment and the wait is short in practice.
pub const LEARN_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl<P: Placer> AlignPlugin<P> {
    /// Wraps `engine`.
    pub fn new(engine: Arc<Mutex<Engine<P>>>, have_config_file: bool) -> Self {
        Self {
            engine,
            have_config_file,
            pending: Mutex::new(BTreeSet::new()),
            kubelet: None,
            cdi: None,
            metrics: None,
            learning: tokio::sync::watch::Sender::new(false),
            host_root: std::path::PathBuf::from("/"),
        }
    }

    /// Writes cgroups under `root` instead of `/` (tests).
    pub fn with_host_root(mut self, root: impl Into<std::path::PathBuf>) -> Self {
        self.host_root = root.into();
        self
    }

    /// The CRI socket to list running containers on, for runtime `runtime` (Configure's
    /// name), as the configuration in force says (`cri_socket`); `None` when turned off or
    /// unknown.
    pub fn cri_socket(&self, runtime: &str) -> Option<std::path::PathBuf> {
        let configured = self.engine().config().cri_socket.clone();
        crate::enforce::cri_listing::socket_for(configured.as_deref(), runtime)
    }

    /// The running containers are being listed over CRI: creations wait for [`Self::learned`],
    /// up to [`LEARN_WAIT`].
    pub fn learning_begins(&self) {
        self.learning.send_replace(true);
    }

    /// Takes in what the CRI listing found (`None`: it could not be had, already said in the
    /// log) and lets waiting creations go on.
    pub fn learned(&self, listing: Option<crate::enforce::cri_listing::Listing>) {
        if let Some(l) = listing {
            let (adopted, ups) = self.engine().adopt_listed(&l.pods, &l.containers);
            tracing::info!(
                adopted,
                listed = l.containers.len(),
                updates = ups.len(),
                "running containers accounted for; shared containers follow the pool with the next container event"
            );
            self.queue(ups);
        }
        self.stop_waiting();
    }

    /// Creations stop waiting for a listing that is slow to come (it is still taken in when
    /// it comes).
    pub fn stop_waiting(&self) {
        self.learning.send_replace(false);
    }

    /// Waits (up to [`LEARN_WAIT`]) while the running containers are being listed, so that a
    /// creation never gets what a container not yet known holds.
    async fn wait_learned(&self, container: &str) {
        // The usual path (no listing under way) is one read; a receiver is made only to wait.
        // A listing that ends between the read and the subscription is seen by `wait_for`,
        // which looks at the current value first.
        if !*self.learning.borrow() {
            return;
        }
        let mut rx = self.learning.subscribe();
        let waited = tokio::time::timeout(LEARN_WAIT, rx.wait_for(|busy| !*busy)).await;
        if waited.is_err() {
            tracing::warn!(container = %container, wait_ms = LEARN_WAIT.as_millis() as u64, "deciding before the running containers are listed over CRI: CPUs or GPUs a container nri-align has no record of holds may be given again");
        }
    }

    /// Reads what the kubelet allocated from `kubelet` (its PodResources API) before each
    /// container is decided; `metrics` counts the lookups.
    pub fn with_kubelet(
        mut self,
        kubelet: Option<Arc<KubeletSource>>,
        metrics: Option<Arc<Metrics>>,
    ) -> Self {
        self.kubelet = kubelet;
        self.metrics = metrics;
        self
    }

    /// Resolves each container's CDI names through `cdi` before it is decided.
    pub fn with_cdi(mut self, cdi: Option<Arc<crate::host::cdi::CdiRegistry>>) -> Self {
        self.cdi = cdi;
        self
    }

    fn pending_lock(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `ups` for the next response that can carry updates.
    fn queue(&self, ups: Vec<CpusetUpdate>) {
        if ups.is_empty() {
            return;
        }
        tracing::debug!(
            count = ups.len(),
            "cpuset updates wait for the next container event"
        );
        self.pending_lock()
            .extend(ups.into_iter().map(|u| u.container_id));
    }

    /// `ups` plus the queued containers' current cpusets (the engine's record, so a queued
    /// container that moved again meanwhile gets where it is now), and the memory nodes that
    /// moved to follow CPUs another plugin set, as NRI updates.
    fn with_pending(
        &self,
        engine: &mut Engine<P>,
        mut ups: Vec<CpusetUpdate>,
    ) -> Vec<ContainerUpdate> {
        let queued = std::mem::take(&mut *self.pending_lock());
        if !queued.is_empty() {
            let sent: std::collections::HashSet<String> =
                ups.iter().map(|u| u.container_id.clone()).collect();
            for id in queued.into_iter().filter(|id| !sent.contains(id)) {
                ups.extend(engine.current_cpuset(&id));
            }
        }
        let mut out = updates(&ups);
        for m in engine.take_mems_updates() {
            let mems = m.mems.to_string();
            // One update per container: a cpuset update of the same container carries the
            // memory nodes too.
            let same = out.iter_mut().find(|u| u.container_id == m.container_id);
            let cpu = same.and_then(|u| u.linux.as_mut()?.resources.as_mut()?.cpu.as_mut());
            match cpu {
                Some(cpu) => cpu.mems = mems,
                None => out.push(container_update_mems(&m.container_id, mems)),
            }
        }
        write_pod_quotas(engine, &self.host_root);
        for q in engine.take_quota_updates() {
            // In the same update as the container's cpuset, when it has one.
            match out.iter_mut().find(|u| u.container_id == q.container_id) {
                Some(u) => set_update_quota(u, q.quota),
                None => out.push(container_update_quota(&q.container_id, q.quota)),
            }
        }
        out
    }

    /// Applies a new configuration (SIGHUP): the engine changes at once, running containers
    /// follow a changed pool with the next container event. Returns how many will move.
    pub fn reload(&self, config: Config) -> Result<usize, EngineError> {
        let ups = self.engine().reload(config)?;
        let n = ups.len();
        self.queue(ups);
        Ok(n)
    }

    fn engine(&self) -> MutexGuard<'_, Engine<P>> {
        // A panic while holding the lock (a bug in a decision, an adjustment or a record) may
        // have left the placer and the records apart: the records are the truth, and the
        // placer is brought back in line with them before the next event is handled.
        self.engine.lock().unwrap_or_else(|poisoned| {
            let mut engine = poisoned.into_inner();
            self.engine.clear_poison();
            engine.resync_placer();
            engine
        })
    }
}

impl<P: Placer + 'static> AlignPlugin<P> {
    /// Reads the online CPUs and memory nodes (two small files) and applies a change since
    /// the last read (`enforce/engine/hotplug.rs`). The updates it causes go with the next
    /// response and, since none may come soon, to the cgroups now, as a grown pool after a
    /// removal does. Called at every event of the runtime and by the daemon's hot-plug
    /// follower. Returns how many containers move.
    pub fn follow_hotplug(&self) -> usize {
        let ups = self.engine().poll_hotplug();
        let n = ups.len();
        self.regrow(ups);
        n
    }

    /// Queues `ups` for the runtime's next response and, since no response may come soon,
    /// writes the moved containers' cpusets to their cgroups now, off the handler (see the
    /// type's doc comment). Returns the task writing them, `None` when nothing moves or no
    /// runtime is at hand.
    fn regrow(&self, ups: Vec<CpusetUpdate>) -> Option<tokio::task::JoinHandle<usize>> {
        if ups.is_empty() {
            return None;
        }
        let ids: Vec<String> = ups.iter().map(|u| u.container_id.clone()).collect();
        self.queue(ups);
        let handle = tokio::runtime::Handle::try_current().ok()?;
        let engine = Arc::clone(&self.engine);
        let root = self.host_root.clone();
        Some(handle.spawn_blocking(move || write_cpusets(&engine, &root, &ids)))
    }
}

/// Writes the recorded cpuset of each of `ids` to its cgroup under `root`; returns how many
/// cgroups changed. The engine lock is held throughout, so that the cpusets written are the
/// records' at one moment and no decision changes the pool meanwhile. A poisoned lock is left
/// to the next handler to recover: nothing is written, the queued updates still go out.
fn write_cpusets<P: Placer>(
    engine: &Mutex<Engine<P>>,
    root: &std::path::Path,
    ids: &[String],
) -> usize {
    let Ok(engine) = engine.lock() else {
        return 0;
    };
    // Read once for the whole move: per container, reading and parsing the mount table was
    // most of the time the engine lock was held here, and creations wait for that lock.
    let mounts = crate::host::cgroup::CgroupMounts::read(root);
    let mut written = 0;
    for id in ids {
        let (Some(u), Some(path)) = (engine.current_cpuset(id), engine.cgroups_path(id)) else {
            continue;
        };
        if path.is_empty() || u.cpus.is_empty() {
            continue;
        }
        match mounts.repair_cpuset(path, &u.cpus) {
            Ok(Some(had)) => {
                written += 1;
                tracing::debug!(container = %id, had = %had, cpus = %u.cpus, "shared pool written to the cgroup");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(container = %id, "shared pool not written to the cgroup, it follows with the next container event: {e}")
            }
        }
    }
    if written > 0 {
        tracing::info!(
            written,
            "shared containers' cgroups follow the grown pool; the runtime's record follows with the next container event"
        );
    }
    written
}

/// Writes the memory nodes container `id` moved to (its CPUs, another plugin's, showed only
/// at PostStartContainer) to its cgroup now: the `cpuset.mems` update rides on the next
/// response, and none may come soon. Runs inside the runtime's NRI call, as the cpuset repair
/// does, with the engine lock held so the record stays still.
fn write_moved_mems<P: Placer>(engine: &Engine<P>, root: &std::path::Path, id: &str) {
    let Some(mems) = engine.moved_mems(id) else {
        return;
    };
    let path = engine.cgroups_path(id).unwrap_or_default();
    if path.is_empty() || mems.is_empty() {
        return;
    }
    match crate::host::cgroup::repair_mems_under(root, path, &mems) {
        Ok(Some(had)) => {
            tracing::info!(container = %id, had = %had, mems = %mems, "memory nodes follow the CPUs another plugin set; cgroup written")
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(container = %id, "memory nodes not written to the cgroup, they follow with the next container event: {e}")
        }
    }
}

/// Writes the pod cgroups' CFS quotas the engine decided (no NRI message carries a pod's
/// cgroup). Runs inside the runtime's NRI call, with the engine lock held, as the cpuset
/// repair does; a write that fails is logged, and the container quotas go on regardless.
fn write_pod_quotas<P: Placer>(engine: &mut Engine<P>, root: &std::path::Path) {
    for w in engine.take_pod_quota_writes() {
        match crate::host::cgroup::set_pod_quota_under(root, &w.cgroups_path, &w.pod_uid, w.want) {
            Ok(Some(had)) => {
                tracing::info!(pod_uid = %w.pod_uid, had, want = ?w.want, "pod cgroup CFS quota written")
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(pod_uid = %w.pod_uid, "pod cgroup CFS quota not written: {e}"),
        }
    }
}

fn updates(u: &[CpusetUpdate]) -> Vec<ContainerUpdate> {
    // The updates of one pool move share a cpuset: its text is made once, not per container.
    let mut text: Option<(&crate::topology::CpuSet, String)> = None;
    u.iter()
        .map(|u| {
            let cpus = match &text {
                Some((cpus, t)) if **cpus == u.cpus => t.clone(),
                _ => text.insert((&u.cpus, u.cpus.to_string())).1.clone(),
            };
            container_update_to(&u.container_id, cpus)
        })
        .collect()
}

/// The first NRI release whose container adjustment carries a memory policy
/// (`LinuxContainerAdjustment.memory_policy`).
const NRI_MEMORY_POLICY: nri_protocol::version::SemVer =
    nri_protocol::version::SemVer::new(0, 12, 0);

#[async_trait]
impl<P: Placer + 'static> Plugin for AlignPlugin<P> {
    fn events(&self) -> EventMask {
        // UpdatePodSandbox (NRI v0.10+) only resizes pod budgets: asked for only where they
        // are on, so that older runtimes are not told of an event they do not know.
        match self.engine().config().pod_budgets {
            true => wanted_events().with(api::Event::UPDATE_POD_SANDBOX),
            false => wanted_events(),
        }
    }

    async fn configure(&self, config: &str, runtime: &RuntimeInfo) -> HandlerResult<()> {
        tracing::info!(runtime = %runtime.name, version = %runtime.version, "configured by runtime");
        // NRI v0.12 added the memory policy adjustment; an older runtime drops it unread.
        self.engine().set_runtime_mempolicy(
            &runtime.to_string(),
            runtime.nri_at_least(NRI_MEMORY_POLICY),
        );
        let parsed = Config::from_dropin(config, self.have_config_file)
            .map_err(|e| HandlerError::failed(e.to_string()))?;
        if let Some(cfg) = parsed {
            // Pool changes ride on the answer to the Synchronize that follows Configure.
            self.reload(cfg)
                .map_err(|e| HandlerError::failed(e.to_string()))?;
        }
        Ok(())
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        self.follow_hotplug();
        let pods: Vec<_> = pods.iter().map(pod_view).collect();
        let mut ctrs: Vec<_> = containers.iter().map(container_view).collect();
        if let Some(cdi) = &self.cdi {
            // Before the engine lock, as at creation: a container recorded as it runs keeps
            // its claim's CDI names, so a sibling naming the same device is its sharer.
            let snapshot = cdi.snapshot();
            ctrs = ctrs
                .into_iter()
                .map(|c| {
                    let cdi_resolved = resolve_cdi(&snapshot, &c, &c.kubelet_claims);
                    let node = NodeFacts {
                        cdi_resolved,
                        ..NodeFacts::default()
                    };
                    c.with_node(node)
                })
                .collect();
        }
        let mut engine = self.engine();
        let ups = engine.synchronize(&pods, &ctrs);
        Ok(self.with_pending(&mut engine, ups))
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.follow_hotplug();
        self.engine().pod_started(&pod_view(&pod));
        Ok(())
    }

    async fn update_pod_sandbox(&self, req: UpdatePodSandboxRequest) -> HandlerResult<()> {
        self.follow_hotplug();
        let pod = pod_view(&req.pod);
        // The pod's new resources; the sandbox's own field where the runtime leaves them out.
        let resources = match req.linux_resources.as_ref() {
            Some(r) => resources_view(Some(r)),
            None => pod.resources.clone().unwrap_or_default(),
        };
        // The response carries no container update: the moves wait for the next response
        // that can, and the cgroups are written now, as after a pod's removal.
        let ups = self
            .engine()
            .update_pod(&pod, &resources)
            .map_err(|e| HandlerError::failed(e.to_string()))?;
        self.regrow(ups);
        Ok(())
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.follow_hotplug();
        // The kubelet keeps what a pod's containers hold until it removes them.
        self.engine().pod_stopped(&pod.id);
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.follow_hotplug();
        let ups = self.engine().release_pod(&pod.id);
        self.regrow(ups);
        if let Some(k) = &self.kubelet {
            k.forget_pod(&pod.uid).await;
        }
        Ok(())
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        self.follow_hotplug();
        let pod = pod_view(&pod);
        let view = container_view(&container);
        self.wait_learned(&view.id).await;
        // Before the engine lock, apart from the runtime's view, then joined to it once.
        let remap =
            self.kubelet.is_some() && self.engine().config().placement.gpu_mode == GpuMode::Remap;
        let from = Sources {
            kubelet: self.kubelet.as_deref(),
            cdi: self.cdi.as_deref(),
            metrics: self.metrics.as_deref(),
        };
        let node = node_facts(from, remap, &pod, &view).await;
        let container = view.with_node(node);
        if !container.cdi_resolved.is_empty() {
            // Which route each device came by: the runtime's NRI `CDI_devices` (containerd
            // 2.3 and later) or a match of what it injected (earlier runtimes, CRI-O).
            tracing::info!(
                pod = %format!("{}/{}", pod.namespace, pod.name),
                container = %container.name,
                cri = %container.cdi_devices.join(","),
                matched = %crate::enforce::inputs::matched_back(&container).join(","),
                "CDI devices resolved"
            );
        }
        let mut engine = self.engine();
        let outcome = engine
            .create_container(&pod, &container)
            .map_err(|e| HandlerError::failed(e.to_string()))?;
        let Some(outcome) = outcome else {
            return Ok(CreateContainerResponse {
                update: self.with_pending(&mut engine, Vec::new()),
                ..Default::default()
            });
        };
        Ok(CreateContainerResponse {
            adjust: MessageField::some(container_adjustment(&outcome.adjustment)),
            update: self.with_pending(&mut engine, outcome.updates),
            ..Default::default()
        })
    }

    async fn post_start_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<()> {
        self.follow_hotplug();
        let mut engine = self.engine();
        let Some(u) = engine.container_started(&container.id) else {
            // Unknown: created while no plugin was connected. Its pool update rides on the
            // next response. Known, with its CPUs another plugin's: the record follows the
            // cpuset the container started with.
            let ups = engine.adopt_started(&pod_view(&pod), &container_view(&container));
            write_moved_mems(&engine, &self.host_root, &container.id);
            drop(engine);
            if ups.iter().any(|u| u.container_id == container.id) {
                // Moved onto the memory another plugin set: no response may come soon, so
                // the cgroups are written now too, as for a grown pool.
                self.regrow(ups);
            } else {
                self.queue(ups);
            }
            return Ok(());
        };
        // The runtime may have lost this update while it created the task (its spec has the
        // new cpuset, the cgroup the old one). Nothing else may carry it soon (no response
        // here, and UpdateContainers can deadlock containerd), so the cgroup is put in line
        // with the spec now. This runs inside the runtime's NRI call, so no update of ours is
        // being applied at the same time; the engine lock keeps the record still.
        // Either driver's path (`slice:prefix:name` is the systemd scope); a path that would
        // leave the cgroup root is refused and nothing is written.
        let path = engine.cgroups_path(&container.id).unwrap_or_default();
        let repaired = if path.is_empty() {
            Ok(None)
        } else {
            crate::host::cgroup::repair_cpuset(path, &u.cpus)
        };
        match repaired {
            Ok(Some(had)) => tracing::warn!(
                container = %container.id,
                had = %had,
                cpus = %u.cpus,
                "runtime lost a cpuset update while starting the container; cgroup repaired"
            ),
            Ok(None) => {}
            Err(e) => tracing::warn!(container = %container.id, "cpuset not repaired: {e}"),
        }
        drop(engine);
        // Also through the runtime, with the next response, so its own state agrees.
        self.queue(vec![u]);
        Ok(())
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        container: Container,
        resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        self.follow_hotplug();
        let mut engine = self.engine();
        // No new resources: nothing to re-evaluate (an empty view would read as "no request").
        let ups = match resources {
            None => Vec::new(),
            Some(resources) => engine
                .update_container(
                    &pod_view(&pod),
                    &container_view(&container),
                    &resources_view(Some(&resources)),
                )
                .map_err(|e| HandlerError::failed(e.to_string()))?,
        };
        Ok(UpdateContainerResponse {
            update: self.with_pending(&mut engine, ups),
            ..Default::default()
        })
    }

    async fn stop_container(
        &self,
        _pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<StopContainerResponse> {
        self.follow_hotplug();
        let mut engine = self.engine();
        // Kept until RemoveContainer, as the kubelet keeps a container's CPUs.
        engine.container_stopped(&container.id);
        Ok(StopContainerResponse {
            update: self.with_pending(&mut engine, Vec::new()),
            ..Default::default()
        })
    }

    async fn remove_container(&self, _pod: PodSandbox, container: Container) -> HandlerResult<()> {
        self.follow_hotplug();
        let ups = self.engine().release_container(&container.id);
        self.regrow(ups);
        Ok(())
    }
}

#[cfg(test)]
#[path = "plugin_tests.rs"]
mod tests;
