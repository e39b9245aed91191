//! CDI specs resolved by nri-align on every real runtime: a per-claim spec written the way the
//! NVIDIA DRA driver writes it (`k8s.gpu.nvidia.com-claim_<uid>.yaml`, device
//! `k8s.gpu.nvidia.com/claim=<uid>-gpu-<minor>`) naming an emulated GPU, and a generic vendor's
//! spec (`example.com/accel`) naming an emulated PCI function, both written after nri-align
//! started (the watcher picks them up). How the names reach nri-align differs by runtime:
//! - containerd 2.3 sends the CRI `CDI_devices` field to NRI (`Container.CDI_devices`): the
//!   names go there and nowhere else (no annotation);
//! - containerd 1.7/2.1 and CRI-O send no names: through `cdi.k8s.io/` annotations, which
//!   every runtime passes to NRI, and, on containerd 2.1, through the CRI field alone, which
//!   the runtime applies but does not send: nri-align matches the device nodes it injected
//!   back to the specs.
//!
//! Then the kubelet's semantics for a claim two containers of one pod reference: shared, and
//! held until the last one goes.
//!
//! The runtime and nri-align read the same devices from two copies of each spec: the
//! runtime's, in its private CDI dir, with host paths of the emulated host's nodes, and
//! nri-align's, under its `--host-root`, with the paths a real host has (`/dev/nvidia1`).
//! On a real node both are one file.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use test_support::e2e;
use test_support::e2e::kubelet::{
    Allocation, ClaimDevice, DraClaim, KubeContainer, KubePod, Node, Resources,
};
use test_support::e2e::suite::Enforced;
use test_support::e2e::{Runtime, UpOptions};
use test_support::{each_cdi_runtime, each_runtime};

const CLAIM: &str = "6f1a0c5e-1111-2222-3333-444455556666";
const ACCEL_BUS: &str = "0000:c0:00.0";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// The emulated PCI function behind `/dev/null` (char 1:3) on NUMA node `node`, as the kernel
/// links an accelerator's node: `sys/dev/char/1:3/device` -> the function.
fn emulate_accel(root: &Path, node: u32) {
    let dev = format!("sys/devices/pci0000:c0/{ACCEL_BUS}");
    write(&root.join(&dev).join("numa_node"), &format!("{node}\n"));
    let link = |rel: &str, to: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        let _ = std::fs::remove_file(&p);
        symlink(to, p).expect("symlink");
    };
    link(
        &format!("sys/bus/pci/devices/{ACCEL_BUS}"),
        &format!("../../../devices/pci0000:c0/{ACCEL_BUS}"),
    );
    std::fs::create_dir_all(root.join("sys/dev/char/1:3")).expect("mkdir");
    link(
        "sys/dev/char/1:3/device",
        &format!("../../../devices/pci0000:c0/{ACCEL_BUS}"),
    );
}

/// Both specs, with `gpu_host` as the GPU node's host path.
fn specs(minor: u32, gpu_host: &str) -> [(String, String); 2] {
    let claim = format!(
        "cdiVersion: 0.5.0\nkind: k8s.gpu.nvidia.com/claim\ndevices:\n- name: {CLAIM}-gpu-{minor}\n  \
         containerEdits:\n    env: [NVIDIA_VISIBLE_DEVICES={minor}]\n    deviceNodes:\n    \
         - path: /dev/nvidia{minor}\n      hostPath: {gpu_host}\n"
    );
    let accel = r#"{"cdiVersion": "0.6.0", "kind": "example.com/accel", "devices": [{"name": "fn0",
        "containerEdits": {"env": ["ACCEL=fn0"], "deviceNodes": [{"path": "/dev/accel0",
        "hostPath": "/dev/null", "type": "c", "major": 1, "minor": 3}]}}]}"#;
    [
        (format!("k8s.gpu.nvidia.com-claim_{CLAIM}.yaml"), claim),
        ("example.com-accel.json".to_string(), accel.to_string()),
    ]
}

/// Writes both specs for the emulated GPU 1 and a function on the first node, in the
/// runtime's CDI dir and then in nri-align's (after it started: the watcher must pick them
/// up), and waits for the watcher. Returns the node and the GPU's minor number.
fn install_specs(e: &Enforced) -> (u32, u32) {
    // The emulated GPUs are on the first node: the function goes there too, so that both
    // devices can be aligned to on any machine shape.
    let node = *e.host.machine.nodes.keys().next().expect("a node");
    let g = &e.host.gpus[1];
    emulate_accel(&e.host.root, node);
    let gpu_dev = format!("/dev/nvidia{}", g.minor);
    // The runtime's copy: host paths of the emulated host.
    for (file, text) in specs(g.minor, &e.host.dev(&gpu_dev).to_string_lossy()) {
        write(&e.rt.dir().join("cdi").join(file), &text);
    }
    // nri-align's copy.
    for (file, text) in specs(g.minor, &gpu_dev) {
        write(&e.host.root.join("var/run/cdi").join(file), &text);
    }
    // Within a second of the write (the watcher's bound), with room for a loaded machine.
    std::thread::sleep(Duration::from_millis(1500));
    (node, g.minor)
}

