//! What the kubelet says a container was allocated, from its PodResources API, read before
//! the engine is locked and bounded so that a slow or absent kubelet never holds the runtime
//! up: one deadline covers waiting for another lookup, connecting, the call and decoding the
//! answer (over [`podresources::MAX_RESPONSE`] it is refused unread), a failure turns lookups
//! off for a while
//! (they then cost nothing), and every failure falls back to what the container's spec shows
//! (fail open). Answers are cached per pod UID until the pod's removal: the kubelet allocates
//! every container's devices when it admits the pod, before the first container is created.
//! "Pod unknown" is kept only for [`UNKNOWN_POD_TTL`]: a kubelet that had not yet listed the
//! pod (or its claims) at its first container must not leave the later ones without devices.
//!
//! `GetAllocatableResources` says which devices the kubelet may hand out (device plugins list
//! only healthy ones): `gpu_mode: remap` chooses only among those. It is asked under the same
//! deadline and backoff, and its answer kept for [`ALLOCATABLE_TTL`].
//!
//! `Get` (feature gate `KubeletPodResourcesGet`) is used when the kubelet serves it; a kubelet
//! that answers `Get` with "disabled" is asked with `List` from then on.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use podresources::{proto, resource_matches, ClientOptions, Error, PodResourcesClient};
use tokio::sync::Mutex;

use crate::config::PodResourcesConfig;
use crate::enforce::container::{KubeletClaimDevice, KubeletDevices, PodView};
use crate::metrics::Metrics;

/// How long lookups stay off after the kubelet failed to answer.
pub const BACKOFF: Duration = Duration::from_secs(30);
/// How long the kubelet's allocatable devices are taken as they were last answered: they
/// change only when a device plugin registers or a device's health changes, and a GPU that
/// turned unhealthy within this window is still one the device plugin would not hand out.
pub const ALLOCATABLE_TTL: Duration = Duration::from_secs(10);
/// How long a "pod unknown" answer is taken as the kubelet's word. Pods the kubelet never
/// runs (made through CRI by another client) are asked again after it, one local call per
/// container at most every this long; a kubelet that lagged is asked again for the next
/// container.
pub const UNKNOWN_POD_TTL: Duration = Duration::from_secs(2);
/// Most pods whose answers are cached (a node runs at most a few hundred pods).
const MAX_CACHED_PODS: usize = 4096;

/// The kubelet's PodResources API as a device source.
pub struct KubeletSource {
    config: PodResourcesConfig,
    /// [`UNKNOWN_POD_TTL`]; shorter in tests.
    unknown_pod_ttl: Duration,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    client: Option<PodResourcesClient>,
    /// Answers by pod UID: `None` when the kubelet did not know the pod (with when it said
    /// so: that answer expires after [`UNKNOWN_POD_TTL`]).
    cache: HashMap<String, (Option<proto::PodResources>, Instant)>,
    /// Lookups are off until then.
    off_until: Option<Instant>,
    /// The kubelet refuses `Get`: use `List`.
    list_only: bool,
    /// Its last allocatable devices (configured resources), and when they were answered.
    allocatable: Option<(Instant, Vec<KubeletDevices>)>,
}

/// What the kubelet says for one creation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletAnswer {
    /// The container's devices, as [`KubeletSource::devices_for`] says.
    pub devices: Option<Vec<KubeletDevices>>,
    /// The devices the kubelet lists as allocatable (`GetAllocatableResources`: the healthy
    /// ones), for the configured resources; `None` when not asked or it cannot say.
    pub allocatable: Option<Vec<KubeletDevices>>,
}

