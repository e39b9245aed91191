//! The kubelet's semantics on the real allocator: what is an allocation and
//! what is not, shared and MIG GPUs, annotations that never widen, isolated CPUs, exempt
//! namespaces, decisions kept from StopContainer to RemoveContainer and across restarts, init
//! containers' CPUs reused, a reload that would empty the shared pool refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::enforce::container::KubeletDevices;
use crate::enforce::testing::AllDevices;
use crate::placement::{Allocator, PlacementConfig};
use crate::topology::testing::TopologyBuilder;
use crate::topology::{Gpu, Topology};

/// 2 NUMA nodes x 4 CPUs (0-3, 4-7), GPU 0 on node 0 and GPU 1 on node 1; `isolated` CPUs.
pub(super) fn host(isolated: &str) -> Topology {
    let mut t = TopologyBuilder::new()
        .sockets(2)
        .cores(4)
        .threads(1)
        .memory_gib(16)
        .isolated(isolated)
        .build();
    t.gpus = (0..2)
        .map(|i| Gpu {
            index: i,
            pci_bus_id: format!("0000:{:02x}:00.0", 0x1b + i * 0x20),
            numa_node: Some(i),
            uuid: Some(format!("GPU-{i}aaa")),
            minor: Some(i),
            name: None,
            mig_enabled: None,
            mig_devices: Vec::new(),
            memory_node: None,
        })
        .collect();
    t
}

pub(super) const BUS: [&str; 2] = ["0000:1b:00.0", "0000:3b:00.0"];

pub(super) fn real(config: Config, isolated: &str) -> Engine<Allocator> {
    let a = Allocator::new(Arc::new(host(isolated)), config.placement.clone());
    Engine::new(
        a,
        config,
        None,
        Some(Arc::new(Metrics::new())),
        Box::new(AllDevices),
    )
}

pub(super) fn kpod(ns: &str, name: &str, ann: &[(&str, &str)]) -> PodView {
    PodView {
        id: format!("sb-{ns}-{name}"),
        uid: format!("uid-{ns}-{name}"),
        name: name.into(),
        namespace: ns.into(),
        annotations: ann
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        ..Default::default()
    }
}

/// Container `name` (id `id`) of `pod` with `milli` CPU request and `limit` (kubelet shares
/// and quota).
pub(super) fn kctr(
    pod: &PodView,
    id: &str,
    name: &str,
    milli: u64,
    limit: Option<u64>,
) -> ContainerView {
    ContainerView {
        id: id.into(),
        name: name.into(),
        pod_sandbox_id: pod.id.clone(),
        state: ContainerState::Created,
        resources: ResourcesView {
            cpu_shares: Some((milli * 1024 / 1000).max(2)),
            cpu_quota: limit.map(|l| (l * 100) as i64),
            cpu_period: Some(100_000),
            memory_limit: Some(1 << 30),
            ..Default::default()
        },
        // The kubelet's allocatable devices: both GPUs, healthy.
        kubelet_allocatable: Some(vec![KubeletDevices {
            resource: "nvidia.com/gpu".into(),
            ids: (0..BUS.len()).map(|g| format!("GPU-{g}aaa")).collect(),
        }]),
        ..Default::default()
    }
}

fn create(e: &mut Engine<Allocator>, pod: &PodView, c: &ContainerView) -> CreateOutcome {
    e.create_container(pod, c)
        .unwrap_or_else(|err| panic!("{}: {err}", c.id))
        .expect("not exempt")
}

fn cpus(s: &str) -> CpuSet {
    s.parse().expect("set")
}

pub(super) fn events(e: &Engine<Allocator>) -> String {
    e.metrics.as_ref().map(|m| m.encode()).unwrap_or_default()
}

#[test]
fn env_never_grants_a_device() {
    // Before the fix, `all` allocated every GPU and CUDA_VISIBLE_DEVICES=0 GPU 0: the
    // container got their /dev/nvidiaN nodes and cgroup allow rules.
    for env in [
        vec!["NVIDIA_VISIBLE_DEVICES=all"],
        vec!["CUDA_VISIBLE_DEVICES=0"],
        vec!["NVIDIA_VISIBLE_DEVICES=all", "CUDA_VISIBLE_DEVICES=0,1"],
    ] {
        let mut e = real(Config::default(), "");
        let p = kpod("ns", "cuda-base", &[]);
        let mut c = kctr(&p, "c1", "app", 1000, Some(1000));
        c.env = env.iter().map(|s| s.to_string()).collect();
        let out = create(&mut e, &p, &c);
        let adj = &out.adjustment;
        assert!(adj.add_devices.is_empty(), "{env:?}: {:?}", adj.add_devices);
        assert!(
            adj.device_rules.iter().all(|r| !r.allow),
            "{env:?}: {:?}",
            adj.device_rules
        );
        assert!(e.records().containers["c1"].assignment.gpus.is_empty());
        if env[0].starts_with("NVIDIA") {
            assert_eq!(
                adj.env.get("NVIDIA_VISIBLE_DEVICES").map(String::as_str),
                Some("none")
            );
        }
    }
}