/// How the test hands the container its CDI names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// `cdi.k8s.io/` annotations.
    Annotations,
    /// The CRI `CDI_devices` field alone.
    CriField,
}

/// The value of `key=` in a log line (quoted or not), empty when absent.
/// The daemon's log says container `app`'s GPUs were read from its CDI devices.
fn assert_gpus_read_from_cdi(out: &str) {
    let gpus = out
        .lines()
        .rev()
        .find(|l| l.contains("gpus read") && l.contains("container=app"))
        .unwrap_or_default();
    assert!(
        gpus.contains("source=cdi") || gpus.contains("source=\"cdi\""),
        "{gpus}\n{out}"
    );
}

/// Container `id`'s CPUs are all on NUMA node `node`, and its memory comes to be there.
fn assert_on_node(e: &Enforced, id: &str, node: u32) {
    let cpus = e.host.machine.nodes[&node].clone();
    let live = e.live(id);
    assert!(
        live.cpus.iter().all(|c| cpus.contains(c)),
        "{live:?} not on node {node}"
    );
    assert!(
        e2e::wait_until(Duration::from_secs(5), || e.live(id).mems
            == node.to_string()),
        "{:?}",
        e.live(id)
    );
}

fn field(line: &str, key: &str) -> String {
    let Some((_, rest)) = line.split_once(&format!(" {key}=")) else {
        return String::new();
    };
    let value = match rest.strip_prefix('"') {
        Some(q) => q.split('"').next().unwrap_or_default(),
        // An empty value is followed by the next field at once.
        None => rest.split(char::is_whitespace).next().unwrap_or_default(),
    };
    value.to_string()
}

fn cdi_specs_of_any_vendor_align_cpus_and_memory(rt: Runtime) {
    let route = if rt.sends_cdi_devices() {
        Route::CriField
    } else {
        Route::Annotations
    };
    dra(rt, route, "e2e-dra");
}

/// containerd 2.1 applies the CRI `CDI_devices` field but does not send it to NRI: with no
/// annotation and no kubelet, the devices are known only by what the runtime injected.
#[test]
fn injected_cdi_devices_are_matched_back_to_their_specs() {
    dra(Runtime::CONTAINERD_2_1, Route::CriField, "e2e-dra-match");
}

fn dra(rt: Runtime, route: Route, instance: &str) {
    let options = UpOptions {
        cdi: true,
        ..UpOptions::default()
    };
    let Some(e) = Enforced::builder(rt, "dra", instance)
        .gpus(2)
        .options(options)
        .start()
    else {
        return;
    };
    let (node, minor) = install_specs(&e);
    let names = format!("k8s.gpu.nvidia.com/claim={CLAIM}-gpu-{minor},example.com/accel=fn0");
    let mut claim = Allocation {
        resource: "example.com/accel".into(),
        ids: vec!["fn0".into()],
        numa: vec![None],
        ..Allocation::default()
    };
    match route {
        Route::Annotations => {
            claim.annotations = [("cdi.k8s.io/dra_claim".to_string(), names.clone())].into();
        }
        Route::CriField => claim.cdi_devices = names.split(',').map(String::from).collect(),
    }
    let pod = KubePod::new("ml", "dra").container(
        KubeContainer::new("app")
            .resources(
                Resources::none()
                    .both("cpu", "1")
                    .both("memory", "64Mi")
                    .both("example.com/accel", "1"),
            )
            .allocation(claim),
    );
    let k = Node::for_instance(&e.rt).expect("node");
    let sandbox = e.rt.run_kube_pod(&pod, &k).expect("sandbox");
    let id =
        e.rt.create_kube_container(&sandbox, &pod, &k, "app", 0)
            .unwrap_or_else(|err| panic!("dra on {}: {err}", rt.name()));
    let cri = e.rt.cri();
    cri.ok(&["start", &id]).expect("start");
    // The runtime applied both specs.
    let env = cri.env(&id).expect("env");
    assert_eq!(env.get("ACCEL").map(String::as_str), Some("fn0"), "{env:?}");
    assert!(e.ls(&id, &["/dev"]).iter().any(|d| d == "accel0"));
    // nri-align resolved both through its registry: the GPU by its minor, the function by
    // sysfs, on its node.
    let want = format!("example.com/accel=fn0@{ACCEL_BUS}/node{node}");
    assert!(
        e.plugin.wait_for_output(&want, Duration::from_secs(5)),
        "no generic device line {want}:\n{}",
        e.plugin.output()
    );
    let out = e.plugin.output();
    // Which route nri-align saw the names by.
    let resolved = out
        .lines()
        .rev()
        .find(|l| l.contains("CDI devices resolved") && l.contains("container=app"))
        .unwrap_or_else(|| panic!("no \"CDI devices resolved\" line:\n{out}"));
    // In any order: the runtime's device order decides the match's.
    let sorted = |list: String| {
        let mut v: Vec<String> = list
            .split(',')
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        v.sort();
        v.join(",")
    };
    let (cri, matched) = (
        sorted(field(resolved, "cri")),
        sorted(field(resolved, "matched")),
    );
    let names = sorted(names);
    match (route, rt.sends_cdi_devices()) {
        // Sent by the runtime: named, nothing left to match.
        (Route::CriField, true) => assert!(cri == names && matched.is_empty(), "{resolved}"),
        // Applied, not sent: both matched back from the injected nodes.
        (Route::CriField, false) => assert!(cri.is_empty() && matched == names, "{resolved}"),
        (Route::Annotations, _) => assert!(cri.is_empty() && matched.is_empty(), "{resolved}"),
    }
    assert_gpus_read_from_cdi(&out);
    // An exclusive CPU and the memory on the function's node.
    assert_on_node(&e, &id, node);
}

