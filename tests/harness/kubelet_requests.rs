//! The kubelet-shaped CRI requests of `crates/test-support/src/e2e/kubelet.rs` against the kubelet's own
//! formulas and test tables (kubernetes 1.33/1.34), and the device plugins' answers against what
//! their sources write. No root, no runtime: pure JSON.
//!
//! Expected values come from the sources, not from the builder: `MilliCPUToShares` /
//! `MilliCPUToQuota` in `pkg/kubelet/cm/helpers_linux.go`, the `TestCalculateLinuxResources`
//! table in `kuberuntime_container_linux_test.go`, `GetContainerOOMScoreAdjust` in
//! `pkg/kubelet/qos/policy.go`, the `ToSystemd` doc example in `cgroup_manager_linux.go`,
//! `TestGetHugepageLimitsFromResources`.

use serde_json::{json, Value};
use test_support::e2e;
use test_support::e2e::kubelet::quantity::q;
use test_support::e2e::kubelet::resources::{
    self, milli_cpu_to_quota, milli_cpu_to_shares, Machine,
};
use test_support::e2e::kubelet::{
    expand_slice, rdma_shared_allocate, CgroupDriver, ClaimDevice, DraClaim, Hca, KubeContainer,
    KubePod, ListStrategy, Node, NvidiaDevice, NvidiaPlugin, Qos, Resources,
};

fn machine(v2: bool) -> Machine {
    Machine {
        cgroup_v2: v2,
        single_process_oom_kill: None,
        swap_controller: false,
        hugepage_sizes: vec!["2MB".into(), "1GB".into()],
        memory_capacity: 64 << 30,
    }
}

fn node(driver: CgroupDriver, v2: bool) -> Node {
    Node::new(driver, machine(v2))
}

fn guaranteed(cpu: &str, mem: &str) -> Resources {
    Resources::none().both("cpu", cpu).both("memory", mem)
}

#[test]
fn cpu_shares_and_quota_follow_the_kubelet_formulas() {
    // shares = milli * 1024 / 1000, at least 2, at most 262144; 0 -> 2.
    assert_eq!(milli_cpu_to_shares(q("100m").milli()), 102);
    assert_eq!(milli_cpu_to_shares(q("1").milli()), 1024);
    assert_eq!(milli_cpu_to_shares(q("2.5").milli()), 2560);
    assert_eq!(milli_cpu_to_shares(q("1m").milli()), 2);
    assert_eq!(milli_cpu_to_shares(0), 2);
    assert_eq!(milli_cpu_to_shares(q("300").milli()), 262_144);
    // quota = milli * 100000 / 1000, at least 1000 µs; 0 -> 0 (no limit).
    assert_eq!(milli_cpu_to_quota(q("100m").milli(), 100_000), 10_000);
    assert_eq!(milli_cpu_to_quota(q("2.5").milli(), 100_000), 250_000);
    assert_eq!(milli_cpu_to_quota(q("5m").milli(), 100_000), 1_000);
    assert_eq!(milli_cpu_to_quota(0, 100_000), 0);
    // Quantity rounding: MilliValue rounds up.
    assert_eq!(q("0.0001").milli(), 1);
    assert_eq!(q("128Mi").value(), 134_217_728);
    assert_eq!(q("1G").value(), 1_000_000_000);
    assert_eq!(q("1e3").value(), 1000);
}