#[test]
fn cuda_minus_one_and_unknown_env_gpus_are_admitted_and_counted() {
    let mut e = real(Config::default(), "");
    let p = kpod("ns", "tf", &[]);
    let mut c = kctr(&p, "c1", "app", 500, None);
    c.env = vec!["CUDA_VISIBLE_DEVICES=-1".into()];
    create(&mut e, &p, &c);
    let mut c = kctr(&p, "c2", "app2", 500, None);
    c.env = vec!["NVIDIA_VISIBLE_DEVICES=GPU-elsewhere".into()];
    let out = create(&mut e, &p, &c);
    assert!(out.adjustment.add_devices.is_empty());
    assert!(
        events(&e).contains("event=\"unread-device\"} 1"),
        "{}",
        events(&e)
    );
}

#[test]
fn kubelet_gpus_are_held_and_remapped_env_gpus_only_aligned_to() {
    let mut cfg = Config::default();
    cfg.placement.gpu_mode = GpuMode::Remap;
    let mut e = real(cfg, "");
    let p = kpod("ml", "train", &[]);
    // The kubelet gave GPU 0: held alone, with its node and env.
    let mut c = kctr(&p, "g1", "cuda", 2000, Some(2000));
    c.env = vec!["NVIDIA_VISIBLE_DEVICES=GPU-0aaa".into()];
    c.kubelet_devices = Some(vec![KubeletDevices {
        resource: "nvidia.com/gpu".into(),
        ids: vec!["GPU-0aaa".into()],
    }]);
    let out = create(&mut e, &p, &c);
    assert_eq!(e.records().containers["g1"].assignment.gpus, vec![BUS[0]]);
    assert_eq!(out.adjustment.cpuset_cpus.to_string(), "0-1");
    assert!(out
        .adjustment
        .add_devices
        .iter()
        .any(|d| d.path == "/dev/nvidia0"));
    // A second kubelet allocation of GPU 0 (the plugin's view lags a remap): remapped to 1.
    let p2 = kpod("ml", "train2", &[]);
    let mut c2 = kctr(&p2, "g2", "cuda", 1000, Some(1000));
    c2.env = c.env.clone();
    c2.kubelet_devices = c.kubelet_devices.clone();
    let out = create(&mut e, &p2, &c2);
    assert_eq!(e.records().containers["g2"].assignment.gpus, vec![BUS[1]]);
    assert_eq!(out.adjustment.env["NVIDIA_VISIBLE_DEVICES"], "GPU-1aaa");
    assert!(out
        .adjustment
        .add_devices
        .iter()
        .any(|d| d.path == "/dev/nvidia1"));
    // Named only by env: aligned to GPU 0's node, not held, no node, env left alone.
    let p3 = kpod("ml", "notebook", &[]);
    let mut c3 = kctr(&p3, "g3", "nb", 1000, Some(1000));
    c3.env = vec!["NVIDIA_VISIBLE_DEVICES=GPU-0aaa".into()];
    let out = create(&mut e, &p3, &c3);
    let a = &e.records().containers["g3"].assignment;
    assert!(a.gpus.is_empty());
    assert_eq!(a.shared_gpus, vec![BUS[0]]);
    let node0 = cpus("0-3");
    assert!(
        out.adjustment.cpuset_cpus.clone().is_subset(&node0),
        "{}",
        out.adjustment.cpuset_cpus
    );
    assert!(out.adjustment.add_devices.is_empty());
    assert!(!out.adjustment.env.contains_key("NVIDIA_VISIBLE_DEVICES"));
}

/// MIG devices NVML lists on GPU 1 (node 1).
const MIG: [&str; 2] = [
    "MIG-5c1a7d4e-0000-4000-8000-000000000001",
    "MIG-5c1a7d4e-0000-4000-8000-000000000002",
];

