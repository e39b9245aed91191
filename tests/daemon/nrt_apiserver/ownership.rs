//! Objects nri-align does not own, on the real API server: one NFD's topology-updater made
//! (no nri-align label) is left untouched until it is deleted or `take_over_foreign` is set;
//! NFD rewriting nri-align's object at every interval (v0.19: read, zones replaced, update
//! with the metadata kept; v0.20: server-side apply with force) is told apart from a hand edit
//! and no longer fought.
//!
//! NFD v0.19 sets no field manager: the server records the client's user-agent up to the
//! first `/`, `nfd-topology-updater` for client-go in that binary, as an `Update`. The writes
//! below name that manager explicitly, which the server records the same way.

use kube::api::{Patch, PatchParams};
use nri_align::nrt::ownership::NotOwned;
use serde_json::json;

use super::*;

/// NFD v0.19's field manager (client-go's user-agent prefix).
const NFD: &str = "nfd-topology-updater";
/// NFD v0.20's, for its server-side apply.
const NFD_APPLY: &str = "node-feature-discovery-topology-updater";

fn as_manager(manager: &str) -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(manager.into()),
    }
}

/// The owner NFD sets: its namespace.
fn nfd_owner() -> serde_json::Value {
    json!([{"apiVersion": "v1", "kind": "Namespace", "name": "node-feature-discovery",
            "uid": "6c1b3f0e-7f55-4f5e-9d0a-2f1f9a3e5b11"}])
}

/// NFD's view of the node: `ours`' zones with nothing available, its attributes.
fn nfd_content(ours: &NodeResourceTopology) -> serde_json::Value {
    let mut zones = serde_json::to_value(&ours.zones).expect("zones");
    for zone in zones.as_array_mut().expect("zones") {
        for r in zone["resources"].as_array_mut().expect("resources") {
            r["available"] = "0".into();
        }
    }
    json!({
        "topologyPolicies": ["SingleNUMANodeContainerLevel"],
        "zones": zones,
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"},
                       {"name": "topologyManagerScope", "value": "container"}],
    })
}

/// What NFD v0.19 creates when there is no object: no labels, its namespace as owner.
async fn nfd_creates(api: &Api<NodeResourceTopology>, name: &str, ours: &NodeResourceTopology) {
    let mut obj = nfd_content(ours);
    obj["apiVersion"] = "topology.node.k8s.io/v1alpha2".into();
    obj["kind"] = "NodeResourceTopology".into();
    obj["metadata"] = json!({"name": name, "ownerReferences": nfd_owner()});
    let obj: NodeResourceTopology = serde_json::from_value(obj).expect("object");
    api.create(&as_manager(NFD), &obj)
        .await
        .expect("NFD creates");
}

/// NFD v0.19's update: the object as read, zones, owner and attributes replaced, labels and
/// the rest kept.
async fn nfd_updates(api: &Api<NodeResourceTopology>, name: &str, ours: &NodeResourceTopology) {
    let content = nfd_content(ours);
    let mut obj = api.get(name).await.expect("NFD reads");
    obj.zones = serde_json::from_value(content["zones"].clone()).expect("zones");
    obj.attributes = serde_json::from_value(content["attributes"].clone()).expect("attributes");
    obj.metadata.owner_references = serde_json::from_value(nfd_owner()).expect("owner");
    api.replace(name, &as_manager(NFD), &obj)
        .await
        .expect("NFD updates");
}

/// NFD v0.20's forced server-side apply.
async fn nfd_applies(api: &Api<NodeResourceTopology>, name: &str, ours: &NodeResourceTopology) {
    let mut obj = nfd_content(ours);
    obj["apiVersion"] = "topology.node.k8s.io/v1alpha2".into();
    obj["kind"] = "NodeResourceTopology".into();
    obj["metadata"] = json!({"name": name, "ownerReferences": nfd_owner()});
    api.patch(
        name,
        &PatchParams::apply(NFD_APPLY).force(),
        &Patch::Apply(obj),
    )
    .await
    .expect("NFD applies");
}

/// Whether the server's object `name` is nri-align's `want`.
async fn is(api: &Api<NodeResourceTopology>, name: &str, want: &NodeResourceTopology) -> bool {
    api.get(name).await.is_ok_and(|o| o.content_matches(want))
}

/// Deletes what a kept instance (after a failed run, hack/apiserver-down --keep) still holds.
async fn clean(api: &Api<NodeResourceTopology>, names: &[&str]) {
    for name in names {
        if api.get_opt(name).await.expect("get").is_some() {
            api.delete(name, &DeleteParams::default())
                .await
                .expect("delete a leftover");
        }
    }
}

fn labelled_ours(o: &NodeResourceTopology) -> bool {
    o.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/managed-by"))
        .is_some_and(|v| v == "nri-align")
}