impl KubeletSource {
    /// A source reading `config.socket`; nothing is dialled until the first lookup.
    pub fn new(config: PodResourcesConfig) -> Self {
        Self {
            config,
            unknown_pod_ttl: UNKNOWN_POD_TTL,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The same source with "pod unknown" kept for `ttl` instead of [`UNKNOWN_POD_TTL`].
    #[cfg(test)]
    fn with_unknown_pod_ttl(mut self, ttl: Duration) -> Self {
        self.unknown_pod_ttl = ttl;
        self
    }

    /// The devices of container `container` of `pod` that the kubelet reports, for the
    /// configured resources. `None` when the kubelet cannot say (off, slow, gone, pod or
    /// container not listed: plain init containers never are).
    pub async fn devices_for(
        &self,
        pod: &PodView,
        container: &str,
        metrics: Option<&Metrics>,
    ) -> Option<Vec<KubeletDevices>> {
        self.lookup(pod, container, false, metrics).await.devices
    }

    /// [`KubeletSource::devices_for`] and, when `want_allocatable`, the devices the kubelet
    /// lists as allocatable, all under one deadline: a creation never waits for the kubelet
    /// longer than the configured timeout, whatever it asks.
    pub async fn lookup(
        &self,
        pod: &PodView,
        container: &str,
        want_allocatable: bool,
        metrics: Option<&Metrics>,
    ) -> KubeletAnswer {
        let count = |e: &str| {
            if let Some(m) = metrics {
                m.event(e);
            }
        };
        // One deadline for waiting on another lookup, connecting, the calls and their decoding.
        let until = tokio::time::Instant::now() + self.config.timeout;
        let Ok(mut inner) = tokio::time::timeout_at(until, self.inner.lock()).await else {
            count("podresources-skipped");
            return KubeletAnswer::default();
        };
        let devices = if pod.uid.is_empty() || pod.name.is_empty() {
            None
        } else {
            self.devices_locked(&mut inner, until, pod, container, &count)
                .await
        };
        let allocatable = if want_allocatable {
            self.allocatable_locked(&mut inner, until, &count).await
        } else {
            None
        };
        KubeletAnswer {
            devices,
            allocatable,
        }
    }

    async fn devices_locked(
        &self,
        inner: &mut Inner,
        until: tokio::time::Instant,
        pod: &PodView,
        container: &str,
        count: &(dyn Fn(&str) + Sync),
    ) -> Option<Vec<KubeletDevices>> {
        let fresh = |(answer, at): &(Option<proto::PodResources>, Instant)| {
            answer.is_some() || at.elapsed() < self.unknown_pod_ttl
        };
        if !inner.cache.get(&pod.uid).is_some_and(fresh) {
            if inner.off_until.is_some_and(|t| Instant::now() < t) {
                count("podresources-skipped");
                return None;
            }
            let started = Instant::now();
            match tokio::time::timeout_at(until, fetch(inner, &self.config, pod)).await {
                Ok(Ok(answer)) => {
                    self.answered(inner, count);
                    if inner.cache.len() >= MAX_CACHED_PODS {
                        inner.cache.clear();
                    }
                    inner
                        .cache
                        .insert(pod.uid.clone(), (answer, Instant::now()));
                }
                Ok(Err(e)) => {
                    let what = format!("pod {}/{}", pod.namespace, pod.name);
                    self.failed(inner, &what, started, e.to_string(), count);
                    return None;
                }
                Err(_) => {
                    let what = format!("pod {}/{}", pod.namespace, pod.name);
                    self.failed(inner, &what, started, self.late(), count);
                    return None;
                }
            }
        }
        let pr = inner.cache.get(&pod.uid)?.0.as_ref()?;
        let c = pr.containers.iter().find(|c| c.name == container)?;
        Some(select(&self.config.resources, &c.devices))
    }

    /// The kubelet's allocatable devices of the configured resources: its last answer while
    /// younger than [`ALLOCATABLE_TTL`], else asked again within `until`. `None` when it
    /// cannot say (off, slow, gone).
    async fn allocatable_locked(
        &self,
        inner: &mut Inner,
        until: tokio::time::Instant,
        count: &(dyn Fn(&str) + Sync),
    ) -> Option<Vec<KubeletDevices>> {
        if let Some((at, list)) = &inner.allocatable {
            if at.elapsed() < ALLOCATABLE_TTL {
                return Some(list.clone());
            }
        }
        inner.allocatable = None;
        if inner.off_until.is_some_and(|t| Instant::now() < t) {
            count("podresources-skipped");
            return None;
        }
        let started = Instant::now();
        let asked = async {
            let client = connected(inner, &self.config).await?;
            client.allocatable().await
        };
        match tokio::time::timeout_at(until, asked).await {
            Ok(Ok(answer)) => {
                self.answered(inner, count);
                let list = select(&self.config.resources, &answer.devices);
                inner.allocatable = Some((Instant::now(), list.clone()));
                Some(list)
            }
            Ok(Err(e)) => {
                self.failed(inner, "allocatable devices", started, e.to_string(), count);
                None
            }
            Err(_) => {
                self.failed(inner, "allocatable devices", started, self.late(), count);
                None
            }
        }
    }

    fn late(&self) -> String {
        format!("no answer within {} ms", self.config.timeout.as_millis())
    }

    fn answered(&self, inner: &mut Inner, count: &(dyn Fn(&str) + Sync)) {
        if inner.off_until.take().is_some() {
            tracing::info!(socket = %self.config.socket.display(), "kubelet PodResources answers again");
        }
        count("podresources-ok");
    }

    /// A call failed or was late: lookups are off for [`BACKOFF`].
    fn failed(
        &self,
        inner: &mut Inner,
        what: &str,
        started: Instant,
        why: String,
        count: &(dyn Fn(&str) + Sync),
    ) {
        inner.client = None;
        inner.off_until = Some(Instant::now() + BACKOFF);
        count("podresources-failed");
        tracing::warn!(
            asked = %what,
            took_ms = started.elapsed().as_millis() as u64,
            "kubelet PodResources not used for {} s: {why}; devices are read from the \
             container's spec meanwhile",
            BACKOFF.as_secs()
        );
    }

    /// The DRA claim devices of container `container` in the answer already cached for `pod`
    /// (by [`KubeletSource::devices_for`]): never asks the kubelet itself.
    pub async fn claims_for(&self, pod: &PodView, container: &str) -> Vec<KubeletClaimDevice> {
        let inner = self.inner.lock().await;
        let Some((Some(pr), _)) = inner.cache.get(&pod.uid) else {
            return Vec::new();
        };
        pr.containers
            .iter()
            .find(|c| c.name == container)
            .map(claims)
            .unwrap_or_default()
    }

    /// Forgets a removed pod's answer.
    pub async fn forget_pod(&self, uid: &str) {
        self.inner.lock().await.cache.remove(uid);
    }
}

/// One pod's answer; `Ok(None)` when the kubelet does not know the pod.
async fn fetch(
    inner: &mut Inner,
    config: &PodResourcesConfig,
    pod: &PodView,
) -> Result<Option<proto::PodResources>, Error> {
    let client = connected(inner, config).await?;
    if !inner.list_only {
        match client.get(&pod.namespace, &pod.name).await {
            Ok(p) => return Ok(Some(p)),
            Err(Error::PodNotFound { .. }) => return Ok(None),
            Err(Error::Call { source, .. }) if source.to_string().contains("disabled") => {
                tracing::info!("kubelet PodResources Get is disabled (feature gate KubeletPodResourcesGet): using List");
                inner.list_only = true;
            }
            Err(e) => return Err(e),
        }
    }
    let pods = client.list().await?;
    Ok(pods
        .into_iter()
        .find(|p| p.namespace == pod.namespace && p.name == pod.name))
}

/// The client, connecting first when there is none.
async fn connected(
    inner: &mut Inner,
    config: &PodResourcesConfig,
) -> Result<PodResourcesClient, Error> {
    if let Some(c) = &inner.client {
        return Ok(c.clone());
    }
    let options = ClientOptions {
        timeout: config.timeout,
        connect_timeout: config.timeout,
        max_message: podresources::MAX_RESPONSE,
    };
    let client = PodResourcesClient::connect(&config.socket, options).await?;
    inner.client = Some(client.clone());
    Ok(client)
}

/// The devices of the configured resources, one entry per resource.
fn select(resources: &[String], devices: &[proto::ContainerDevices]) -> Vec<KubeletDevices> {
    let mut out: Vec<KubeletDevices> = Vec::new();
    for d in devices {
        if !resources
            .iter()
            .any(|p| resource_matches(p, &d.resource_name))
        {
            continue;
        }
        match out.iter_mut().find(|k| k.resource == d.resource_name) {
            Some(k) => k.ids.extend(d.device_ids.iter().cloned()),
            None => out.push(KubeletDevices {
                resource: d.resource_name.clone(),
                ids: d.device_ids.clone(),
            }),
        }
    }
    out
}

/// The container's `dynamic_resources`: one entry per allocated device of each claim, with its
/// CDI names (bounded: the answer as a whole is, by [`podresources::MAX_RESPONSE`]).
fn claims(c: &proto::ContainerResources) -> Vec<KubeletClaimDevice> {
    let mut out = Vec::new();
    for d in &c.dynamic_resources {
        for r in &d.claim_resources {
            out.push(KubeletClaimDevice {
                claim: format!("{}/{}", d.claim_namespace, d.claim_name),
                driver: r.driver_name.clone(),
                pool: r.pool_name.clone(),
                device: r.device_name.clone(),
                cdi_names: r.cdi_devices.iter().map(|x| x.name.clone()).collect(),
            });
        }
    }
    out
}

#[cfg(test)]
#[path = "podresources_tests.rs"]
mod tests;
