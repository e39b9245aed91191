use serde_json::json;

use super::{classify, has_controller, ApiPaths, Outcome};
use crate::evict::tracker::PodRef;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

fn pod() -> PodRef {
    PodRef {
        namespace: "team-a".into(),
        name: "web-7d9f-x2".into(),
        uid: "0b6f6c8e-1d2a-4c4e-9f0e-2f1b7a8c9d00".into(),
    }
}

#[test]
fn upstream_requests_go_to_the_pod_and_its_eviction_subresource() {
    let p = ApiPaths::Upstream;
    assert_eq!(p.pod(&pod()), "/api/v1/namespaces/team-a/pods/web-7d9f-x2");
    assert_eq!(
        p.eviction(&pod()),
        "/api/v1/namespaces/team-a/pods/web-7d9f-x2/eviction"
    );
}

#[test]
fn the_body_is_a_policy_v1_eviction_with_the_uid_as_precondition() {
    let want = json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "web-7d9f-x2", "namespace": "team-a"},
        "deleteOptions": {"preconditions": {"uid": "0b6f6c8e-1d2a-4c4e-9f0e-2f1b7a8c9d00"}},
    });
    assert_eq!(ApiPaths::Upstream.eviction_body(&pod()), want);
    // The stand-in differs only in the group it is served from.
    let mut stand_in = want;
    stand_in["apiVersion"] = "policy.k8s.io/v1".into();
    assert_eq!(ApiPaths::StandIn.eviction_body(&pod()), stand_in);
    assert_eq!(
        ApiPaths::StandIn.eviction(&pod()),
        "/apis/policy.k8s.io/v1/namespaces/team-a/evictions"
    );
}

#[test]
fn only_an_owner_marked_controller_counts() {
    let owner = |controller| OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "web-7d9f".into(),
        uid: "u".into(),
        controller,
        block_owner_deletion: None,
    };
    let meta = |refs: Vec<OwnerReference>| ObjectMeta {
        owner_references: Some(refs),
        ..ObjectMeta::default()
    };
    assert!(has_controller(&meta(vec![owner(None), owner(Some(true))])));
    assert!(!has_controller(&meta(vec![
        owner(None),
        owner(Some(false))
    ])));
    assert!(!has_controller(&ObjectMeta::default()));
}

#[test]
fn error_answers_are_told_apart() {
    assert!(matches!(
        classify(429, "Cannot evict pod as it would violate the pod's disruption budget."),
        Outcome::PdbBlocked(m) if m.contains("disruption budget")
    ));
    assert_eq!(classify(404, "not found"), Outcome::Gone);
    assert_eq!(classify(409, "Precondition failed: UID"), Outcome::Gone);
    assert!(matches!(classify(403, "forbidden"), Outcome::Failed(m) if m.contains("403")));
    let labels: Vec<&str> = [
        Outcome::Evicted,
        Outcome::NoController,
        classify(429, ""),
        Outcome::Gone,
        classify(500, ""),
    ]
    .iter()
    .map(Outcome::label)
    .collect();
    assert_eq!(
        labels,
        ["evicted", "no-controller", "pdb-blocked", "gone", "failed"]
    );
}