/// The parts a write would change, for "untouched" checks.
fn content(o: &NodeResourceTopology) -> serde_json::Value {
    json!({"labels": o.metadata.labels, "owners": o.metadata.owner_references,
           "rv": o.metadata.resource_version, "policies": o.topology_policies,
           "zones": o.zones, "attributes": o.attributes})
}

/// Lets `resyncs` resyncs of `p` pass (each attempt that leaves the object alone counts
/// `reason`).
async fn resyncs(metrics: &NrtMetrics, reason: &str, resyncs: u64) {
    let from = metrics.successes(reason);
    eventually(
        &format!("{resyncs} more resyncs leave it {reason}"),
        async || metrics.successes(reason) >= from + resyncs,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario against a real API server, step by step: each step checks what the steps before left in the published object"
)]
async fn a_foreign_object_is_left_alone_until_deleted_or_taken_over() {
    let Some(server) = ApiServer::up("nrt-foreign", "nrt_apiserver::foreign") else {
        return;
    };
    let admin = client(kubeconfig(server.path("KUBECONFIG_ADMIN"))).await;
    let api: Api<NodeResourceTopology> = Api::all(admin.clone());
    clean(&api, &["worker-nfd", "worker-leftover"]).await;
    let (topo, alloc) = host();

    // (a) NFD made the object first: nri-align leaves it as it is, resync after resync and
    // whatever snapshots it gets, and says whose it is.
    let s = settings("worker-nfd");
    let want = desired(&snapshot(&topo, &alloc), &s);
    nfd_creates(&api, "worker-nfd", &want).await;
    let before = content(&api.get("worker-nfd").await.expect("NFD's object"));
    let metrics = NrtMetrics::default();
    let p = Publisher::spawn(admin.clone(), s.clone(), fast(), metrics.clone());
    p.update(snapshot(&topo, &alloc));
    eventually("the foreign object is reported", async || {
        p.status().not_owned.is_some()
    })
    .await;
    let Some(NotOwned::Foreign {
        name,
        managed_by,
        managers,
    }) = p.status().not_owned
    else {
        panic!("not reported as foreign: {:?}", p.status());
    };
    assert_eq!(
        (name.as_str(), managed_by),
        ("worker-nfd", None),
        "{managers:?}"
    );
    assert_eq!(managers, [format!("{NFD} (Update)")]);
    assert_eq!(metrics.not_owned("foreign"), 1);
    p.update(snapshot(&topo, &alloc));
    resyncs(&metrics, "foreign", 3).await;
    let after = content(&api.get("worker-nfd").await.expect("still there"));
    assert_eq!(after, before, "the foreign object was changed");
    assert_eq!(p.status().published, 0);
    assert_eq!(
        (metrics.successes("created"), metrics.successes("replaced")),
        (0, 0)
    );
    assert_eq!(metrics.failures("conflict"), 0);

    // Deleted (NFD stopped): nri-align creates its own at the next resync, no restart.
    api.delete("worker-nfd", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("nri-align creates its own object", async || {
        api.get_opt("worker-nfd")
            .await
            .ok()
            .flatten()
            .is_some_and(|o| o.content_matches(&want) && labelled_ours(&o))
    })
    .await;
    eventually("the status says it is owned again", async || {
        p.status().not_owned.is_none()
    })
    .await;
    assert_eq!(metrics.not_owned("foreign"), 0);
    assert_eq!(metrics.successes("created"), 1);
    drop(p);

    // (b) nrt.take_over_foreign, set by a reload while the object is left alone: replaced,
    // labelled, other metadata kept, and then stable.
    let s = settings("worker-leftover");
    nfd_creates(&api, "worker-leftover", &want).await;
    let metrics = NrtMetrics::default();
    let p = Publisher::spawn(admin.clone(), s.clone(), fast(), metrics.clone());
    p.update(snapshot(&topo, &alloc));
    eventually("the leftover is reported foreign", async || {
        metrics.not_owned("foreign") == 1
    })
    .await;
    let g = p.set_settings(NrtSettings {
        take_over_foreign: true,
        ..s.clone()
    });
    published(&p, g, &server).await;
    let want = desired(&snapshot(&topo, &alloc), &s);
    let got = api.get("worker-leftover").await.expect("taken over");
    assert!(got.content_matches(&want), "{got:#?}");
    assert!(labelled_ours(&got));
    // The previous producer's owner goes with it (its namespace's deletion would otherwise
    // collect nri-align's object).
    assert_eq!(got.metadata.owner_references, None);
    assert_eq!(metrics.successes("taken-over"), 1);
    assert_eq!(p.status().not_owned, None);
    assert_eq!(metrics.not_owned("foreign"), 0);
    let rv = got.metadata.resource_version.clone();
    let unchanged = metrics.successes("unchanged");
    eventually("two resyncs find it unchanged", async || {
        metrics.successes("unchanged") >= unchanged + 2
    })
    .await;
    let again = api.get("worker-leftover").await.expect("get");
    assert_eq!(again.metadata.resource_version, rv);
    assert_eq!(
        (
            metrics.successes("taken-over"),
            metrics.successes("replaced")
        ),
        (1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario against a real API server, step by step: each step checks what the steps before left in the published object"
)]
async fn a_second_producer_rewriting_the_object_is_detected_and_no_longer_fought() {
    let Some(server) = ApiServer::up("nrt-contest", "nrt_apiserver::contest") else {
        return;
    };
    let admin = client(kubeconfig(server.path("KUBECONFIG_ADMIN"))).await;
    let api: Api<NodeResourceTopology> = Api::all(admin.clone());
    clean(&api, &["worker-c"]).await;
    let (topo, alloc) = host();
    let s = settings("worker-c");
    let want = desired(&snapshot(&topo, &alloc), &s);
    let metrics = NrtMetrics::default();
    let p = Publisher::spawn(admin.clone(), s.clone(), fast(), metrics.clone());
    let g = p.update(snapshot(&topo, &alloc));
    published(&p, g, &server).await;

    // A hand edit is repaired at the next resync, and is no producer.
    let mut edited = api.get("worker-c").await.expect("get");
    edited.zones[1].resources[0].available = "0".into();
    api.replace("worker-c", &as_manager("kubectl-edit"), &edited)
        .await
        .expect("hand edit");
    eventually("the hand edit is repaired", async || {
        is(&api, "worker-c", &want).await
    })
    .await;
    assert_eq!(p.status().not_owned, None);

    // NFD v0.19 on the same node: it rewrites the zones at every interval, keeping the label.
    // Each write comes a second after nri-align's repair, as an interval would (managedFields
    // times are whole seconds).
    for round in 1..=3 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        nfd_updates(&api, "worker-c", &want).await;
        if round < 3 {
            eventually(&format!("NFD's rewrite {round} is repaired"), async || {
                is(&api, "worker-c", &want).await
            })
            .await;
            assert_eq!(p.status().not_owned, None, "after {round} rewrites");
        }
    }
    eventually("the second producer is detected", async || {
        p.status().not_owned.is_some()
    })
    .await;
    assert_eq!(
        p.status().not_owned.map(|n| match n {
            NotOwned::Contested {
                name,
                manager,
                rewrites,
                ..
            } => (name, manager, rewrites),
            other => panic!("{other:?}"),
        }),
        Some(("worker-c".into(), NFD.into(), 3))
    );
    assert_eq!(metrics.not_owned("contested"), 1);
    // No longer fought: NFD's content stays, through resyncs, new snapshots and NFD's next
    // rewrite.
    let nfd_view = content(&api.get("worker-c").await.expect("get"));
    p.update(snapshot(&topo, &alloc));
    resyncs(&metrics, "contested", 2).await;
    assert_eq!(content(&api.get("worker-c").await.expect("get")), nfd_view);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut changed = api.get("worker-c").await.expect("get");
    changed.zones[0].resources[0].available = "1".into();
    api.replace("worker-c", &as_manager(NFD), &changed)
        .await
        .expect("NFD's next rewrite");
    let nfd_view = content(&api.get("worker-c").await.expect("get"));
    resyncs(&metrics, "contested", 2).await;
    assert_eq!(content(&api.get("worker-c").await.expect("get")), nfd_view);

    // NFD stopped and its object deleted: nri-align's own again.
    api.delete("worker-c", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("nri-align creates its own object", async || {
        is(&api, "worker-c", &want).await
    })
    .await;
    eventually("the status says it is owned again", async || {
        p.status().not_owned.is_none()
    })
    .await;
    assert_eq!(metrics.not_owned("contested"), 0);

    // NFD v0.20's forced server-side apply is caught the same way, under its own manager.
    for round in 1..=3 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        nfd_applies(&api, "worker-c", &want).await;
        if round < 3 {
            eventually(&format!("NFD's apply {round} is repaired"), async || {
                is(&api, "worker-c", &want).await
            })
            .await;
        }
    }
    eventually("the applying producer is detected", async || {
        matches!(&p.status().not_owned,
            Some(NotOwned::Contested { manager, .. }) if manager == NFD_APPLY)
    })
    .await;
    let applied = content(&api.get("worker-c").await.expect("get"));
    resyncs(&metrics, "contested", 2).await;
    assert_eq!(content(&api.get("worker-c").await.expect("get")), applied);
    assert_eq!(metrics.failures("invalid"), 0);
}