#[test]
fn mig_uuids_align_to_their_parent_keep_their_env_and_never_conflict() {
    let mut t = host("");
    t.gpus[1].mig_enabled = Some(true);
    t.gpus[1].mig_devices = MIG
        .iter()
        .enumerate()
        .map(|(i, u)| crate::topology::MigDevice {
            index: i as u32,
            uuid: u.to_string(),
            profile: Some("3g.40gb".into()),
        })
        .collect();
    let mut cfg = Config::default();
    cfg.placement.gpu_mode = GpuMode::Remap;
    let a = Allocator::new(Arc::new(t), cfg.placement.clone());
    let metrics = Some(Arc::new(Metrics::new()));
    let mut e = Engine::new(a, cfg, None, metrics, Box::new(AllDevices));
    // Two Guaranteed pods, each given one slice of GPU 1 the device plugin's way (env and
    // PodResources): both on node 1, both keep exactly their MIG device, even in remap mode.
    for (i, mig) in MIG.iter().enumerate() {
        let p = kpod("ml", &format!("m{i}"), &[]);
        let mut c = kctr(&p, &format!("m{i}"), "cuda", 1000, Some(1000));
        c.env = vec![format!("NVIDIA_VISIBLE_DEVICES={mig}")];
        c.kubelet_devices = Some(vec![KubeletDevices {
            resource: "nvidia.com/mig-3g.40gb".into(),
            ids: vec![mig.to_string()],
        }]);
        let out = create(&mut e, &p, &c);
        let a = &e.records().containers[&format!("m{i}")].assignment;
        assert!(a.gpus.is_empty(), "{i}: a MIG parent is never held: {a:?}");
        assert_eq!(a.shared_gpus, vec![BUS[1]], "{i}");
        assert!(
            out.adjustment.cpuset_cpus.clone().is_subset(&cpus("4-7")),
            "{i}: {}",
            out.adjustment.cpuset_cpus
        );
        assert_eq!(out.adjustment.cpuset_mems.to_string(), "1", "{i}");
        assert!(out.adjustment.add_devices.is_empty(), "{i}");
        assert!(
            !out.adjustment.env.contains_key("NVIDIA_VISIBLE_DEVICES"),
            "{i}: never rewritten to the parent: {:?}",
            out.adjustment.env
        );
    }
    // A MIG device NVML does not list: admitted on the shared pool, counted, and it keeps
    // the MIG device the kubelet gave it.
    let stale = "MIG-00000000-dead-4000-8000-000000000000";
    let p = kpod("ml", "stale", &[]);
    let mut c = kctr(&p, "s", "cuda", 500, None);
    c.env = vec![format!("NVIDIA_VISIBLE_DEVICES={stale}")];
    c.kubelet_devices = Some(vec![KubeletDevices {
        resource: "nvidia.com/mig-1g.10gb".into(),
        ids: vec![stale.into()],
    }]);
    let out = create(&mut e, &p, &c);
    let a = &e.records().containers["s"].assignment;
    assert!(a.gpus.is_empty() && a.shared_gpus.is_empty(), "{a:?}");
    assert!(out.adjustment.add_devices.is_empty());
    assert!(
        !out.adjustment.env.contains_key("NVIDIA_VISIBLE_DEVICES"),
        "{:?}",
        out.adjustment.env
    );
    assert!(
        events(&e).contains("event=\"unread-device\"} 1"),
        "{}",
        events(&e)
    );
    // The same id in the env of a container the kubelet gave nothing is no allocation.
    let p = kpod("ml", "forged", &[]);
    let mut c = kctr(&p, "f", "cuda", 500, None);
    c.env = vec![format!("NVIDIA_VISIBLE_DEVICES={stale}")];
    c.kubelet_devices = Some(Vec::new());
    let out = create(&mut e, &p, &c);
    assert_eq!(
        out.adjustment
            .env
            .get("NVIDIA_VISIBLE_DEVICES")
            .map(String::as_str),
        Some("none")
    );
}

