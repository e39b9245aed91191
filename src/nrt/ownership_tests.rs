//! The ownership decision on objects shaped as the API server returns them: the managedFields
//! entries below are copied from what apiextensions-apiserver 1.36 recorded for NFD v0.19's
//! create and update (no field manager, client-go's user-agent), NFD v0.20's forced apply, a
//! `kubectl edit` and nri-align's replace.

use serde_json::{json, Value};

use super::*;

const MIN: Duration = Duration::from_secs(60);

/// What nri-align wants: its label, one zone.
fn desired() -> NodeResourceTopology {
    serde_json::from_value(json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": "worker-a", "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
        "topologyPolicies": ["SingleNUMANodeContainerLevel"],
        "zones": [{"name": "node-0", "type": "Node",
                   "resources": [{"name": "cpu", "capacity": "4", "allocatable": "4",
                                  "available": "3"}]}],
        "attributes": [{"name": "topologyManagerPolicy", "value": "single-numa-node"}]
    }))
    .expect("object")
}

fn entry(manager: &str, operation: &str, time: &str, fields: Value) -> Value {
    json!({"apiVersion": "topology.node.k8s.io/v1alpha2", "fieldsType": "FieldsV1",
           "fieldsV1": fields, "manager": manager, "operation": operation, "time": time})
}

/// nri-align's entry after it replaced the zones at `time`.
fn ours(time: &str) -> Value {
    entry(
        FIELD_MANAGER,
        "Update",
        time,
        json!({"f:metadata": {"f:labels": {".": {}, "f:app.kubernetes.io/managed-by": {}}},
               "f:zones": {}}),
    )
}

/// The server's copy: `desired` with `available` CPUs, the label or not, and `entries`.
fn server(available: &str, labelled: bool, rv: &str, entries: Vec<Value>) -> NodeResourceTopology {
    let mut v = serde_json::to_value(desired()).expect("json");
    v["zones"][0]["resources"][0]["available"] = available.into();
    v["metadata"]["resourceVersion"] = rv.into();
    v["metadata"]["uid"] = "uid-1".into();
    v["metadata"]["managedFields"] = entries.into();
    if !labelled {
        v["metadata"]
            .as_object_mut()
            .expect("meta")
            .remove("labels");
    }
    serde_json::from_value(v).expect("object")
}

/// NFD v0.19 rewrote the zones at `time` (read, zones replaced, update: the label stays).
fn nfd_rewrite(time: &str, ours_at: &str, rv: &str) -> NodeResourceTopology {
    server(
        "1",
        true,
        rv,
        vec![
            entry(
                FIELD_MANAGER,
                "Update",
                ours_at,
                json!({"f:metadata": {"f:labels": {".": {}, "f:app.kubernetes.io/managed-by": {}}}}),
            ),
            entry(
                "nfd-topology-updater",
                "Update",
                time,
                json!({"f:attributes": {}, "f:topologyPolicies": {}, "f:zones": {},
                       "f:metadata": {"f:ownerReferences": {".": {}}}}),
            ),
        ],
    )
}

fn decide_now(cur: Option<&NodeResourceTopology>, r: &mut Rewrites) -> Decision {
    decide(cur, &desired(), false, window(MIN), r)
}

#[test]
fn an_object_without_the_label_is_left_alone_and_the_message_says_what_to_do() {
    let nfd = server(
        "4",
        false,
        "6",
        vec![entry(
            "nfd-topology-updater",
            "Update",
            "2026-11-27T11:50:16Z",
            json!({"f:attributes": {}, "f:topologyPolicies": {}, "f:zones": {}}),
        )],
    );
    let mut r = Rewrites::default();
    let Decision::LeaveAlone(not_owned) = decide_now(Some(&nfd), &mut r) else {
        panic!("a foreign object was not left alone");
    };
    assert_eq!(
        not_owned,
        NotOwned::Foreign {
            name: "worker-a".into(),
            managed_by: None,
            managers: vec!["nfd-topology-updater (Update)".into()],
        }
    );
    assert_eq!(not_owned.reason(), "foreign");
    let msg = not_owned.to_string();
    for part in [
        "NodeResourceTopology worker-a is not nri-align's",
        "no app.kubernetes.io/managed-by label",
        "field managers: nfd-topology-updater (Update)",
        "kubectl delete noderesourcetopology worker-a",
        "nrt.take_over_foreign: true",
    ] {
        assert!(msg.contains(part), "{part:?} missing from: {msg}");
    }
    // Even when its content happens to be nri-align's.
    let same = server("3", false, "6", vec![]);
    assert!(matches!(
        decide_now(Some(&same), &mut r),
        Decision::LeaveAlone(NotOwned::Foreign { .. })
    ));
    assert!(same.content_matches(&{
        let mut d = desired();
        d.metadata.labels = None;
        d
    }));
}

