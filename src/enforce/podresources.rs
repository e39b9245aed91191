//! What the kubelet says a container was allocated, from its PodResources API, read before
//! the engine is locked and bounded so that a slow or absent kubelet never holds the runtime
//! up: one deadline covers waiting for another lookup, connecting, the call and decoding the
//! answer (over [`podresources::MAX_RESPONSE`] it is refused unread), a failure turns lookups
//! off for a while
//! (they then cost nothing), and every failure falls back to what the container's spec shows
//! (fail open). Answers are cached per pod UID until the pod's removal: the kubelet allocates
//! every container's devices when it admits the pod, before the first container is created.
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
/// Most pods whose answers are cached (a node runs at most a few hundred pods).
const MAX_CACHED_PODS: usize = 4096;

/// The kubelet's PodResources API as a device source.
pub struct KubeletSource {
    config: PodResourcesConfig,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    client: Option<PodResourcesClient>,
    /// Answers by pod UID: `None` when the kubelet did not know the pod.
    cache: HashMap<String, Option<proto::PodResources>>,
    /// Lookups are off until then.
    off_until: Option<Instant>,
    /// The kubelet refuses `Get`: use `List`.
    list_only: bool,
}

impl KubeletSource {
    /// A source reading `config.socket`; nothing is dialled until the first lookup.
    pub fn new(config: PodResourcesConfig) -> Self {
        Self {
            config,
            inner: Mutex::new(Inner::default()),
        }
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
        let count = |e: &str| {
            if let Some(m) = metrics {
                m.event(e);
            }
        };
        if pod.uid.is_empty() || pod.name.is_empty() {
            return None;
        }
        // One deadline for waiting on another lookup, connecting, the call and its decoding:
        // a creation never waits for the kubelet longer than the configured timeout.
        let deadline = self.config.timeout;
        let until = tokio::time::Instant::now() + deadline;
        let mut inner = match tokio::time::timeout_at(until, self.inner.lock()).await {
            Ok(g) => g,
            Err(_) => {
                count("podresources-skipped");
                return None;
            }
        };
        if !inner.cache.contains_key(&pod.uid) {
            if inner.off_until.is_some_and(|t| Instant::now() < t) {
                count("podresources-skipped");
                return None;
            }
            let started = Instant::now();
            match tokio::time::timeout_at(until, fetch(&mut inner, &self.config, pod)).await {
                Ok(Ok(answer)) => {
                    if inner.off_until.take().is_some() {
                        tracing::info!(socket = %self.config.socket.display(), "kubelet PodResources answers again");
                    }
                    count("podresources-ok");
                    if inner.cache.len() >= MAX_CACHED_PODS {
                        inner.cache.clear();
                    }
                    inner.cache.insert(pod.uid.clone(), answer);
                }
                failed => {
                    let why = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no answer within {} ms", deadline.as_millis()),
                    };
                    inner.client = None;
                    inner.off_until = Some(Instant::now() + BACKOFF);
                    count("podresources-failed");
                    tracing::warn!(
                        pod = %format!("{}/{}", pod.namespace, pod.name),
                        took_ms = started.elapsed().as_millis() as u64,
                        "kubelet PodResources not used for {} s: {why}; devices are read \
                         from the container's spec meanwhile",
                        BACKOFF.as_secs()
                    );
                    return None;
                }
            }
        }
        let pr = inner.cache.get(&pod.uid)?.as_ref()?;
        let c = pr.containers.iter().find(|c| c.name == container)?;
        Some(select(&self.config.resources, c))
    }

    /// The DRA claim devices of container `container` in the answer already cached for `pod`
    /// (by [`KubeletSource::devices_for`]): never asks the kubelet itself.
    pub async fn claims_for(&self, pod: &PodView, container: &str) -> Vec<KubeletClaimDevice> {
        let inner = self.inner.lock().await;
        let Some(Some(pr)) = inner.cache.get(&pod.uid) else {
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
    if inner.client.is_none() {
        let options = ClientOptions {
            timeout: config.timeout,
            connect_timeout: config.timeout,
            max_message: podresources::MAX_RESPONSE,
        };
        inner.client = Some(PodResourcesClient::connect(&config.socket, options).await?);
    }
    let Some(client) = inner.client.clone() else {
        return Ok(None);
    };
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

/// The container's devices of the configured resources, one entry per resource.
fn select(resources: &[String], c: &proto::ContainerResources) -> Vec<KubeletDevices> {
    let mut out: Vec<KubeletDevices> = Vec::new();
    for d in &c.devices {
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