#[test]
fn replicas_and_mig_devices_share_their_gpu_aligned_for_each_never_a_conflict() {
    for mode in [GpuMode::Remap, GpuMode::Keep] {
        let mut cfg = Config::default();
        cfg.placement.gpu_mode = mode;
        let mut e = real(cfg, "");
        for (i, ids) in [
            ("GPU-1aaa::0", "nvidia.com/gpu"),
            ("GPU-1aaa::1", "nvidia.com/gpu"),
            ("1:0", "nvidia.com/mig-1g.10gb"),
        ]
        .iter()
        .map(|(id, r)| (*id, *r))
        .enumerate()
        {
            let p = kpod(
                "ml",
                &format!("p{i}"),
                &[("policy.nri-align.io/pod", "single-numa-node")],
            );
            let mut c = kctr(&p, &format!("c{i}"), "cuda", 1000, Some(1000));
            c.kubelet_devices = Some(vec![KubeletDevices {
                resource: ids.1.into(),
                ids: vec![ids.0.into()],
            }]);
            let out = create(&mut e, &p, &c);
            let a = &e.records().containers[&format!("c{i}")].assignment;
            assert!(a.gpus.is_empty(), "{mode:?} {i}: {a:?}");
            assert_eq!(a.shared_gpus, vec![BUS[1]]);
            assert!(
                out.adjustment.cpuset_cpus.clone().is_subset(&cpus("4-7")),
                "{mode:?} {i}"
            );
            assert!(out.adjustment.add_devices.is_empty());
        }
        // GPU 1 in shared use is never handed out whole: a whole-GPU allocation of it in
        // remap mode moves to GPU 0; in keep mode it is shared too.
        let p = kpod("ml", "whole", &[]);
        let mut c = kctr(&p, "w", "cuda", 1000, Some(1000));
        c.kubelet_devices = Some(vec![KubeletDevices {
            resource: "nvidia.com/gpu".into(),
            ids: vec!["GPU-1aaa".into()],
        }]);
        create(&mut e, &p, &c);
        let a = &e.records().containers["w"].assignment;
        match mode {
            GpuMode::Remap => assert_eq!(a.gpus, vec![BUS[0]]),
            GpuMode::Keep => assert_eq!(
                (a.gpus.len(), a.shared_gpus.clone()),
                (0, vec![BUS[1].to_string()])
            ),
        }
    }
}

#[test]
fn an_annotation_never_widens_what_the_scheduler_accounted() {
    let ann = [("cpus.nri-align.io/pod", "exclusive")];
    let mut e = real(Config::default(), "");
    let p = kpod("team", "burst", &ann);
    // Burstable: 100m request, 6 CPU limit. BestEffort: nothing.
    for c in [
        kctr(&p, "b", "app", 100, Some(6000)),
        kctr(&p, "be", "app2", 0, None),
    ] {
        let err = e.create_container(&p, &c).expect_err("refused");
        let msg = err.to_string();
        assert!(
            msg.contains("not Guaranteed-shaped")
                && msg.contains("cpus.nri-align.io/pod=exclusive"),
            "{msg}"
        );
        assert!(msg.contains("exclusive_annotation_namespaces"), "{msg}");
    }
    assert!(e.records().containers.is_empty());
    // Guaranteed-shaped: allowed, as before.
    create(&mut e, &p, &kctr(&p, "g", "app3", 2000, Some(2000)));
    assert!(e.records().containers["g"].assignment.exclusive);
    // An allow-listed namespace may.
    let mut cfg = Config::default();
    cfg.placement.exclusive_annotation_namespaces = vec!["team".into()];
    let mut e = real(cfg, "");
    create(&mut e, &p, &kctr(&p, "b", "app", 100, Some(1500)));
    assert_eq!(e.records().containers["b"].assignment.cpus.len(), 2);
}

#[test]
fn isolated_cpus_go_only_to_containers_that_ask() {
    let mut cfg = Config::default();
    cfg.placement.isolated_namespaces = vec!["ns".into()];
    let mut e = real(cfg, "6-7");
    let p = kpod("ns", "p", &[]);
    let out = create(&mut e, &p, &kctr(&p, "s", "shared", 100, None));
    assert_eq!(
        out.adjustment.cpuset_cpus.to_string(),
        "0-5",
        "the pool leaves isolated CPUs out"
    );
    // Four exclusive CPUs: never the isolated ones, even on node 1.
    let p4 = kpod("ns", "p4", &[]);
    let out = create(&mut e, &p4, &kctr(&p4, "x", "four", 4000, Some(4000)));
    assert!(out
        .adjustment
        .cpuset_cpus
        .clone()
        .intersection(&cpus("6-7"))
        .is_empty());
    let pi = kpod(
        "ns",
        "rt",
        &[("cpus.nri-align.io/container.dpdk", "isolated")],
    );
    let out = create(&mut e, &pi, &kctr(&pi, "i", "dpdk", 2000, Some(2000)));
    assert_eq!(out.adjustment.cpuset_cpus.to_string(), "6-7");
    // None left: an isolated request fails; the shared pool is untouched by it.
    let pj = kpod("ns", "rt2", &[("cpus.nri-align.io/pod", "isolated")]);
    e.create_container(&pj, &kctr(&pj, "j", "dpdk", 1000, Some(1000)))
        .expect_err("no isolated CPU left");
}

