//! The NRI plugin: `nri_protocol::stub::Plugin` implemented by handing every event to the
//! [`Engine`]; `convert.rs` turns the NRI messages into the engine's types and back.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use nri_protocol::api::{
    self, Container, ContainerUpdate, CreateContainerResponse, EventMask, LinuxResources,
    MessageField, PodSandbox, StopContainerResponse, UpdateContainerResponse,
};
use nri_protocol::stub::{HandlerError, HandlerResult, Plugin};
use nri_protocol::version::RuntimeInfo;

use super::convert::{
    container_adjustment, container_update_to, container_view, pod_view, resources_view,
};
use crate::config::Config;
use crate::enforce::adjust::CpusetUpdate;
use crate::enforce::engine::{Engine, EngineError, Placer};
use crate::enforce::kubelet::KubeletSource;
use crate::metrics::Metrics;

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
/// Updates of other containers only ever travel in the responses that can carry them
/// (Synchronize, CreateContainer, UpdateContainer, StopContainer). Updates decided where no
/// such response exists (RemoveContainer, pod removal, a reload, a container that started
/// after an update of its spec) wait for the next one. nri-align never calls the runtime's
/// UpdateContainers: containerd up to 2.1 (NRI up to v0.11) takes the NRI adaptation lock and
/// then its own NRI lock for it, the reverse of every lifecycle event, and the two deadlock
/// for good when a container is created or started at the same moment (containerd#13733,
/// reproduced here with 50 concurrent creations on 1.7.24 and 2.1.9).
pub struct AlignPlugin<P: Placer> {
    engine: Arc<Mutex<Engine<P>>>,
    /// Whether a config file was given (it then wins over the runtime's drop-in config).
    have_config_file: bool,
    /// Containers whose cpuset goes out with the next response that can carry updates.
    pending: Mutex<BTreeSet<String>>,
    /// The kubelet's PodResources API, asked before the engine is locked.
    kubelet: Option<Arc<KubeletSource>>,
    metrics: Option<Arc<Metrics>>,
}