/// The list of strings at `v` (a JSON array), empty when absent.
fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The kubelet's semantics for a claim two containers of one pod reference: both are
/// created (the GPU is shared, not allocated twice, not refused), and when the holder is
/// removed the claim's GPU stays held, by the container that still uses it.
fn a_claim_two_containers_of_a_pod_name_is_shared(rt: Runtime) {
    let options = UpOptions {
        cdi: true,
        ..UpOptions::default()
    };
    let Some(e) = Enforced::builder(rt, "dra-shared", "e2e-dra-shared")
        .gpus(2)
        .options(options)
        .start()
    else {
        return;
    };
    let (_, minor) = install_specs(&e);
    let claim = Allocation {
        resource: "k8s.gpu.nvidia.com".into(),
        annotations: [(
            "cdi.k8s.io/dra_claim".to_string(),
            format!("k8s.gpu.nvidia.com/claim={CLAIM}-gpu-{minor}"),
        )]
        .into(),
        ..Allocation::default()
    };
    // Burstable: a two-CPU machine has no exclusive CPU to spare for each.
    let container = |name: &str| {
        KubeContainer::new(name)
            .resources(
                Resources::none()
                    .request("cpu", "100m")
                    .request("memory", "32Mi"),
            )
            .allocation(claim.clone())
    };
    let pod = KubePod::new("ml", "pair")
        .container(container("trainer"))
        .container(container("sidecar"));
    let k = Node::for_instance(&e.rt).expect("node");
    let sandbox = e.rt.run_kube_pod(&pod, &k).expect("sandbox");
    let cri = e.rt.cri();
    let mut ids = Vec::new();
    for name in ["trainer", "sidecar"] {
        let id =
            e.rt.create_kube_container(&sandbox, &pod, &k, name, 0)
                .unwrap_or_else(|err| panic!("{name} on {}: {err}", rt.name()));
        cri.ok(&["start", &id]).expect("start");
        ids.push(id);
    }
    let state = e.run.state().expect("state");
    let held = strings(&state[&ids[0]]["assignment"]["gpus"]);
    assert_eq!(held.len(), 1, "{state:?}");
    assert_eq!(
        strings(&state[&ids[1]]["assignment"]["shared_gpus"]),
        held,
        "the sidecar shares the claim's GPU"
    );
    // The holder goes: the claim's GPU passes to the sidecar, which still uses it.
    cri.ok(&["stop", &ids[0]]).expect("stop");
    cri.ok(&["rm", &ids[0]]).expect("rm");
    assert!(
        e2e::wait_until(Duration::from_secs(10), || {
            let s = e.run.state().unwrap_or_default();
            !s.contains_key(&ids[0])
                && s.get(&ids[1])
                    .is_some_and(|r| strings(&r["assignment"]["gpus"]) == held)
        }),
        "{:?}\n{}",
        e.run.state(),
        e.plugin.output()
    );
}

/// The claim of `driver`'s device `device` in pool `pool`, prepared as CDI device `cdi`.
fn claim(name: &str, driver: &str, pool: &str, device: &str, cdi: &str) -> DraClaim {
    DraClaim {
        namespace: "ml".into(),
        name: name.into(),
        devices: vec![ClaimDevice {
            driver: driver.into(),
            pool: pool.into(),
            device: device.into(),
            cdi_names: vec![cdi.into()],
        }],
    }
}