#[test]
fn isolated_cpus_go_only_to_allow_listed_namespaces() {
    let ann = [("cpus.nri-align.io/container.dpdk", "isolated")];
    // Guaranteed-shaped and even allowed to widen by annotation: not enough for isolated CPUs.
    let mut cfg = Config::default();
    cfg.placement.exclusive_annotation_namespaces = vec!["team".into()];
    let mut e = real(cfg.clone(), "6-7");
    let p = kpod("team", "rt", &ann);
    let err = e
        .create_container(&p, &kctr(&p, "i", "dpdk", 2000, Some(2000)))
        .expect_err("not allow-listed");
    let msg = err.to_string();
    assert!(
        msg.contains("isolated_namespaces") && msg.contains("\"team\"") && msg.contains("[]"),
        "{msg}"
    );
    assert!(e.records().containers.is_empty());
    // The list in force is named, so the administrator sees what is allowed.
    cfg.placement.isolated_namespaces = vec!["rt".into()];
    let mut e = real(cfg, "6-7");
    let msg = e
        .create_container(&p, &kctr(&p, "i", "dpdk", 2000, Some(2000)))
        .expect_err("not allow-listed")
        .to_string();
    assert!(msg.contains("[\"rt\"]"), "{msg}");
    // An allow-listed namespace gets them.
    let q = kpod("rt", "rt", &ann);
    let out = create(&mut e, &q, &kctr(&q, "j", "dpdk", 2000, Some(2000)));
    assert_eq!(out.adjustment.cpuset_cpus.to_string(), "6-7");
    // Exclusive CPUs stay open to any Guaranteed pod.
    let x = kpod("team", "x", &[("cpus.nri-align.io/pod", "exclusive")]);
    create(&mut e, &x, &kctr(&x, "x", "app", 1000, Some(1000)));
    assert!(e.records().containers["x"].assignment.exclusive);
}

#[test]
fn exempt_namespaces_run_on_the_pool_or_the_reserved_cpus_never_on_exclusive_ones() {
    let mut cfg = Config {
        exempt_namespaces: vec!["kube-system".into()],
        ..Config::default()
    };
    let mut e = real(cfg.clone(), "");
    let p = kpod("ns", "p", &[]);
    create(&mut e, &p, &kctr(&p, "x", "app", 2000, Some(2000)));
    let ks = kpod("kube-system", "proxy", &[]);
    let out = create(&mut e, &ks, &kctr(&ks, "k", "proxy", 2000, Some(2000)));
    assert_eq!(out.adjustment.cpuset_cpus.to_string(), "2-7");
    assert!(out.adjustment.add_devices.is_empty());
    // It follows the pool when it shrinks.
    let out = create(&mut e, &p, &kctr(&p, "y", "app2", 2000, Some(2000)));
    let moved: Vec<_> = out
        .updates
        .iter()
        .filter(|u| u.container_id == "k")
        .collect();
    assert_eq!(moved.len(), 1);
    assert!(moved[0].cpus.intersection(&cpus("0-1")).is_empty());
    // With reserved CPUs, there.
    cfg.placement.reserved_cpus = cpus("0");
    let mut e = real(cfg, "");
    let out = create(&mut e, &ks, &kctr(&ks, "k", "proxy", 100, None));
    assert_eq!(out.adjustment.cpuset_cpus.to_string(), "0");
}

