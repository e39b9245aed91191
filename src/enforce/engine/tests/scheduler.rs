//! Pods a scheduler placed (Koordinator, Crane) through the real engine: a trusted scheduler's
//! CPUs, memory nodes and GPU choice reach the adjustment (the GPU only among those the
//! container was given), a choice that cannot be had and a malformed one fail the create with
//! the reason, each outcome is counted, and an untrusted scheduler's annotations (the pod's own
//! to write) grant nothing under any policy or GPU mode.

use super::kubernetes::{events, kctr, kpod, real, BUS};
use super::*;
use crate::enforce::container::KubeletDevices;
use crate::enforce::inputs::tests::node;
use crate::placement::scheduler::{KOORD_DEVICE_ALLOCATED, KOORD_RESOURCE_STATUS};
use crate::placement::{Policy, Scheduler};

/// The default configuration, trusting `schedulers`.
fn trusting(schedulers: &[Scheduler]) -> Config {
    Config {
        trusted_schedulers: schedulers.to_vec(),
        ..Config::default()
    }
}

fn counted(e: &Engine<crate::placement::Allocator>, scheduler: &str, outcome: &str) -> bool {
    events(e).contains(&format!(
        "nri_align_scheduler_choice_total{{scheduler=\"{scheduler}\",outcome=\"{outcome}\"}} 1"
    ))
}

#[test]
fn koordinators_cpus_memory_and_gpu_reach_the_container() {
    let mut e = real(trusting(&[Scheduler::Koordinator]), "");
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
    // The device plugin's GPU reaches the container as a device node of the runtime's.
    let mut c = kctr(&p, "c1", "app", 2000, Some(2000));
    c.devices = vec![node("/dev/nvidia1", 195, 1)];
    let out = e
        .create_container(&p, &c)
        .expect("placed")
        .expect("not exempt");
    let adj = &out.adjustment;
    assert_eq!(
        (
            adj.cpuset_cpus.to_string().as_str(),
            adj.cpuset_mems.to_string().as_str()
        ),
        ("5-6", "1")
    );
    assert_eq!(e.records().containers["c1"].assignment.gpus, vec![BUS[1]]);
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
    let mut cfg = trusting(&[Scheduler::Crane]);
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
    assert_eq!(out.adjustment.cpuset_mems.to_string(), "0");
    assert!(counted(&e, "crane", "overridden"), "{}", events(&e));
    let reason = &e.records().containers["c2"].assignment.reason;
    assert!(reason.contains("crane's choice set aside"), "{reason}");
}

/// A BestEffort container of pod `name` that asks for nothing, its pod annotated with
/// Koordinator's GPU 0 and an RDMA NIC.
fn self_granted(name: &str) -> (PodView, ContainerView) {
    let p = kpod(
        "ns",
        name,
        &[(
            KOORD_DEVICE_ALLOCATED,
            r#"{"gpu":[{"minor":0}],"rdma":[{"minor":0,"id":"0000:04:00.0"}]}"#,
        )],
    );
    let mut c = kctr(&p, &format!("{name}-c"), "app", 0, None);
    c.resources = ResourcesView::default();
    (p, c)
}