#[test]
fn calculate_linux_resources_matches_the_kubelets_test_table() {
    // (cpu request, cpu limit, memory limit, cgroup v2, singleProcessOOMKill) -> expected.
    type Case<'a> = (Option<&'a str>, &'a str, &'a str, bool, Option<bool>, Value);
    let cases: Vec<Case> = vec![
        (
            Some("1"),
            "2",
            "128Mi",
            false,
            None,
            json!({"cpu_period": 100000, "cpu_quota": 200000, "cpu_shares": 1024, "memory_limit_in_bytes": 134217728}),
        ),
        (
            Some("2"),
            "8",
            "0",
            false,
            None,
            json!({"cpu_period": 100000, "cpu_quota": 800000, "cpu_shares": 2048}),
        ),
        (
            None,
            "2",
            "0",
            false,
            None,
            json!({"cpu_period": 100000, "cpu_quota": 200000, "cpu_shares": 2048}),
        ),
        (
            Some("0"),
            "2",
            "0",
            false,
            None,
            json!({"cpu_period": 100000, "cpu_quota": 200000, "cpu_shares": 2}),
        ),
        (
            Some("1"),
            "2",
            "128Mi",
            true,
            None,
            json!({"cpu_period": 100000, "cpu_quota": 200000, "cpu_shares": 1024, "memory_limit_in_bytes": 134217728, "unified": {"memory.oom.group": "1"}}),
        ),
        (
            Some("1"),
            "2",
            "128Mi",
            true,
            Some(true),
            json!({"cpu_period": 100000, "cpu_quota": 200000, "cpu_shares": 1024, "memory_limit_in_bytes": 134217728}),
        ),
        (
            None,
            "2",
            "0",
            true,
            None,
            json!({"cpu_period": 100000, "cpu_quota": 200000, "cpu_shares": 2048, "unified": {"memory.oom.group": "1"}}),
        ),
    ];
    for (req, lim, mem, v2, single, want) in cases {
        let mut m = machine(v2);
        m.single_process_oom_kill = single;
        let got = resources::calculate(&m, req.map(q), Some(q(lim)), Some(q(mem)));
        assert_eq!(Value::Object(got), want, "{req:?} {lim} {mem} v2={v2}");
    }
}

#[test]
fn qos_classes_and_oom_score_adj() {
    let n = node(CgroupDriver::Cgroupfs, false);
    let g = KubePod::new("ml", "g")
        .container(KubeContainer::new("c").resources(guaranteed("2", "1Gi")));
    // Limits only: the API server defaults requests to limits, so still Guaranteed.
    let g2 = KubePod::new("ml", "g2").container(
        KubeContainer::new("c")
            .resources(Resources::none().limit("cpu", "1").limit("memory", "1Gi")),
    );
    let b = KubePod::new("ml", "b").container(
        KubeContainer::new("c").resources(
            Resources::none()
                .request("cpu", "100m")
                .request("memory", "6.4Gi"),
        ),
    );
    let be = KubePod::new("ml", "be").container(KubeContainer::new("c"));
    // Guaranteed needs every container Guaranteed-shaped.
    let mixed = g
        .clone()
        .container(KubeContainer::new("side").resources(Resources::none().request("cpu", "1")));
    // Extended resources (GPUs) do not count for QoS.
    let gpu_only = KubePod::new("ml", "gpu").container(
        KubeContainer::new("c").resources(Resources::none().both("nvidia.com/gpu", "1")),
    );
    assert_eq!(g.qos(), Qos::Guaranteed);
    assert_eq!(g2.qos(), Qos::Guaranteed);
    assert_eq!(b.qos(), Qos::Burstable);
    assert_eq!(be.qos(), Qos::BestEffort);
    assert_eq!(mixed.qos(), Qos::Burstable);
    assert_eq!(gpu_only.qos(), Qos::BestEffort);

    let adj = |p: &KubePod, c: &str| {
        p.container_resources(&n, p.find(c).expect("c"))["oom_score_adj"].clone()
    };
    assert_eq!(adj(&g, "c"), json!(-997));
    assert_eq!(adj(&be, "c"), json!(1000));
    // 1000 - 1000 * request / capacity: 6.4Gi of 64Gi -> 900.
    assert_eq!(adj(&b, "c"), json!(900));
    // No memory request: 1000 would tie BestEffort, so 999; a huge request bottoms out at 3.
    assert_eq!(adj(&mixed, "side"), json!(999));
    let hog = KubePod::new("ml", "hog")
        .container(KubeContainer::new("c").resources(Resources::none().request("memory", "100Gi")));
    assert_eq!(adj(&hog, "c"), json!(3));
}

