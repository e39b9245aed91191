//! `leave_to_others` beside a second real NRI plugin that sets `cpuset.cpus` of every
//! container (as kubernetes-sigs/dra-driver-cpu's plugin does), registered before nri-align
//! (index 10 against nri-align's 50), on every runtime here:
//!
//! 1. both plugins set the cpuset: the runtime fails the creation with its conflict error
//!    ("plugins ... both tried to set", containerd/nri `pkg/adaptation/result.go`);
//! 2. after a reload with `leave_to_others: [cpus]` the same container is created, runs on
//!    the other plugin's CPUs, and its memory nodes are nri-align's alignment to them; its
//!    claim's CPUs (the driver's `DRA_CPUSET_<claimUID>` env, from the claim's CDI spec the
//!    kubelet's PodResources answer names) are recorded as held;
//! 3. with the other plugin after nri-align (index 90), the CPUs show at PostStartContainer:
//!    the record follows them, the memory nodes too (the cgroup at once, the runtime's spec
//!    with the next response, a `cpuset.mems`-only update).
//!
//! And beside a memory driver's plugin that sets `cpuset.mems` (index 10): refused while both
//! set it; with `leave_to_others: [mems]` created, its CPUs on the node of those memory nodes
//! (recorded as placed by them); beside such a plugin at index 90, created too.
//!
//! This host has one NUMA node and runc must be given its real nodes, so the emulated host
//! has one too: the node checked is the only one. The moves between nodes are proven by the
//! engine's tests on a two-node topology (`src/enforce/engine/tests/others.rs`) and the
//! plugin's, cgroup write included (`src/enforce/nri/plugin_tests.rs`); here, that the
//! runtimes take the updates and show the fields at the events said in docs/dra.md.

use std::time::Duration;

use nix::sys::signal::Signal;
use test_support::e2e::cpuset_plugin::CpusetPlugin;
use test_support::e2e::kubelet::{ClaimDevice, DraClaim, KubeContainer, KubePod, Node, Resources};
use test_support::e2e::suite::Enforced;
use test_support::e2e::{wait_until, Pod, Runtime, UpOptions};
use test_support::each_runtime;

const CLAIM: &str = "9d2c7a10-aaaa-bbbb-cccc-0123456789ab";

/// Writes `config` and has the running nri-align reload it (SIGHUP), waiting until it says so.
fn reload_with(e: &Enforced, config: &str) {
    let reloads = e.plugin.output().matches("configuration reloaded").count();
    std::fs::write(&e.config, config).expect("config");
    e.plugin.signal(Signal::SIGHUP);
    assert!(
        wait_until(Duration::from_secs(10), || e
            .plugin
            .output()
            .matches("configuration reloaded")
            .count()
            > reloads),
        "{}",
        e.plugin.output()
    );
}

/// Creating `pod`'s container `app` fails with the runtime's "both tried to set" (`what`: the
/// two plugins' conflict, for the message).
fn assert_refused_as_both_set(e: &Enforced, sandbox: &Pod, pod: &KubePod, k: &Node, what: &str) {
    let refused =
        e.rt.create_kube_container(sandbox, pod, k, "app", 0)
            .expect_err(what);
    assert!(
        refused.to_string().contains("both tried to set"),
        "{}: {refused}",
        e.rt.name
    );
}

/// The CDI name dra-driver-cpu prepares the claim as (kind `dra.k8s.io/cpu`, a device per
/// claim, `pkg/driver/cdi.go`).
fn claim_cdi_name() -> String {
    format!("dra.k8s.io/cpu={CLAIM}")
}

