//! The two requests of an eviction: read the pod (is its UID still the one refused, and does a
//! controller own it?), then create its `Eviction`.
//!
//! Upstream, `policy/v1` `Eviction` (k8s.io/api `policy/v1/types.go`; its schema is
//! `io.k8s.api.policy.v1.Eviction` in kubernetes `api/openapi-spec/v3/api__v1_openapi.json`) is
//! POSTed to the pod's `eviction` subresource, `/api/v1/namespaces/NS/pods/NAME/eviction`; the
//! API server checks the pod's PodDisruptionBudgets and answers 429 when one forbids it. The
//! pod's owner comes from `metadata.ownerReferences` of `GET /api/v1/namespaces/NS/pods/NAME`
//! (the NRI `PodSandbox` carries none): an owner reference with `controller: true`.
//!
//! The API-server harness of the tests serves custom resources only, so [`ApiPaths::StandIn`]
//! sends the same two requests to stand-in CRDs in protected groups (`pods.core.k8s.io`,
//! `evictions.policy.k8s.io`, built from the upstream schemas: hack/apiserver/stand-ins/):
//! the body differs only in its `apiVersion`.

use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use serde::Deserialize;

use super::tracker::PodRef;

/// Where the requests go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApiPaths {
    /// A Kubernetes API server: the core pods and their `eviction` subresource.
    #[default]
    Upstream,
    /// The test harness: stand-in CRDs for pods and evictions.
    StandIn,
}

/// Group/version of the stand-in Pod CRD.
pub const STAND_IN_PODS: &str = "core.k8s.io/v1";
/// Group/version of the stand-in Eviction CRD.
pub const STAND_IN_EVICTIONS: &str = "policy.k8s.io/v1";

/// What became of one pod due for eviction (the `outcome` label of
/// `nri_align_evictions_total`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The API server accepted the eviction.
    Evicted,
    /// No owner reference with `controller: true`: nothing would recreate the pod.
    NoController,
    /// A PodDisruptionBudget forbids it now (429).
    PdbBlocked(String),
    /// The pod is gone, or is another pod of the same name (its UID differs).
    Gone,
    /// Anything else (the message says what).
    Failed(String),
}

impl Outcome {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Evicted => "evicted",
            Outcome::NoController => "no-controller",
            Outcome::PdbBlocked(_) => "pdb-blocked",
            Outcome::Gone => "gone",
            Outcome::Failed(_) => "failed",
        }
    }
}

/// The part of a pod read here.
#[derive(Debug, Deserialize)]
struct PodMeta {
    #[serde(default)]
    metadata: ObjectMeta,
}

impl ApiPaths {
    /// The pod's path.
    pub fn pod(&self, pod: &PodRef) -> String {
        let prefix = match self {
            ApiPaths::Upstream => "/api/v1".to_string(),
            ApiPaths::StandIn => format!("/apis/{STAND_IN_PODS}"),
        };
        format!("{prefix}/namespaces/{}/pods/{}", pod.namespace, pod.name)
    }

    /// Where the eviction is created.
    pub fn eviction(&self, pod: &PodRef) -> String {
        match self {
            ApiPaths::Upstream => format!("{}/eviction", self.pod(pod)),
            ApiPaths::StandIn => format!(
                "/apis/{STAND_IN_EVICTIONS}/namespaces/{}/evictions",
                pod.namespace
            ),
        }
    }

    /// The eviction of `pod`: its name and namespace, and a UID precondition so that a new pod
    /// of the same name is never evicted in its place.
    pub fn eviction_body(&self, pod: &PodRef) -> serde_json::Value {
        let e = Eviction {
            metadata: ObjectMeta {
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                ..ObjectMeta::default()
            },
            delete_options: Some(DeleteOptions {
                preconditions: Some(Preconditions {
                    uid: Some(pod.uid.clone()),
                    resource_version: None,
                }),
                ..DeleteOptions::default()
            }),
        };
        let mut v = serde_json::to_value(&e).unwrap_or_default();
        if *self == ApiPaths::StandIn {
            v["apiVersion"] = STAND_IN_EVICTIONS.into();
        }
        v
    }
}

/// Whether `name` may appear in a path as it is (a DNS subdomain: what Kubernetes allows for
/// namespaces and pod names), so no runtime-given text builds another URL.
fn path_safe(name: &str) -> bool {
    crate::nrt::builder::is_dns_subdomain(name)
}

/// Whether the pod has a controller owner.
fn has_controller(meta: &ObjectMeta) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true))
}

/// Reads `pod` and evicts it when it is still that pod and has a controller owner.
pub async fn evict(client: &kube::Client, paths: ApiPaths, pod: &PodRef) -> Outcome {
    if !path_safe(&pod.namespace) || !path_safe(&pod.name) {
        return Outcome::Failed("the namespace or name is not a Kubernetes name".into());
    }
    let get = match http::Request::get(paths.pod(pod)).body(Vec::new()) {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let meta = match client.request::<PodMeta>(get).await {
        Ok(p) => p.metadata,
        Err(kube::Error::Api(s)) if s.code == 404 => return Outcome::Gone,
        Err(e) => return Outcome::Failed(format!("reading the pod: {e}")),
    };
    if meta.uid.as_deref() != Some(pod.uid.as_str()) {
        return Outcome::Gone;
    }
    if !has_controller(&meta) {
        return Outcome::NoController;
    }
    // Strict: a server that does not know a field of the body says so instead of dropping it.
    let uri = format!("{}?fieldValidation=Strict", paths.eviction(pod));
    let body = paths.eviction_body(pod).to_string().into_bytes();
    let post = match http::Request::post(uri)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
    {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    match client.request_text(post).await {
        Ok(_) => Outcome::Evicted,
        Err(kube::Error::Api(s)) => classify(s.code, &s.message),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// What an error answer to the eviction means: 429 is a PodDisruptionBudget (the eviction
/// handler's `TooManyRequests`), 404 a pod gone, 409 a failed UID precondition (another pod
/// of that name).
pub fn classify(code: u16, message: &str) -> Outcome {
    let message = crate::untrusted::message(message);
    match code {
        429 => Outcome::PdbBlocked(message),
        404 | 409 => Outcome::Gone,
        _ => Outcome::Failed(format!("HTTP {code}: {message}")),
    }
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;