#[test]
fn cgroup_parents_for_both_drivers() {
    let pod = KubePod::new("ml", "p");
    let uid = "1234-abcd-5678-efgh";
    let fs = node(CgroupDriver::Cgroupfs, false);
    let sd = node(CgroupDriver::Systemd, true);
    assert_eq!(
        fs.cgroup_parent(Qos::Guaranteed, uid),
        "/kubepods/pod1234-abcd-5678-efgh"
    );
    assert_eq!(
        fs.cgroup_parent(Qos::Burstable, uid),
        "/kubepods/burstable/pod1234-abcd-5678-efgh"
    );
    assert_eq!(
        fs.cgroup_parent(Qos::BestEffort, uid),
        "/kubepods/besteffort/pod1234-abcd-5678-efgh"
    );
    // The example of ToSystemd's doc comment.
    assert_eq!(
        sd.cgroup_parent(Qos::Burstable, uid),
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice"
    );
    assert_eq!(
        sd.cgroup_parent(Qos::Guaranteed, uid),
        "/kubepods.slice/kubepods-pod1234_abcd_5678_efgh.slice"
    );
    // A cgroup root (the harness keeps pods under its instance's parent).
    let mut rooted = fs.clone();
    rooted.cgroup_root = "/nri-align-1a2b3c4d-sid-x".into();
    assert_eq!(
        rooted.cgroup_parent(Qos::Burstable, &pod.uid),
        format!(
            "/nri-align-1a2b3c4d-sid-x/kubepods/burstable/pod{}",
            pod.uid
        )
    );
    let mut rooted_sd = sd.clone();
    rooted_sd.cgroup_root = "/custom".into();
    assert_eq!(
        rooted_sd.cgroup_parent(Qos::Guaranteed, "u-1"),
        "/custom.slice/custom-kubepods.slice/custom-kubepods-podu_1.slice"
    );
    assert_eq!(
        expand_slice("a-b-c.slice"),
        "/a.slice/a-b.slice/a-b-c.slice"
    );
}

#[test]
fn hugepage_limits_cover_every_host_size() {
    let n = node(CgroupDriver::Cgroupfs, false);
    let pod = KubePod::new("ml", "h").container(
        KubeContainer::new("c").resources(
            guaranteed("1", "1Gi")
                .both("hugepages-2Mi", "2Mi")
                .both("hugepages-1GB", "2Gi"), // not a valid hugepage resource name: skipped
        ),
    );
    let r = pod.container_resources(&n, pod.find("c").expect("c"));
    assert_eq!(
        r["hugepage_limits"],
        json!([{"page_size": "2MB", "limit": 2097152}, {"page_size": "1GB", "limit": 0}])
    );
    let pod = KubePod::new("ml", "h1").container(
        KubeContainer::new("c").resources(guaranteed("1", "1Gi").both("hugepages-1Gi", "2Gi")),
    );
    let r = pod.container_resources(&n, pod.find("c").expect("c"));
    assert_eq!(
        r["hugepage_limits"][1],
        json!({"page_size": "1GB", "limit": 2147483648u64})
    );
}

#[test]
fn no_swap_on_each_cgroup_version() {
    let mut v1 = node(CgroupDriver::Cgroupfs, false);
    v1.machine.swap_controller = true;
    let mut v2 = node(CgroupDriver::Systemd, true);
    v2.machine.swap_controller = true;
    let pod = KubePod::new("ml", "s")
        .container(KubeContainer::new("c").resources(guaranteed("1", "256Mi")));
    let c = pod.find("c").expect("c");
    assert_eq!(
        pod.container_resources(&v1, c)["memory_swap_limit_in_bytes"],
        json!(268435456)
    );
    let r2 = pod.container_resources(&v2, c);
    assert_eq!(
        r2["unified"],
        json!({"memory.oom.group": "1", "memory.swap.max": "0"})
    );
    assert!(r2.get("memory_swap_limit_in_bytes").is_none());
}