/// Writes the driver's CDI spec for the claim of `cpu` where nri-align reads specs, and waits
/// for its watcher.
fn install_claim_spec(e: &Enforced, cpu: u32) {
    let spec = format!(
        r#"{{"cdiVersion": "0.8.0", "kind": "dra.k8s.io/cpu", "devices": [
            {{"name": "{CLAIM}", "containerEdits": {{"env": ["DRA_CPUSET_{CLAIM}={cpu}"]}}}}]}}"#
    );
    let dir = e.host.root.join("var/run/cdi");
    std::fs::create_dir_all(&dir).expect("cdi dir");
    std::fs::write(dir.join("dra.cpu.json"), spec).expect("spec");
    // Within a second of the write (the watcher's bound), with room for a loaded machine.
    std::thread::sleep(Duration::from_millis(1500));
}

fn pod(name: &str, cpu: u32) -> KubePod {
    KubePod::new("dra", name).container(
        KubeContainer::new("app")
            .resources(Resources::none().both("cpu", "1").both("memory", "64Mi"))
            .claim(DraClaim {
                namespace: "dra".into(),
                name: "cpus".into(),
                devices: vec![ClaimDevice {
                    driver: "dra.cpu".into(),
                    pool: "node".into(),
                    device: "cpudev0".into(),
                    cdi_names: vec![claim_cdi_name()],
                }],
            })
            // What the runtime injects from the claim's CDI spec.
            .env(&format!("DRA_CPUSET_{CLAIM}"), &cpu.to_string()),
    )
}