/// Runtimes before containerd 2.3 send NRI no CDI names; the kubelet's PodResources API lists
/// every container's claims with the CDI names their drivers prepared (`dynamic_resources`).
/// Here that answer is the only place the names are: the container has no `cdi.k8s.io/`
/// annotation and no CRI `CDI_devices` field, so the runtime injects nothing nri-align could
/// match back. nri-align must still resolve both claims (the NVIDIA driver's GPU, a generic
/// vendor's function) through its spec registry, put the CPUs and memory on their node, and
/// keep each claim's driver, pool and device in the record and in `placements`.
fn claims_the_kubelet_lists_align_cpus_and_memory(rt: Runtime) {
    let options = UpOptions {
        cdi: true,
        ..UpOptions::default()
    };
    let Some(e) = Enforced::builder(rt, "dra-kubelet", "e2e-dra-kubelet")
        .gpus(2)
        .kubelet()
        .options(options)
        .start()
    else {
        return;
    };
    let (node, minor) = install_specs(&e);
    let gpu_name = format!("k8s.gpu.nvidia.com/claim={CLAIM}-gpu-{minor}");
    // As the NVIDIA DRA driver reports its devices (driver gpu.nvidia.com, the node's name as
    // the pool, gpu-<index> as the device) and a generic vendor its function.
    let gpu_claim = claim(
        "gpu-claim",
        "gpu.nvidia.com",
        "node-a",
        &format!("gpu-{minor}"),
        &gpu_name,
    );
    let accel_claim = claim(
        "accel-claim",
        "accel.example.com",
        "node-a",
        "fn0",
        "example.com/accel=fn0",
    );
    let pod = KubePod::new("ml", "dra-kubelet").container(
        KubeContainer::new("app")
            .resources(Resources::none().both("cpu", "1").both("memory", "64Mi"))
            .claim(gpu_claim.clone())
            .claim(accel_claim.clone()),
    );
    // The kubelet prepares a pod's claims when it admits the pod, before its sandbox and
    // containers are created: its answer lists them from the first CreateContainer on.
    let k = e.kubelet.as_ref().expect("test kubelet");
    k.report(pod.pod_resources());
    let node_cfg = Node::for_instance(&e.rt).expect("node");
    let sandbox = e.rt.run_kube_pod(&pod, &node_cfg).expect("sandbox");
    let id =
        e.rt.create_kube_container(&sandbox, &pod, &node_cfg, "app", 0)
            .unwrap_or_else(|err| panic!("dra via the kubelet on {}: {err}", rt.name()));
    e.rt.cri().ok(&["start", &id]).expect("start");
    let want = format!("example.com/accel=fn0@{ACCEL_BUS}/node{node}");
    assert!(
        e.plugin.wait_for_output(&want, Duration::from_secs(5)),
        "no generic device line {want}:\n{}",
        e.plugin.output()
    );
    let out = e.plugin.output();
    // Named by the kubelet alone: nothing from the runtime, nothing matched back.
    let resolved = out
        .lines()
        .rev()
        .find(|l| l.contains("CDI devices resolved") && l.contains("container=app"))
        .unwrap_or_else(|| panic!("no \"CDI devices resolved\" line:\n{out}"));
    assert!(
        field(resolved, "cri").is_empty() && field(resolved, "matched").is_empty(),
        "{resolved}"
    );
    assert_gpus_read_from_cdi(&out);
    assert_on_node(&e, &id, node);
    // The record: the GPU held, the function aligned to, and each claim's device.
    let state = e.run.state().expect("state");
    let rec = &state[&id];
    assert_eq!(strings(&rec["assignment"]["gpus"]).len(), 1, "{rec}");
    assert_eq!(
        strings(&rec["assignment"]["generic_devices"]),
        [ACCEL_BUS],
        "{rec}"
    );
    let want_claims = |claims: &serde_json::Value| {
        for (c, cdi) in [
            (&gpu_claim, gpu_name.as_str()),
            (&accel_claim, "example.com/accel=fn0"),
        ] {
            let d = &c.devices[0];
            let found = claims.as_array().into_iter().flatten().any(|k| {
                k["claim"] == format!("ml/{}", c.name).as_str()
                    && k["driver"] == d.driver.as_str()
                    && k["pool"] == d.pool.as_str()
                    && k["device"] == d.device.as_str()
                    && strings(&k["cdi_names"]) == [cdi]
            });
            assert!(found, "claim {} not kept: {claims}", c.name);
        }
    };
    want_claims(&rec["dra_claims"]);
    let rows = e.run.placements().expect("placements");
    let row = rows
        .iter()
        .find(|r| r["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not in placements: {rows:?}"));
    want_claims(&row["claims"]);
}

each_cdi_runtime!(cdi_specs_of_any_vendor_align_cpus_and_memory);
each_runtime!(
    a_claim_two_containers_of_a_pod_name_is_shared,
    claims_the_kubelet_lists_align_cpus_and_memory
);