#[test]
fn another_managed_by_value_is_foreign_and_named() {
    let mut other = server("3", true, "6", vec![]);
    other
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(LABEL_MANAGED_BY.into(), "node-feature-discovery".into());
    let d = decide_now(Some(&other), &mut Rewrites::default());
    let Decision::LeaveAlone(n @ NotOwned::Foreign { .. }) = d else {
        panic!("{d:?}");
    };
    assert!(
        n.to_string().contains(
            "its label app.kubernetes.io/managed-by is \"node-feature-discovery\", not \
             \"nri-align\"; field managers: none recorded"
        ),
        "{n}"
    );
}

#[test]
fn take_over_replaces_a_foreign_object_and_nothing_else_changes() {
    let nfd = server("4", false, "6", vec![]);
    let d = decide(
        Some(&nfd),
        &desired(),
        true,
        window(MIN),
        &mut Rewrites::default(),
    );
    assert!(
        matches!(d, Decision::TakeOver(NotOwned::Foreign { .. })),
        "{d:?}"
    );
    let mut r = Rewrites::default();
    assert_eq!(
        decide(None, &desired(), true, window(MIN), &mut r),
        Decision::Create
    );
    let mine = server("3", true, "7", vec![ours("2026-11-27T11:50:19Z")]);
    assert_eq!(
        decide(Some(&mine), &desired(), true, window(MIN), &mut r),
        Decision::Unchanged
    );
}

#[test]
fn ours_is_created_kept_and_replaced_when_its_own_input_changed() {
    let mut r = Rewrites::default();
    assert_eq!(decide_now(None, &mut r), Decision::Create);
    let mine = server("3", true, "7", vec![ours("2026-11-27T11:50:19Z")]);
    assert_eq!(decide_now(Some(&mine), &mut r), Decision::Unchanged);
    // A new snapshot: the server's copy is nri-align's last write; nobody rewrote it, however
    // often that happens.
    let older = server("2", true, "7", vec![ours("2026-11-27T11:50:19Z")]);
    for _ in 0..10 {
        assert_eq!(decide_now(Some(&older), &mut r), Decision::Replace);
    }
}

#[test]
fn a_producer_rewriting_three_times_is_contested_and_left_alone() {
    let mut r = Rewrites::default();
    let first = nfd_rewrite("2026-11-27T11:51:00Z", "2026-11-27T11:50:19Z", "8");
    assert_eq!(decide_now(Some(&first), &mut r), Decision::Replace);
    // The same rewrite read again (a retry) counts once.
    assert_eq!(decide_now(Some(&first), &mut r), Decision::Replace);
    let second = nfd_rewrite("2026-11-27T11:52:00Z", "2026-11-27T11:51:01Z", "10");
    assert_eq!(decide_now(Some(&second), &mut r), Decision::Replace);
    let third = nfd_rewrite("2026-11-27T11:53:00Z", "2026-11-27T11:52:01Z", "12");
    let d = decide_now(Some(&third), &mut r);
    let Decision::LeaveAlone(c) = d else {
        panic!("not contested after three rewrites: {d:?}");
    };
    assert_eq!(
        c,
        NotOwned::Contested {
            name: "worker-a".into(),
            manager: "nfd-topology-updater".into(),
            rewrites: 3,
            last: "2026-11-27T11:53:00Z".into(),
        }
    );
    assert_eq!(c.reason(), "contested");
    let msg = c.to_string();
    for part in [
        "rewritten by field manager \"nfd-topology-updater\"",
        "3 rewrites",
        "kubectl delete noderesourcetopology worker-a",
    ] {
        assert!(msg.contains(part), "{part:?} missing from: {msg}");
    }
    // It stays left alone, whatever it holds, until the object goes.
    let mine = server("3", true, "14", vec![ours("2026-11-27T11:54:00Z")]);
    assert_eq!(decide_now(Some(&mine), &mut r), Decision::LeaveAlone(c));
    assert_eq!(decide_now(None, &mut r), Decision::Create);
    assert_eq!(decide_now(Some(&first), &mut r), Decision::Replace);
}