#[test]
fn a_pods_own_scheduler_annotation_grants_no_device_under_any_policy_or_mode() {
    let untrusted =
        "nri_align_scheduler_choice_total{scheduler=\"koordinator\",outcome=\"untrusted\"} 1";
    for policy in [
        Policy::None,
        Policy::BestEffort,
        Policy::Restricted,
        Policy::SingleNumaNode,
    ] {
        for mode in [GpuMode::Keep, GpuMode::Remap] {
            for trusted in [&[][..], &[Scheduler::Koordinator][..]] {
                let mut cfg = trusting(trusted);
                cfg.placement.policy = policy;
                cfg.placement.gpu_mode = mode;
                let mut e = real(cfg, "");
                let case = format!("{policy:?} {mode:?} trusted {trusted:?}");
                let (p, c) = self_granted("thief");
                let out = e
                    .create_container(&p, &c)
                    .unwrap_or_else(|err| panic!("{case}: {err}"))
                    .expect("not exempt");
                let adj = &out.adjustment;
                assert!(adj.add_devices.is_empty(), "{case}: {:?}", adj.add_devices);
                assert!(
                    adj.device_rules.iter().all(|r| !r.allow),
                    "{case}: {:?}",
                    adj.device_rules
                );
                for var in ["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"] {
                    assert!(!adj.env.contains_key(var), "{case}: {:?}", adj.env);
                }
                let rec = &e.records().containers[&c.id].assignment;
                assert!(
                    rec.gpus.is_empty() && rec.nics.is_empty(),
                    "{case}: {rec:?}"
                );
                assert_eq!(
                    events(&e).contains(untrusted),
                    trusted.is_empty(),
                    "{case}: {}",
                    events(&e)
                );
                // The pod the device plugin gives GPU 0 still gets it.
                let v = kpod("ns", "victim", &[]);
                let mut vc = kctr(&v, "victim-c", "cuda", 1000, Some(1000));
                vc.env = vec!["NVIDIA_VISIBLE_DEVICES=GPU-0aaa".into()];
                vc.kubelet_devices = Some(vec![KubeletDevices {
                    resource: "nvidia.com/gpu".into(),
                    ids: vec!["GPU-0aaa".into()],
                }]);
                e.create_container(&v, &vc)
                    .unwrap_or_else(|err| panic!("{case}: victim refused: {err}"));
                let held = &e.records().containers["victim-c"].assignment.gpus;
                assert_eq!(held.len(), 1, "{case}: {held:?}");
            }
        }
    }
}

#[test]
fn an_untrusted_malformed_annotation_refuses_nothing_and_is_logged_once_per_pod() {
    let mut e = real(Config::default(), "");
    let p = kpod("ns", "p", &[(KOORD_RESOURCE_STATUS, r#"{"cpuset":"x"}"#)]);
    for id in ["a", "b"] {
        e.create_container(&p, &kctr(&p, id, id, 1000, Some(1000)))
            .expect("placed")
            .expect("not exempt");
    }
    assert!(
        events(&e).contains(
            "nri_align_scheduler_choice_total{scheduler=\"koordinator\",outcome=\"untrusted\"} 2"
        ),
        "{}",
        events(&e)
    );
    // The log line is once per pod: the second container finds the pod noted.
    assert!(!e.pods.first_untrusted_note(&p.id));
}

#[test]
fn a_refusal_another_pods_hold_caused_never_counts_towards_eviction() {
    let mut e = real(trusting(&[Scheduler::Koordinator]), "");
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    e.set_refusal_observer(Box::new(super::observe::Refusals(heard.clone())));
    let first = kpod(
        "ns",
        "first",
        &[(KOORD_RESOURCE_STATUS, r#"{"cpuset":"5-6"}"#)],
    );
    e.create_container(&first, &kctr(&first, "c1", "app", 2000, Some(2000)))
        .expect("placed");
    // Told the same CPUs after a race: refused, but the CPUs are another pod's.
    let late = kpod(
        "ns",
        "late",
        &[(KOORD_RESOURCE_STATUS, r#"{"cpuset":"6-7"}"#)],
    );
    e.create_container(&late, &kctr(&late, "c2", "app", 2000, Some(2000)))
        .expect_err("held");
    // Its own fault (more CPUs than the host has): a refusal that counts.
    let big = kpod("ns", "big", &[]);
    e.create_container(&big, &kctr(&big, "c3", "app", 64_000, Some(64_000)))
        .expect_err("too big");
    assert_eq!(
        *heard.lock().expect("lock"),
        vec![
            "admitted ns/first",
            "refused-for-another ns/late",
            "refused ns/big uid-ns-big"
        ]
    );
}