#[test]
fn sandbox_carries_pod_totals_labels_and_annotations() {
    let n = node(CgroupDriver::Cgroupfs, false);
    let pod = KubePod::new("ml", "train")
        .label("app", "train")
        .annotation("cpus.nri-align.io/pod", "exclusive")
        .init_container(
            KubeContainer::new("setup").resources(guaranteed("3", "1Gi")),
            false,
        )
        .init_container(
            KubeContainer::new("proxy").resources(guaranteed("500m", "128Mi")),
            true,
        )
        .container(KubeContainer::new("a").resources(guaranteed("1", "1Gi")))
        .container(KubeContainer::new("b").resources(guaranteed("1", "1Gi")));
    assert_eq!(pod.qos(), Qos::Guaranteed);
    let s = pod.sandbox_config(&n);
    // Requests: max(apps + sidecar = 2.5, init alone = 3) = 3 CPUs -> 3072 shares, quota 300000;
    // memory max(2Gi + 128Mi, 1Gi) = 2176Mi.
    assert_eq!(s["linux"]["resources"]["cpu_shares"], json!(3072));
    assert_eq!(s["linux"]["resources"]["cpu_quota"], json!(300000));
    assert_eq!(
        s["linux"]["resources"]["memory_limit_in_bytes"],
        json!(2176i64 << 20)
    );
    assert!(
        s["linux"]["resources"].get("oom_score_adj").is_none(),
        "the sandbox gets no oom_score_adj"
    );
    assert_eq!(s["linux"]["overhead"], json!({}));
    assert_eq!(
        s["linux"]["cgroup_parent"],
        json!(format!("/kubepods/pod{}", pod.uid))
    );
    assert_eq!(s["labels"]["app"], "train");
    assert_eq!(s["labels"]["io.kubernetes.pod.uid"], json!(pod.uid));
    assert_eq!(s["annotations"]["kubernetes.io/config.source"], "api");
    assert_eq!(s["annotations"]["cpus.nri-align.io/pod"], "exclusive");
    assert_eq!(
        s["log_directory"],
        json!(format!("/var/log/pods/ml_train_{}", pod.uid))
    );

    // Containers: only the kubelet's four labels; restart count in metadata, log path and
    // annotation.
    let c = pod.container_config(&n, "a", 2, "img", None).expect("a");
    assert_eq!(c["metadata"], json!({"name": "a", "attempt": 2}));
    assert_eq!(c["log_path"], "a/2.log");
    assert_eq!(c["labels"].as_object().map(|l| l.len()), Some(4));
    assert_eq!(c["labels"]["io.kubernetes.container.name"], "a");
    assert_eq!(
        c["annotations"]["io.kubernetes.container.restartCount"],
        "2"
    );
    assert_eq!(
        c["annotations"]["io.kubernetes.container.terminationMessagePath"],
        "/dev/termination-log"
    );
    assert_eq!(
        c["annotations"]["io.kubernetes.pod.terminationGracePeriod"],
        "30"
    );
    assert!(c["annotations"]["io.kubernetes.container.hash"]
        .as_str()
        .is_some_and(|h| u64::from_str_radix(h, 16).is_ok()));
    assert!(
        c["annotations"].get("cpus.nri-align.io/pod").is_none(),
        "pod annotations stay on the sandbox"
    );

    // Pod-level resources: the pod's limit stands in for a container without one.
    let mut lvl = KubePod::new("ml", "lvl").container(KubeContainer::new("c"));
    lvl.pod_resources = Some(guaranteed("4", "2Gi"));
    assert_eq!(lvl.qos(), Qos::Guaranteed);
    let r = lvl.container_resources(&n, lvl.find("c").expect("c"));
    assert_eq!(
        (r["cpu_quota"].clone(), r["memory_limit_in_bytes"].clone()),
        (json!(400000), json!(2i64 << 30))
    );
    assert_eq!(
        lvl.sandbox_config(&n)["linux"]["resources"]["cpu_shares"],
        json!(4096)
    );
}

fn gpu(i: u32, numa: i64) -> NvidiaDevice {
    NvidiaDevice::Gpu {
        uuid: format!("GPU-{i}aaa"),
        index: i,
        minor: i,
        numa: Some(numa),
    }
}