fn a_second_plugin_owning_cpus_is_left_them(rt: Runtime) {
    let options = UpOptions {
        cdi: true,
        ..UpOptions::default()
    };
    let Some(e) = Enforced::builder(rt, "others", "e2e-others")
        .kubelet()
        .options(options)
        .start()
    else {
        return;
    };
    // The other plugin's CPU: the last one of the last node.
    let (node, cpus) = e.host.machine.nodes.iter().last().expect("a node");
    let cpu = *cpus.last().expect("a CPU");
    install_claim_spec(&e, cpu);
    let kubelet = e.kubelet.as_ref().expect("test kubelet");
    let other = CpusetPlugin::start(&e.rt.nri_socket(), "dra-cpus", "10", &cpu.to_string())
        .unwrap_or_else(|err| panic!("{}: second plugin: {err}", rt.name()));
    let k = Node::for_instance(&e.rt).expect("node");

    // 1. Both set cpuset.cpus: the runtime refuses the container.
    let both = pod("both", cpu);
    kubelet.report(both.pod_resources());
    let sandbox = e.rt.run_kube_pod(&both, &k).expect("sandbox");
    assert_refused_as_both_set(&e, &sandbox, &both, &k, "two plugins setting cpuset.cpus");

    // 2. Left to the other plugin (a reload is enough: it holds for later creations).
    reload_with(&e, "leave_to_others: [cpus]\n");
    let left = pod("left", cpu);
    kubelet.report(left.pod_resources());
    let sandbox = e.rt.run_kube_pod(&left, &k).expect("sandbox");
    let id =
        e.rt.create_kube_container(&sandbox, &left, &k, "app", 0)
            .unwrap_or_else(|err| panic!("{}: left to the other plugin: {err}", rt.name()));
    e.rt.cri().ok(&["start", &id]).expect("start");
    let live = e.live(&id);
    assert_eq!(live.cpus, vec![cpu], "the other plugin's CPU");
    assert_eq!(live.mems, node.to_string(), "memory on that CPU's node");
    let state = e.run.state().expect("state");
    let rec = &state[&id];
    assert_eq!(rec["assignment"]["exclusive"], true, "{rec}");
    assert_eq!(rec["assignment"]["cpus"], cpu.to_string(), "{rec}");

    // Without a claim's env, what nri-align reads is the cpuset the runtime shows it in
    // CreateContainer: already the other plugin's (it comes first), recorded shared.
    let plain = KubePod::new("dra", "plain").container(
        KubeContainer::new("app").resources(
            Resources::none()
                .request("cpu", "100m")
                .request("memory", "32Mi"),
        ),
    );
    let sandbox = e.rt.run_kube_pod(&plain, &k).expect("sandbox");
    let id =
        e.rt.create_kube_container(&sandbox, &plain, &k, "app", 0)
            .unwrap_or_else(|err| panic!("{}: plain container: {err}", rt.name()));
    e.rt.cri().ok(&["start", &id]).expect("start");
    assert_eq!(e.live(&id).cpus, vec![cpu]);
    let state = e.run.state().expect("state");
    let rec = &state[&id];
    assert_eq!(rec["assignment"]["exclusive"], false, "{rec}");
    assert_eq!(rec["assignment"]["cpus"], cpu.to_string(), "{rec}");

    // 3. The other plugin after nri-align (index 90): CreateContainer cannot show its cpuset
    //    yet; PostStartContainer does, and the record follows it.
    drop(other);
    let _after = CpusetPlugin::start(&e.rt.nri_socket(), "dra-cpus-late", "90", &cpu.to_string())
        .unwrap_or_else(|err| panic!("{}: late plugin: {err}", rt.name()));
    let late = KubePod::new("dra", "late").container(
        KubeContainer::new("app").resources(
            Resources::none()
                .request("cpu", "100m")
                .request("memory", "32Mi"),
        ),
    );
    let sandbox = e.rt.run_kube_pod(&late, &k).expect("sandbox");
    let id =
        e.rt.create_kube_container(&sandbox, &late, &k, "app", 0)
            .unwrap_or_else(|err| panic!("{}: late plugin's container: {err}", rt.name()));
    e.rt.cri().ok(&["start", &id]).expect("start");
    assert_eq!(e.live(&id).cpus, vec![cpu]);
    let want = cpu.to_string();
    assert!(
        wait_until(Duration::from_secs(5), || e
            .run
            .state()
            .ok()
            .and_then(|s| s
                .get(&id)
                .map(|r| r["assignment"]["cpus"].as_str() == Some(want.as_str())))
            .unwrap_or(false)),
        "{}: record after PostStart: {:?}",
        rt.name(),
        e.run.state().map(|s| s.get(&id).cloned())
    );
    // Its memory nodes follow those CPUs: in the record, in the cgroup (written at
    // PostStart), and in the runtime's spec once the next response carried the update.
    let node_text = node.to_string();
    let state = e.run.state().expect("state");
    assert_eq!(
        state[&id]["assignment"]["mems"],
        node_text,
        "{}: {}",
        rt.name(),
        state[&id]
    );
    assert_eq!(e.rt.cgroup_mems(&id).expect("cgroup"), vec![*node]);
    let spec_mems = || {
        e.rt.cri().inspect(&id).ok().map(|i| {
            i["info"]["runtimeSpec"]["linux"]["resources"]["cpu"]["mems"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
    };
    assert_eq!(
        spec_mems().as_deref(),
        Some(""),
        "{}: creation set no memory nodes (no devices, CPUs not known yet)",
        rt.name()
    );
    let next = KubePod::new("dra", "next")
        .container(KubeContainer::new("app").resources(Resources::none().request("cpu", "100m")));
    let sandbox = e.rt.run_kube_pod(&next, &k).expect("sandbox");
    e.rt.create_kube_container(&sandbox, &next, &k, "app", 0)
        .unwrap_or_else(|err| panic!("{}: next container: {err}", rt.name()));
    assert!(
        wait_until(Duration::from_secs(5), || spec_mems().as_deref()
            == Some(node_text.as_str())),
        "{}: runtime spec's mems {:?}",
        rt.name(),
        spec_mems()
    );
    assert_eq!(e.live(&id).cpus, vec![cpu], "the cpuset is untouched");
}

fn a_memory_plugin_owning_mems_places_the_cpus(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "others-mems", "e2e-others-mems").start() else {
        return;
    };
    let (node, cpus) = e.host.machine.nodes.iter().last().expect("a node");
    let _memory = CpusetPlugin::start_setting(
        &e.rt.nri_socket(),
        "dra-memory",
        "10",
        "",
        &node.to_string(),
    )
    .unwrap_or_else(|err| panic!("{}: memory plugin: {err}", rt.name()));
    let k = Node::for_instance(&e.rt).expect("node");
    let pod = |name: &str| {
        KubePod::new("dra", name).container(
            KubeContainer::new("app")
                .resources(Resources::none().both("cpu", "1").both("memory", "64Mi")),
        )
    };

    // Both set cpuset.mems: the runtime refuses the container. A shared one: CRI-O tells
    // nri-align nothing of a creation it failed after the plugins answered, so an exclusive
    // one would keep its CPU recorded until a Synchronize, and this host has two.
    let both = KubePod::new("dra", "mems-both")
        .container(KubeContainer::new("app").resources(Resources::none().request("cpu", "100m")));
    let sandbox = e.rt.run_kube_pod(&both, &k).expect("sandbox");
    assert_refused_as_both_set(&e, &sandbox, &both, &k, "two plugins setting cpuset.mems");

    reload_with(&e, "leave_to_others: [mems]\n");
    let left = pod("mems-left");
    let sandbox = e.rt.run_kube_pod(&left, &k).expect("sandbox");
    let id =
        e.rt.create_kube_container(&sandbox, &left, &k, "app", 0)
            .unwrap_or_else(|err| panic!("{}: mems left to the other plugin: {err}", rt.name()));
    e.rt.cri().ok(&["start", &id]).expect("start");
    let live = e.live(&id);
    assert_eq!(live.mems, node.to_string(), "the memory plugin's node");
    assert_eq!(live.cpus.len(), 1, "{:?}", live.cpus);
    assert!(
        cpus.contains(&live.cpus[0]),
        "CPU {:?} on node {node}",
        live.cpus
    );
    let state = e.run.state().expect("state");
    let rec = &state[&id]["assignment"];
    assert_eq!(rec["numa_nodes"], node.to_string(), "{rec}");
    assert_eq!(rec["exclusive"], true, "{rec}");
    // Placed by the memory nodes the other plugin set, as CreateContainer showed them.
    assert_eq!(
        rec["scheduler_choice"]["scheduler"], "memory-plugin",
        "{rec}"
    );
    assert_eq!(rec["scheduler_choice"]["honoured"], true, "{rec}");

    // The memory plugin after nri-align (index 90): CreateContainer shows no memory nodes, the
    // container is created beside it all the same and runs on the nodes it set.
    drop(_memory);
    let _late = CpusetPlugin::start_setting(
        &e.rt.nri_socket(),
        "dra-memory-late",
        "90",
        "",
        &node.to_string(),
    )
    .unwrap_or_else(|err| panic!("{}: late memory plugin: {err}", rt.name()));
    // Shared: the exclusive container above holds one of this host's two CPUs.
    let late = KubePod::new("dra", "mems-late")
        .container(KubeContainer::new("app").resources(Resources::none().request("cpu", "100m")));
    let sandbox = e.rt.run_kube_pod(&late, &k).expect("sandbox");
    let id =
        e.rt.create_kube_container(&sandbox, &late, &k, "app", 0)
            .unwrap_or_else(|err| panic!("{}: beside a later memory plugin: {err}", rt.name()));
    e.rt.cri().ok(&["start", &id]).expect("start");
    let live = e.live(&id);
    assert_eq!(live.mems, node.to_string(), "the late memory plugin's node");
    assert!(
        live.cpus.iter().all(|c| cpus.contains(c)),
        "CPUs {:?} on node {node}",
        live.cpus
    );
    let state = e.run.state().expect("state");
    assert_eq!(
        state[&id]["assignment"]["exclusive"], false,
        "{}",
        state[&id]
    );
}

each_runtime!(
    a_second_plugin_owning_cpus_is_left_them,
    a_memory_plugin_owning_mems_places_the_cpus
);