#[test]
fn nfd_server_side_apply_is_attributed_to_its_manager() {
    // NFD v0.20: apply with force as node-feature-discovery-topology-updater; nri-align keeps
    // only its label.
    let applied = |time: &str, rv: &str| {
        server(
            "0",
            true,
            rv,
            vec![
                entry(
                    "node-feature-discovery-topology-updater",
                    "Apply",
                    time,
                    json!({"f:attributes": {}, "f:topologyPolicies": {}, "f:zones": {},
                           "f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"u\"}": {}}}}),
                ),
                entry(
                    "nfd-topology-updater",
                    "Update",
                    "2026-11-27T11:50:23Z",
                    json!({"f:attributes": {}, "f:topologyPolicies": {}}),
                ),
                entry(
                    FIELD_MANAGER,
                    "Update",
                    "2026-11-27T11:50:25Z",
                    json!({"f:metadata": {"f:labels": {".": {}, "f:app.kubernetes.io/managed-by": {}}}}),
                ),
            ],
        )
    };
    assert_eq!(
        rewriter(&applied("2026-11-27T11:50:27Z", "10")),
        Some((
            "node-feature-discovery-topology-updater".into(),
            "2026-11-27T11:50:27Z".parse().expect("time")
        ))
    );
    let mut r = Rewrites::default();
    assert_eq!(
        decide_now(Some(&applied("2026-11-27T11:50:27Z", "10")), &mut r),
        Decision::Replace
    );
    assert_eq!(
        decide_now(Some(&applied("2026-11-27T11:51:27Z", "12")), &mut r),
        Decision::Replace
    );
    assert!(matches!(
        decide_now(Some(&applied("2026-11-27T11:52:27Z", "14")), &mut r),
        Decision::LeaveAlone(NotOwned::Contested { manager, .. })
            if manager == "node-feature-discovery-topology-updater"
    ));
}

#[test]
fn hand_edits_by_different_managers_or_far_apart_are_repaired() {
    let edit = |manager: &str, time: &str, rv: &str| {
        server(
            "0",
            true,
            rv,
            vec![
                ours("2026-11-27T10:00:00Z"),
                entry(manager, "Update", time, json!({"f:zones": {}})),
            ],
        )
    };
    let mut r = Rewrites::default();
    // Alternating managers never chain.
    for (i, m) in [
        "kubectl-edit",
        "kube",
        "kubectl-edit",
        "kube",
        "kubectl-edit",
    ]
    .iter()
    .enumerate()
    {
        let t = format!("2026-11-27T10:0{}:00Z", i + 1);
        assert_eq!(
            decide_now(Some(&edit(m, &t, &i.to_string())), &mut r),
            Decision::Replace
        );
    }
    // The same manager, but more than the window (30 min at a 60 s resync) apart.
    let mut r = Rewrites::default();
    for (i, t) in ["11:00", "11:31", "12:02", "12:33"].iter().enumerate() {
        let t = format!("2026-11-27T{t}:00Z");
        assert_eq!(
            decide_now(Some(&edit("kubectl-edit", &t, &i.to_string())), &mut r),
            Decision::Replace
        );
    }
    // Another object (deleted and made again, another uid) starts another count.
    let mut r = Rewrites::default();
    for (i, t) in ["11:00", "11:01"].iter().enumerate() {
        let t = format!("2026-11-27T{t}:00Z");
        decide_now(Some(&edit("kubectl-edit", &t, &i.to_string())), &mut r);
    }
    let mut again = edit("kubectl-edit", "2026-11-27T11:02:00Z", "9");
    again.metadata.uid = Some("uid-2".into());
    assert_eq!(decide_now(Some(&again), &mut r), Decision::Replace);
}

#[test]
fn only_newer_entries_holding_content_count_as_rewrites() {
    let with = |entries: Vec<Value>| server("0", true, "5", entries);
    let t0 = "2026-11-27T11:50:25Z";
    // As old as nri-align's own write (whole seconds): not attributed.
    assert_eq!(
        rewriter(&with(vec![
            ours(t0),
            entry("nfd-topology-updater", "Update", t0, json!({"f:zones": {}}))
        ])),
        None
    );
    // Newer, but only a label of its own: not a rewrite of nri-align's content.
    assert_eq!(
        rewriter(&with(vec![
            ours(t0),
            entry(
                "kubectl-label",
                "Update",
                "2026-11-27T11:59:00Z",
                json!({"f:metadata": {"f:labels": {"f:team": {}}}})
            )
        ])),
        None
    );
    // A subresource's entry is not the object's content.
    let mut status = entry(
        "x",
        "Update",
        "2026-11-27T11:59:00Z",
        json!({"f:zones": {}}),
    );
    status["subresource"] = "status".into();
    assert_eq!(rewriter(&with(vec![ours(t0), status])), None);
    // The newest of several.
    let got = rewriter(&with(vec![
        ours(t0),
        entry(
            "a",
            "Update",
            "2026-11-27T11:51:00Z",
            json!({"f:attributes": {}}),
        ),
        entry(
            "b",
            "Update",
            "2026-11-27T11:52:00Z",
            json!({"f:topologyPolicies": {}}),
        ),
    ]));
    assert_eq!(got.map(|(m, _)| m).as_deref(), Some("b"));
    // No nri-align entry at all: any content holder counts.
    assert!(rewriter(&with(vec![entry(
        "a",
        "Update",
        t0,
        json!({"f:zones": {}})
    )]))
    .is_some());
}

#[test]
fn the_window_is_half_an_hour_or_three_resyncs() {
    assert_eq!(window(MIN), Duration::from_secs(1800));
    assert_eq!(
        window(Duration::from_secs(3600)),
        Duration::from_secs(3 * 3600)
    );
}