impl<P: Placer> AlignPlugin<P> {
    /// Wraps `engine`.
    pub fn new(engine: Arc<Mutex<Engine<P>>>, have_config_file: bool) -> Self {
        Self {
            engine,
            have_config_file,
            pending: Mutex::new(BTreeSet::new()),
            kubelet: None,
            metrics: None,
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
    /// container that moved again meanwhile gets where it is now), as NRI updates.
    fn with_pending(&self, engine: &Engine<P>, mut ups: Vec<CpusetUpdate>) -> Vec<ContainerUpdate> {
        let queued = std::mem::take(&mut *self.pending_lock());
        if !queued.is_empty() {
            let sent: std::collections::HashSet<String> =
                ups.iter().map(|u| u.container_id.clone()).collect();
            for id in queued.into_iter().filter(|id| !sent.contains(id)) {
                ups.extend(engine.current_cpuset(&id));
            }
        }
        updates(&ups)
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

#[async_trait]
impl<P: Placer + 'static> Plugin for AlignPlugin<P> {
    fn events(&self) -> EventMask {
        wanted_events()
    }

    async fn configure(&self, config: &str, runtime: &RuntimeInfo) -> HandlerResult<()> {
        tracing::info!(runtime = %runtime.name, version = %runtime.version, "configured by runtime");
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
        let pods: Vec<_> = pods.iter().map(pod_view).collect();
        let ctrs: Vec<_> = containers.iter().map(container_view).collect();
        let mut engine = self.engine();
        let ups = engine.synchronize(&pods, &ctrs);
        Ok(self.with_pending(&engine, ups))
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        self.engine().pod_started(&pod_view(&pod));
        Ok(())
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        // The kubelet keeps what a pod's containers hold until it removes them.
        self.engine().pod_stopped(&pod.id);
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        let ups = self.engine().release_pod(&pod.id);
        self.queue(ups);
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
        let pod = pod_view(&pod);
        let mut container = container_view(&container);
        if let Some(k) = &self.kubelet {
            // Before the engine lock: a slow kubelet delays this container only, within the
            // lookup's deadline, never the engine's other callers.
            container.kubelet_devices = k
                .devices_for(&pod, &container.name, self.metrics.as_deref())
                .await;
        }
        let mut engine = self.engine();
        let outcome = engine
            .create_container(&pod, &container)
            .map_err(|e| HandlerError::failed(e.to_string()))?;
        let Some(outcome) = outcome else {
            return Ok(CreateContainerResponse {
                update: self.with_pending(&engine, Vec::new()),
                ..Default::default()
            });
        };
        Ok(CreateContainerResponse {
            adjust: MessageField::some(container_adjustment(&outcome.adjustment)),
            update: self.with_pending(&engine, outcome.updates),
            ..Default::default()
        })
    }

    async fn post_start_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<()> {
        let mut engine = self.engine();
        let Some(u) = engine.container_started(&container.id) else {
            // Unknown: created while no plugin was connected. Its pool update rides on the
            // next response.
            let ups = engine.adopt_started(&pod_view(&pod), &container_view(&container));
            drop(engine);
            self.queue(ups);
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
            update: self.with_pending(&engine, ups),
            ..Default::default()
        })
    }

    async fn stop_container(
        &self,
        _pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<StopContainerResponse> {
        let mut engine = self.engine();
        // Kept until RemoveContainer, as the kubelet keeps a container's CPUs.
        engine.container_stopped(&container.id);
        Ok(StopContainerResponse {
            update: self.with_pending(&engine, Vec::new()),
            ..Default::default()
        })
    }

    async fn remove_container(&self, _pod: PodSandbox, container: Container) -> HandlerResult<()> {
        let ups = self.engine().release_container(&container.id);
        self.queue(ups);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enforce::adjust::Adjustment;
    use crate::enforce::testing::{AllDevices, FakePlacer};
    use crate::topology::CpuSet;

    fn plugin() -> AlignPlugin<FakePlacer> {
        let engine = Engine::new(
            FakePlacer::new(),
            Config::default(),
            None,
            None,
            Box::new(AllDevices),
        );
        AlignPlugin::new(Arc::new(Mutex::new(engine)), false)
    }

    fn pod() -> PodSandbox {
        PodSandbox {
            id: "sb".into(),
            uid: "u".into(),
            name: "p".into(),
            namespace: "ns".into(),
            ..Default::default()
        }
    }

    fn container(id: &str, cores: i64, gpu: Option<i64>) -> Container {
        let cpu = api::LinuxCPU {
            shares: MessageField::some(api::OptionalUInt64 {
                value: (cores.max(0) as u64 * 1024).max(2),
                ..Default::default()
            }),
            quota: MessageField::some(api::OptionalInt64 {
                value: if cores > 0 { cores * 100_000 } else { -1 },
                ..Default::default()
            }),
            period: MessageField::some(api::OptionalUInt64 {
                value: 100_000,
                ..Default::default()
            }),
            ..Default::default()
        };
        let devices = gpu
            .map(|m| {
                vec![api::LinuxDevice {
                    path: format!("/dev/nvidia{m}"),
                    type_: "c".into(),
                    major: 195,
                    minor: m,
                    ..Default::default()
                }]
            })
            .unwrap_or_default();
        Container {
            id: id.into(),
            pod_sandbox_id: "sb".into(),
            name: id.into(),
            linux: MessageField::some(api::LinuxContainer {
                devices,
                resources: MessageField::some(LinuxResources {
                    cpu: MessageField::some(cpu),
                    ..Default::default()
                }),
                cgroups_path: format!("/k8s.io/{id}"),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn create_returns_cpuset_devices_env_and_pool_updates() {
        let p = plugin();
        let shared = p
            .create_container(pod(), container("s1", 0, None))
            .await
            .expect("shared");
        let cpus = |r: &CreateContainerResponse| r.adjust.linux.resources.cpu.cpus.clone();
        assert_eq!(cpus(&shared), "0-7");
        let gpu = p
            .create_container(pod(), container("g1", 2, Some(0)))
            .await
            .expect("gpu");
        assert_eq!(cpus(&gpu), "0-1");
        assert_eq!(gpu.adjust.linux.resources.cpu.mems, "0");
        let env: Vec<(String, String)> = gpu
            .adjust
            .env
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect();
        assert!(
            env.contains(&("CUDA_VISIBLE_DEVICES".into(), "0".into())),
            "{env:?}"
        );
        assert!(
            env.contains(&("NVIDIA_VISIBLE_DEVICES".into(), "GPU-0aaa".into())),
            "{env:?}"
        );
        assert!(gpu
            .adjust
            .annotations
            .contains_key(crate::enforce::adjust::DECISION_KEY));
        let rules = &gpu.adjust.linux.resources.devices;
        assert!(rules
            .iter()
            .any(|r| r.allow && r.major.value == 195 && r.minor.value == 0 && r.access == "rwm"));
        // The shared container follows the shrunken pool with a cpuset-only update.
        assert_eq!(gpu.update.len(), 1);
        let u = &gpu.update[0];
        assert_eq!(
            (u.container_id.as_str(), u.linux.resources.cpu.cpus.as_str()),
            ("s1", "2-7")
        );
        assert!(u.linux.resources.devices.is_empty() && u.linux.resources.memory.is_none());
        assert!(u.linux.resources.cpu.mems.is_empty() && u.ignore_failure);
    }

    #[tokio::test]
    async fn rejection_fails_create_and_remove_grows_the_pool() {
        let p = plugin();
        let err = p
            .create_container(pod(), container("big", 6, None))
            .await
            .expect_err("too big");
        assert_eq!(
            err,
            HandlerError::Failed("nri-align: 6 CPUs do not fit on one NUMA node".into())
        );
        p.create_container(pod(), container("s1", 0, None))
            .await
            .expect("shared");
        p.create_container(pod(), container("x1", 4, None))
            .await
            .expect("x1");
        // Stopped, x1 keeps its CPUs (the kubelet keeps them until RemoveContainer).
        let stop = p
            .stop_container(pod(), container("x1", 4, None))
            .await
            .expect("stop");
        assert!(stop.update.is_empty(), "{:?}", stop.update);
        // Removed, they go back to the pool; the update rides on the next response.
        p.remove_container(pod(), container("x1", 4, None))
            .await
            .expect("remove");
        let next = p
            .stop_container(pod(), container("s1", 0, None))
            .await
            .expect("stop s1");
        assert_eq!(next.update.len(), 1);
        assert_eq!(next.update[0].container_id, "s1");
        assert_eq!(next.update[0].linux.resources.cpu.cpus, "0-7");
    }

    #[tokio::test]
    async fn cri_update_moves_the_container_and_the_pool() {
        let p = plugin();
        p.create_container(pod(), container("s1", 0, None))
            .await
            .expect("shared");
        p.create_container(pod(), container("x1", 2, None))
            .await
            .expect("x1");
        let res = |c: &Container| c.linux.resources.clone().into_option();
        let none = p
            .update_container(pod(), container("x1", 2, None), None)
            .await
            .expect("ok");
        assert!(none.update.is_empty());
        let bigger = container("x1", 3, None);
        let out = p
            .update_container(pod(), container("x1", 2, None), res(&bigger))
            .await
            .expect("ok");
        let got: Vec<(String, String)> = out
            .update
            .iter()
            .map(|u| (u.container_id.clone(), u.linux.resources.cpu.cpus.clone()))
            .collect();
        assert_eq!(
            got,
            vec![("x1".into(), "0-2".into()), ("s1".into(), "3-7".into())]
        );
    }

    #[tokio::test]
    async fn updates_without_a_response_wait_for_the_next_one() {
        let p = plugin();
        p.create_container(pod(), container("s1", 0, None))
            .await
            .expect("shared");
        p.create_container(pod(), container("x1", 2, None))
            .await
            .expect("x1");
        // Released at RemoveContainer (no StopContainer seen): s1 must grow back, but a
        // notification has no response, and UpdateContainers could deadlock containerd.
        p.remove_container(pod(), container("x1", 2, None))
            .await
            .expect("remove");
        let next = p
            .create_container(pod(), container("s2", 0, None))
            .await
            .expect("s2");
        let got: Vec<(String, String)> = next
            .update
            .iter()
            .map(|u| (u.container_id.clone(), u.linux.resources.cpu.cpus.clone()))
            .collect();
        assert_eq!(got, vec![("s1".into(), "0-7".into())]);
        // Sent once.
        let again = p
            .create_container(pod(), container("s3", 0, None))
            .await
            .expect("s3");
        assert!(again.update.is_empty());
    }

    #[tokio::test]
    async fn a_panic_inside_an_event_is_recovered_with_the_placer_back_on_the_records() {
        let engine = Arc::new(Mutex::new(Engine::new(
            FakePlacer::new(),
            Config::default(),
            None,
            None,
            Box::new(AllDevices),
        )));
        let p = Arc::new(AlignPlugin::new(engine.clone(), false));
        p.create_container(pod(), container("x1", 2, None))
            .await
            .expect("x1");
        let lock = || engine.lock().unwrap_or_else(|e| e.into_inner());
        lock().placer_mut().panic_on_plan = true;
        // The CRI update releases x1 to decide again, and the decision panics: the lock is
        // poisoned with x1 recorded but no longer in the placer.
        let bigger = container("x1", 3, None)
            .linux
            .resources
            .clone()
            .into_option();
        let plugin = p.clone();
        let panicked = tokio::spawn(async move {
            plugin
                .update_container(pod(), container("x1", 2, None), bigger)
                .await
        })
        .await;
        assert!(
            panicked.is_err_and(|e| e.is_panic()),
            "the injected panic happened"
        );
        assert!(engine.is_poisoned());
        lock().placer_mut().panic_on_plan = false;
        // The next event finds the poisoned lock and puts the placer back on the records.
        let next = p
            .create_container(pod(), container("x2", 2, None))
            .await
            .expect("x2");
        assert!(!engine.is_poisoned());
        let e = lock();
        let mut held: Vec<String> = e
            .placer()
            .held()
            .into_iter()
            .map(|a| a.container_id)
            .collect();
        held.sort();
        let recorded: Vec<&String> = e.records().containers.keys().collect();
        assert_eq!(recorded, vec!["x1", "x2"]);
        assert_eq!(held, vec!["x1".to_string(), "x2".to_string()]);
        // x2 got CPUs x1 does not hold.
        let x1 = &e.records().containers["x1"].assignment.cpus;
        let x2 = next.adjust.linux.resources.cpu.cpus.clone();
        assert!(
            CpuSet::parse_list(&x2).expect("set").is_disjoint(x1),
            "x1 {x1}, x2 {x2}"
        );
    }

    #[test]
    fn removed_devices_use_the_dash_prefix() {
        let adj = Adjustment {
            remove_devices: vec!["/dev/nvidia3".into()],
            ..Default::default()
        };
        let out = container_adjustment(&adj);
        assert_eq!(out.linux.devices[0].path, "-/dev/nvidia3");
    }

    #[test]
    fn only_events_every_nri_release_knows_are_requested() {
        let mask = wanted_events();
        assert!(
            mask.contains(api::Event::CREATE_CONTAINER)
                && mask.contains(api::Event::STOP_CONTAINER)
        );
        assert!(!mask.contains(api::Event::UPDATE_POD_SANDBOX));
        assert_eq!(
            mask.intersection(EventMask::up_to(api::Event::REMOVE_CONTAINER)),
            mask
        );
    }
}
