//! `leave_to_others` beside a second real NRI plugin that sets `cpuset.cpus` of every
//! container (as kubernetes-sigs/dra-driver-cpu's plugin does), registered before nri-align
//! (index 10 against nri-align's 50), on every runtime here:
//!
//! 1. both plugins set the cpuset: the runtime fails the creation with its conflict error
//!    ("plugins ... both tried to set", containerd/nri `pkg/adaptation/result.go`);
//! 2. after a reload with `leave_to_others: [cpus]` the same container is created, runs on
//!    the other plugin's CPUs, and its memory nodes are nri-align's alignment to them; its
//!    claim's CPUs (the driver's `DRA_CPUSET_<claimUID>` env) are recorded as held.

use std::time::Duration;

use nix::sys::signal::Signal;
use test_support::e2e::cpuset_plugin::CpusetPlugin;
use test_support::e2e::kubelet::{KubeContainer, KubePod, Node, Resources};
use test_support::e2e::suite::Enforced;
use test_support::e2e::{wait_until, Runtime, UpOptions};
use test_support::each_runtime;

const CLAIM: &str = "9d2c7a10-aaaa-bbbb-cccc-0123456789ab";

fn pod(name: &str, cpu: u32) -> KubePod {
    KubePod::new("dra", name).container(
        KubeContainer::new("app")
            .resources(Resources::none().both("cpu", "1").both("memory", "64Mi"))
            // What the driver's CDI spec injects for the claim.
            .env(&format!("DRA_CPUSET_{CLAIM}"), &cpu.to_string()),
    )
}

fn a_second_plugin_owning_cpus_is_left_them(rt: Runtime) {
    let Some(e) =
        Enforced::with_options(rt, "others", "e2e-others", (0, 0), "", UpOptions::default())
    else {
        return;
    };
    // The other plugin's CPU: the last one of the last node.
    let (node, cpus) = e.host.machine.nodes.iter().last().expect("a node");
    let cpu = *cpus.last().expect("a CPU");
    let other = CpusetPlugin::start(&e.rt.nri_socket(), "dra-cpus", "10", &cpu.to_string())
        .unwrap_or_else(|err| panic!("{}: second plugin: {err}", rt.name()));
    let k = Node::for_instance(&e.rt).expect("node");

    // 1. Both set cpuset.cpus: the runtime refuses the container.
    let both = pod("both", cpu);
    let sandbox = e.rt.run_kube_pod(&both, &k).expect("sandbox");
    let refused =
        e.rt.create_kube_container(&sandbox, &both, &k, "app", 0)
            .expect_err("two plugins setting cpuset.cpus");
    assert!(
        refused.to_string().contains("both tried to set"),
        "{}: {refused}",
        rt.name()
    );

    // 2. Left to the other plugin (a reload is enough: it holds for later creations).
    let reloads = e.plugin.output().matches("configuration reloaded").count();
    std::fs::write(&e.config, "leave_to_others: [cpus]\n").expect("config");
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
    let left = pod("left", cpu);
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
}

each_runtime!(a_second_plugin_owning_cpus_is_left_them);
