//! The eviction requests of `evict_refused_after` (src/evict/api.rs) against a real API server
//! (hack/apiserver-up), whose stand-in Pod and Eviction CRDs (hack/apiserver/stand-ins/) take
//! the pod read and the eviction a cluster's core API would: every outcome but a
//! PodDisruptionBudget's 429 (which the stand-ins cannot give; its classification is a unit
//! test), with the service account token authorized as packaging/kubernetes/components/evict.

use kube::api::{Api, PostParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::json;

use nri_align::evict::{api, ApiPaths, Outcome, PodRef};
use nri_align::nrt::client::{ApiAccess, Timeouts};
use test_support::apiserver::ApiServer;

const NS: &str = "evict-tests";

async fn client(path: std::path::PathBuf) -> kube::Client {
    ApiAccess::Kubeconfig {
        path,
        context: None,
    }
    .client(Timeouts::default())
    .await
    .expect("client")
}

fn stand_in(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Creates stand-in pod `name` (with a controller owner when `owned`); its reference.
async fn pod(pods: &Api<DynamicObject>, name: &str, owned: bool) -> PodRef {
    let mut meta = json!({"name": name, "namespace": NS});
    if owned {
        meta["ownerReferences"] = json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "not-a-controller",
             "uid": "6a1f8f3e-0000-4000-8000-0000000000aa"},
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
             "uid": "6a1f8f3e-0000-4000-8000-0000000000bb", "controller": true},
        ]);
    }
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "core.k8s.io/v1", "kind": "Pod", "metadata": meta, "spec": {},
    }))
    .expect("object");
    let made = pods
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create pod {name}: {e}"));
    PodRef {
        namespace: NS.into(),
        name: name.into(),
        uid: made.metadata.uid.expect("uid"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_outcome_of_an_eviction_against_the_stand_ins() {
    let Some(server) = ApiServer::up("evict-api", "evict_apiserver::every_outcome") else {
        return;
    };
    let admin = client(server.path("KUBECONFIG_ADMIN")).await;
    let pods: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), NS, &stand_in("core.k8s.io", "Pod", "pods"));
    let evictions: Api<DynamicObject> = Api::namespaced_with(
        admin,
        NS,
        &stand_in("policy.k8s.io", "Eviction", "evictions"),
    );
    // As nri-align runs: the service account's token, the rules of components/evict.
    let sa = client(server.path("KUBECONFIG_TOKEN")).await;
    let paths = ApiPaths::StandIn;
    let stamp = std::process::id();

    // A controller among the owners: evicted, the body accepted by the schema as sent.
    let owned = pod(&pods, &format!("owned-{stamp}"), true).await;
    assert_eq!(api::evict(&sa, paths, &owned).await, Outcome::Evicted);
    let ev = evictions.get(&owned.name).await.expect("the eviction");
    assert_eq!(
        ev.data["deleteOptions"],
        json!({"preconditions": {"uid": owned.uid}})
    );
    // Another attempt for the same pod (the server keeps the first): not evicted twice.
    assert_eq!(api::evict(&sa, paths, &owned).await, Outcome::Gone);

    // No controller: nothing created.
    let orphan = pod(&pods, &format!("orphan-{stamp}"), false).await;
    assert_eq!(api::evict(&sa, paths, &orphan).await, Outcome::NoController);
    assert!(evictions
        .get_opt(&orphan.name)
        .await
        .expect("read")
        .is_none());

    // A new pod of the name (another UID), and a pod gone: nothing to evict.
    let recreated = PodRef {
        uid: "00000000-0000-4000-8000-000000000000".into(),
        ..pod(&pods, &format!("recreated-{stamp}"), true).await
    };
    assert_eq!(api::evict(&sa, paths, &recreated).await, Outcome::Gone);
    let gone = PodRef {
        name: format!("never-{stamp}"),
        ..owned.clone()
    };
    assert_eq!(api::evict(&sa, paths, &gone).await, Outcome::Gone);

    // Without the rules: a failure saying so, never a silent success.
    let nobody = client(server.path("KUBECONFIG_TOKEN_UNAUTHORIZED")).await;
    let other = pod(&pods, &format!("other-{stamp}"), true).await;
    match api::evict(&nobody, paths, &other).await {
        Outcome::Failed(m) => assert!(m.contains("403") || m.contains("forbidden"), "{m}"),
        o => panic!("unauthorized: {o:?}"),
    }
    // A name that is no Kubernetes name never reaches a URL.
    let bad = PodRef {
        name: "../../x".into(),
        ..other
    };
    assert!(matches!(
        api::evict(&sa, paths, &bad).await,
        Outcome::Failed(_)
    ));
}
