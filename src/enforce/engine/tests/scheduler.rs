//! Pods a scheduler placed (Koordinator, Crane) through the real engine: the scheduler's CPUs,
//! memory nodes and GPU reach the adjustment with the GPU's device node and env, a choice
//! that cannot be had and a malformed one fail the create with the reason, and each outcome
//! is counted.

use super::kubernetes::{events, kctr, kpod, real};
use super::*;
use crate::placement::scheduler::{KOORD_DEVICE_ALLOCATED, KOORD_RESOURCE_STATUS};

fn counted(e: &Engine<crate::placement::Allocator>, scheduler: &str, outcome: &str) -> bool {
    events(e).contains(&format!(
        "nri_align_scheduler_choice_total{{scheduler=\"{scheduler}\",outcome=\"{outcome}\"}} 1"
    ))
}

#[test]
fn koordinators_cpus_memory_and_gpu_reach_the_container() {
    let mut e = real(Config::default(), "");
    // The host: CPUs 0-3 on node 0, 4-7 and GPU minor 1 on node 1.
    let p = kpod(
        "ns",
        "lsr",
        &[
            (
                KOORD_RESOURCE_STATUS,
                r#"{"cpuset":"5-6","numaNodeResources":[{"node":1,"resources":{"cpu":"2","memory":"1Gi"}}]}"#,
            ),
            (
                KOORD_DEVICE_ALLOCATED,
                r#"{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"100"}}]}"#,
            ),
        ],
    );
    let c = kctr(&p, "c1", "app", 2000, Some(2000));
    let out = e
        .create_container(&p, &c)
        .expect("placed")
        .expect("not exempt");
    let adj = &out.adjustment;
    assert_eq!(
        (adj.cpuset_cpus.as_str(), adj.cpuset_mems.as_str()),
        ("5-6", "1")
    );
    let nodes: Vec<&str> = adj.add_devices.iter().map(|d| d.path.as_str()).collect();
    assert!(nodes.contains(&"/dev/nvidia1"), "{nodes:?}");
    assert_eq!(
        adj.env.get("NVIDIA_VISIBLE_DEVICES").map(String::as_str),
        Some("GPU-1aaa")
    );
    assert!(counted(&e, "koordinator", "honoured"), "{}", events(&e));

    // Another pod told the same CPU after a race: refused, naming who holds it.
    let q = kpod(
        "ns",
        "late",
        &[(KOORD_RESOURCE_STATUS, r#"{"cpuset":"6-7"}"#)],
    );
    let err = e
        .create_container(&q, &kctr(&q, "c2", "app", 2000, Some(2000)))
        .expect_err("conflict")
        .to_string();
    assert!(
        err.starts_with(
            "nri-align: koordinator chose cpus 6-7 for ns/late/app, but cpu 6 is held;"
        ),
        "{err}"
    );
    assert!(
        err.contains("held by ns/lsr/app (container c1, cpus 5-6)"),
        "{err}"
    );
    assert!(counted(&e, "koordinator", "refused"), "{}", events(&e));

    // A malformed value refuses the container and is counted as such.
    let bad = kpod(
        "ns",
        "bad",
        &[(KOORD_RESOURCE_STATUS, r#"{"cpuset":"6-"}"#)],
    );
    let err = e
        .create_container(&bad, &kctr(&bad, "c3", "app", 1000, Some(1000)))
        .expect_err("malformed")
        .to_string();
    assert!(
        err.starts_with("nri-align: invalid annotation scheduling.koordinator.sh/resource-status="),
        "{err}"
    );
    assert!(counted(&e, "koordinator", "malformed"), "{}", events(&e));
    assert!(!e.records().containers.contains_key("c3"));
}

#[test]
fn preferred_places_elsewhere_and_counts_it() {
    let mut cfg = Config::default();
    cfg.placement.scheduler_choice = crate::placement::SchedulerChoiceMode::Preferred;
    let mut e = real(cfg, "");
    let zone = r#"[{"name":"node1","type":"Node"}]"#;
    let a = kpod(
        "ns",
        "a",
        &[(crate::placement::scheduler::CRANE_TOPOLOGY_RESULT, zone)],
    );
    e.create_container(&a, &kctr(&a, "c1", "app", 3000, Some(3000)))
        .expect("placed")
        .expect("not exempt");
    assert!(counted(&e, "crane", "honoured"), "{}", events(&e));
    // Node 1 has one CPU left: the node's own search places the next on node 0.
    let b = kpod(
        "ns",
        "b",
        &[(crate::placement::scheduler::CRANE_TOPOLOGY_RESULT, zone)],
    );
    let out = e
        .create_container(&b, &kctr(&b, "c2", "app", 2000, Some(2000)))
        .expect("placed elsewhere")
        .expect("not exempt");
    assert_eq!(out.adjustment.cpuset_mems, "0");
    assert!(counted(&e, "crane", "overridden"), "{}", events(&e));
    let reason = &e.records().containers["c2"].assignment.reason;
    assert!(reason.contains("crane's choice set aside"), "{reason}");
}