fn pod_with(alloc: e2e::kubelet::Allocation) -> KubePod {
    KubePod::new("ml", "gpu").container(
        KubeContainer::new("cuda")
            .resources(
                guaranteed("2", "1Gi").both(&alloc.resource.clone(), &alloc.ids.len().to_string()),
            )
            .allocation(alloc),
    )
}

fn cfg(alloc: e2e::kubelet::Allocation) -> Value {
    pod_with(alloc)
        .container_config(&node(CgroupDriver::Cgroupfs, false), "cuda", 0, "img", None)
        .expect("config")
}

#[test]
fn nvidia_strategies_put_devices_where_the_plugin_does() {
    let (g0, g1) = (gpu(0, 0), gpu(1, 1));
    let picks = [(&g0, None), (&g1, None)];

    let env = cfg(NvidiaPlugin::new().allocate(&picks));
    assert_eq!(
        env["envs"],
        json!([{"key": "NVIDIA_VISIBLE_DEVICES", "value": "GPU-0aaa,GPU-1aaa"}])
    );
    let mut by_index = NvidiaPlugin::new();
    by_index.index_ids = true;
    assert_eq!(cfg(by_index.allocate(&picks))["envs"][0]["value"], "0,1");

    let vm = cfg(NvidiaPlugin::new()
        .strategies(&[ListStrategy::VolumeMounts])
        .allocate(&picks));
    assert_eq!(vm["envs"][0]["value"], "/var/run/nvidia-container-devices");
    assert_eq!(
        vm["mounts"],
        json!([
            {"container_path": "/var/run/nvidia-container-devices/GPU-0aaa", "host_path": "/dev/null", "readonly": false},
            {"container_path": "/var/run/nvidia-container-devices/GPU-1aaa", "host_path": "/dev/null", "readonly": false}
        ])
    );

    let ann = cfg(NvidiaPlugin::new()
        .strategies(&[ListStrategy::CdiAnnotations])
        .allocate(&picks));
    assert_eq!(ann["envs"], json!([]), "CDI only: no env");
    let anns: Vec<(&str, &str)> = ann["annotations"]
        .as_object()
        .expect("annotations")
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
        .collect();
    let cdi = k8s_devices::cdi::parse_annotations(anns).expect("valid CDI annotations");
    assert_eq!(cdi.len(), 1);
    assert_eq!(
        cdi[0].key,
        "cdi.k8s.io/nvidia-device-plugin_3b1d6b9e-1c1e-4a53-9a57-6f3f0c2b8d11"
    );
    assert_eq!(
        cdi[0]
            .devices
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "k8s.device-plugin.nvidia.com/gpu=GPU-0aaa",
            "k8s.device-plugin.nvidia.com/gpu=GPU-1aaa"
        ]
    );

    let cri = cfg(NvidiaPlugin::new()
        .strategies(&[ListStrategy::CdiCri])
        .allocate(&picks));
    assert_eq!(
        cri["CDI_devices"],
        json!([{"name": "k8s.device-plugin.nvidia.com/gpu=GPU-0aaa"}, {"name": "k8s.device-plugin.nvidia.com/gpu=GPU-1aaa"}])
    );

    let mut specs = NvidiaPlugin::new();
    specs.pass_device_specs = true;
    specs.control_nodes = vec!["/dev/nvidiactl".into(), "/dev/nvidia-uvm".into()];
    let dev = cfg(specs.allocate(&picks));
    let paths: Vec<&str> = dev["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .filter_map(|d| d["container_path"].as_str())
        .collect();
    assert_eq!(
        paths,
        [
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia0",
            "/dev/nvidia1"
        ]
    );
    assert_eq!(dev["devices"][2]["permissions"], "rw");
    for p in &paths {
        assert!(k8s_devices::nvidia::parse_device_node(p).is_some(), "{p}");
    }
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "four device-plugin answers in turn (MIG, time-slicing, MPS, RDMA), each a few checks on the CDI config it hands the runtime"
)]
fn mig_time_slicing_mps_and_rdma() {
    let mig = NvidiaDevice::Mig {
        uuid: "MIG-1f1f6b8e-8a46-5b2c-9d0b-3c1d7b0e9e11".into(),
        index: (0, 1),
        parent_minor: 0,
        caps: (21, 22),
        numa: Some(0),
    };
    let mut p = NvidiaPlugin::new();
    p.resource = "nvidia.com/mig-1g.10gb".into();
    p.pass_device_specs = true;
    p.control_nodes.clear();
    let a = p.allocate(&[(&mig, None)]);
    let c = cfg(a.clone());
    assert_eq!(
        c["envs"][0]["value"],
        "MIG-1f1f6b8e-8a46-5b2c-9d0b-3c1d7b0e9e11"
    );
    let paths: Vec<&str> = c["devices"]
        .as_array()
        .expect("d")
        .iter()
        .filter_map(|d| d["container_path"].as_str())
        .collect();
    assert_eq!(
        paths,
        [
            "/dev/nvidia0",
            "/dev/nvidia-caps/nvidia-cap21",
            "/dev/nvidia-caps/nvidia-cap22"
        ]
    );

    // Time-slicing: replica ids for PodResources, the plain UUID for the container.
    let g = gpu(1, 1);
    let ts = NvidiaPlugin::new()
        .time_sliced(4)
        .allocate(&[(&g, Some(3))]);
    assert_eq!(ts.resource, "nvidia.com/gpu.shared");
    assert_eq!(ts.ids, ["GPU-1aaa::3"]);
    assert_eq!(cfg(ts.clone())["envs"][0]["value"], "GPU-1aaa");
    let pr = pod_with(ts).pod_resources();
    assert_eq!(pr.containers[0].devices[0].device_ids, ["GPU-1aaa::3"]);
    assert_eq!(pr.containers[0].devices[0].topology.nodes[0].ID, 1);

    // MPS: the pipe directory env and the two mounts.
    let mps = cfg(NvidiaPlugin::new().mps(2).allocate(&[(&g, Some(0))]));
    let envs = mps["envs"].as_array().expect("envs");
    assert!(envs
        .contains(&json!({"key": "CUDA_MPS_PIPE_DIRECTORY", "value": "/mps/nvidia.com/gpu/pipe"})));
    assert_eq!(
        mps["mounts"][0]["host_path"],
        "/run/nvidia/mps/nvidia.com/gpu/pipe"
    );
    assert_eq!(
        mps["mounts"][1],
        json!({"container_path": "/dev/shm", "host_path": "/run/nvidia/mps/shm", "readonly": false})
    );

    // RDMA shared device plugin: every HCA's nodes, rdma_cm once after the kubelet's merge.
    let hcas = [
        Hca {
            pci: "0000:3b:00.0".into(),
            ucm: None,
            issm: Some(0),
            umad: Some(0),
            uverbs: 0,
        },
        Hca {
            pci: "0000:86:00.0".into(),
            ucm: None,
            issm: Some(1),
            umad: Some(1),
            uverbs: 1,
        },
    ];
    let r = cfg(rdma_shared_allocate(
        "rdma/hca_shared_devices_a",
        &hcas,
        17,
        false,
    ));
    let paths: Vec<&str> = r["devices"]
        .as_array()
        .expect("d")
        .iter()
        .filter_map(|d| d["container_path"].as_str())
        .collect();
    assert_eq!(
        paths,
        [
            "/dev/infiniband/issm0",
            "/dev/infiniband/umad0",
            "/dev/infiniband/uverbs0",
            "/dev/infiniband/rdma_cm",
            "/dev/infiniband/issm1",
            "/dev/infiniband/umad1",
            "/dev/infiniband/uverbs1"
        ]
    );
    assert!(r["devices"]
        .as_array()
        .expect("d")
        .iter()
        .all(|d| d["permissions"] == "rwm"));
    for p in &paths {
        assert!(k8s_devices::rdma::parse_device_node(p).is_some(), "{p}");
    }
    let rc = cfg(rdma_shared_allocate(
        "rdma/hca_shared_devices_a",
        &hcas,
        17,
        true,
    ));
    assert_eq!(
        rc["annotations"]["cdi.k8s.io/nvidia.com_net-rdma"],
        "nvidia.com/net-rdma=0000:3b:00.0,nvidia.com/net-rdma=0000:86:00.0"
    );
}