#[test]
fn stop_keeps_remove_releases_and_a_restart_gets_the_same_cpus_and_gpu_back() {
    let mut e = real(Config::default(), "");
    let p = kpod("ml", "train", &[]);
    let mut c = kctr(&p, "c-0", "cuda", 2000, Some(2000));
    c.env = vec!["NVIDIA_VISIBLE_DEVICES=GPU-0aaa".into()];
    c.kubelet_devices = Some(vec![KubeletDevices {
        resource: "nvidia.com/gpu".into(),
        ids: vec!["GPU-0aaa".into()],
    }]);
    let first = create(&mut e, &p, &c);
    e.container_stopped("c-0");
    assert!(e.records().containers["c-0"].stopped);
    // Another pod comes while it is down: it must not get those CPUs.
    let q = kpod("ml", "other", &[]);
    let out = create(&mut e, &q, &kctr(&q, "o", "x", 2000, Some(2000)));
    assert!(out
        .adjustment
        .cpuset_cpus
        .clone()
        .intersection(&first.adjustment.cpuset_cpus.clone())
        .is_empty());
    // The restart: same pod UID and name, new id, attempt 1.
    let restarted = ContainerView {
        id: "c-1".into(),
        ..c.clone()
    };
    let again = create(&mut e, &p, &restarted);
    assert_eq!(again.adjustment.cpuset_cpus, first.adjustment.cpuset_cpus);
    assert_eq!(e.records().containers["c-1"].assignment.gpus, vec![BUS[0]]);
    assert!(!e.records().containers.contains_key("c-0"));
    assert!(events(&e).contains("event=\"restart-kept\"} 1"));
    // RemoveContainer releases.
    let before = e.placer().shared_pool();
    e.release_container("c-1");
    assert!(e.placer().shared_pool().len() > before.len());
}

#[test]
fn finished_init_containers_cpus_are_reused_by_the_pods_app_containers() {
    let mut e = real(Config::default(), "");
    let p = kpod("ns", "job", &[]);
    // The init container takes 6 of the 8 CPUs, finishes and stays (not removed).
    create(&mut e, &p, &kctr(&p, "init", "setup", 6000, Some(6000)));
    e.container_stopped("init");
    // The app container needs 6 too: only the init container's CPUs make that possible.
    let out = create(&mut e, &p, &kctr(&p, "app", "main", 6000, Some(6000)));
    assert_eq!(out.adjustment.cpuset_cpus.clone().len(), 6);
    assert!(!e.records().containers.contains_key("init"));
    // Another pod's stopped container is not reusable.
    let q = kpod("ns", "q", &[]);
    let mut e2 = real(Config::default(), "");
    create(&mut e2, &p, &kctr(&p, "init", "setup", 6000, Some(6000)));
    e2.container_stopped("init");
    e2.create_container(&q, &kctr(&q, "app", "main", 6000, Some(6000)))
        .expect_err("the other pod's CPUs are still held");
}

#[test]
fn a_reload_that_would_leave_no_shared_cpu_is_refused_and_the_old_config_kept() {
    let mut e = real(Config::default(), "");
    let p = kpod("ns", "big", &[]);
    create(&mut e, &p, &kctr(&p, "x", "app", 6000, Some(6000)));
    let held = e.records().containers["x"].assignment.cpus.clone();
    let pool = e.placer().shared_pool();
    let mut cfg = Config::default();
    cfg.placement.reserved_cpus = pool.clone();
    let err = e.reload(cfg).expect_err("no shared CPU left");
    let msg = err.to_string();
    assert!(
        msg.contains("leaves no shared CPU") && msg.contains("kept"),
        "{msg}"
    );
    assert!(e.config().placement.reserved_cpus.is_empty());
    // Reserving a CPU a container holds is refused too.
    let mut cfg = Config::default();
    cfg.placement.reserved_cpus = held.iter().take(1).collect();
    let msg = e.reload(cfg).expect_err("held").to_string();
    assert!(msg.contains("hold exclusively"), "{msg}");
    // A reload that leaves one shared CPU is fine.
    let mut cfg = Config::default();
    cfg.placement.reserved_cpus = pool.iter().take(1).collect();
    if pool.len() > 1 {
        e.reload(cfg).expect("one shared CPU left");
    }
}

#[test]
fn a_cpuset_set_by_the_kubelet_is_noticed_and_counted() {
    let mut e = real(Config::default(), "");
    let p = kpod("ns", "p", &[]);
    for id in ["a", "b"] {
        let mut c = kctr(&p, id, id, 1000, Some(1000));
        c.resources.cpuset_cpus = "2".into();
        create(&mut e, &p, &c);
    }
    assert!(
        events(&e).contains("event=\"kubelet-cpuset\"} 2"),
        "{}",
        events(&e)
    );
    assert_eq!(e.kubelet_cpusets.pods(), 1, "logged once per pod");
}

#[test]
fn placement_config_default_allows_no_namespace() {
    assert!(PlacementConfig::default()
        .exclusive_annotation_namespaces
        .is_empty());
}