#[test]
fn device_plugin_env_comes_first_and_kubelet_annotations_win() {
    let g = gpu(0, 0);
    let mut a = NvidiaPlugin::new().allocate(&[(&g, None)]);
    a.annotations
        .insert("io.kubernetes.container.restartCount".into(), "99".into());
    let pod = KubePod::new("ml", "x").container(
        KubeContainer::new("cuda")
            .resources(guaranteed("1", "1Gi"))
            .allocation(a)
            .env("NVIDIA_VISIBLE_DEVICES", "all"),
    );
    let c = pod
        .container_config(&node(CgroupDriver::Cgroupfs, false), "cuda", 0, "img", None)
        .expect("c");
    // The plugin's value first, the pod spec's after it (a runtime applies them in order, so a
    // pod can override the envvar strategy: why NVIDIA recommends volume-mounts).
    assert_eq!(
        c["envs"],
        json!([{"key": "NVIDIA_VISIBLE_DEVICES", "value": "GPU-0aaa"}, {"key": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    );
    assert_eq!(
        c["annotations"]["io.kubernetes.container.restartCount"],
        "0"
    );
}

#[test]
fn pod_resources_lists_sidecars_and_apps_not_plain_inits() {
    let g = gpu(0, 0);
    let pod = KubePod::new("ml", "pr")
        .init_container(KubeContainer::new("setup"), false)
        .init_container(KubeContainer::new("proxy"), true)
        .container(
            KubeContainer::new("cuda").allocation(NvidiaPlugin::new().allocate(&[(&g, None)])),
        );
    let pr = pod.pod_resources();
    let names: Vec<&str> = pr.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["proxy", "cuda"]);
    assert_eq!(pr.containers[1].devices[0].resource_name, "nvidia.com/gpu");
    assert_eq!((pr.namespace.as_str(), pr.name.as_str()), ("ml", "pr"));
}

/// A container's DRA claims as the kubelet's PodResources API lists them (`dynamic_resources`),
/// in the proto3 JSON mapping of the message (lowerCamelCase of the upstream field names of
/// `DynamicResource`, `ClaimResource` and `CDIDevice`, proto/podresources/api.proto): the
/// values the test kubelet serves are where the upstream message carries them.
#[test]
fn pod_resources_lists_each_claim_with_its_driver_pool_and_device() {
    let claim = DraClaim {
        namespace: "ml".into(),
        name: "gpu-claim".into(),
        devices: vec![ClaimDevice {
            driver: "gpu.nvidia.com".into(),
            pool: "node-a".into(),
            device: "gpu-1".into(),
            cdi_names: vec!["k8s.gpu.nvidia.com/claim=u1-gpu-1".into()],
        }],
    };
    let pod = KubePod::new("ml", "dra")
        .container(KubeContainer::new("app").claim(claim))
        .container(KubeContainer::new("plain"));
    let pr = pod.pod_resources();
    let text = protobuf_json_mapping::print_to_string(&pr.containers[0]).expect("json");
    let got: Value = serde_json::from_str(&text).expect("parse");
    assert_eq!(
        got["dynamicResources"],
        json!([{
            "claimName": "gpu-claim",
            "claimNamespace": "ml",
            "claimResources": [{
                "cdiDevices": [{"name": "k8s.gpu.nvidia.com/claim=u1-gpu-1"}],
                "driverName": "gpu.nvidia.com",
                "poolName": "node-a",
                "deviceName": "gpu-1"
            }]
        }])
    );
    // A container that references no claim lists none.
    assert!(pr.containers[1].dynamic_resources.is_empty());
}
