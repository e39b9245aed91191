//! "Make pods wait for nri-align" (docs/install.md, section 2) on a real runtime: NRI's default
//! validator (NRI v0.10, CRI-O 1.34) configured with `required_plugins = ["nri-align"]` refuses
//! a container that nri-align did not process, lets a pod that carries the toleration annotation
//! start without it, and accepts the refused container once nri-align is registered, placed by
//! it. A pod's own `required-plugins.noderesource.dev/pod` annotation adds to the list.
//!
//! containerd gains the same validator in 2.2 (NRI v0.10); the containerd builds this harness
//! runs (1.7.24 and 2.1.9, NRI v0.6 and v0.8) do not have it, so only CRI-O runs this.
//! The requests are the kubelet's (`e2e::kubelet`).

use test_support::e2e::kubelet::{KubeContainer, KubePod, Node, Resources};
use test_support::e2e::{skip_unless_ready, AlignRun, EmulatedHost, Instance, Runtime, UpOptions};

/// The toleration key docs/install.md and the DaemonSet's pod template use.
const TOLERATE: &str = "tolerate-missing-nri-plugins.noderesource.dev";

/// A Guaranteed pod with one app container of one whole CPU: nri-align gives it a CPU of its own.
fn guaranteed_pod(name: &str) -> KubePod {
    KubePod::new("default", name).container(
        KubeContainer::new("app")
            .resources(Resources::none().both("cpu", "1").both("memory", "64Mi")),
    )
}

#[test]
fn crio_default_validator_makes_containers_wait_for_nri_align() {
    let test = "crio_default_validator_makes_containers_wait_for_nri_align";
    if skip_unless_ready(Runtime::Crio, test) {
        return;
    }
    let options = UpOptions {
        required_plugins: Some(vec!["nri-align".into()]),
        tolerate_missing_annotation: Some(TOLERATE.into()),
        ..UpOptions::default()
    };
    let rt = Instance::fresh_with(Runtime::Crio, "e2e-required", options)
        .unwrap_or_else(|e| panic!("{test}: CRI-O comes up: {e}"));
    let node = Node::for_instance(&rt).expect("node");

    // 1. nri-align is not registered: the container is refused, with the validator's words.
    let waiting = guaranteed_pod("waits-for-align");
    let waiting_sandbox = rt.run_kube_pod(&waiting, &node).expect("sandbox");
    let refused = rt
        .create_kube_container(&waiting_sandbox, &waiting, &node, "app", 0)
        .expect_err("a container nri-align did not process is refused");
    assert!(
        refused
            .to_string()
            .contains(r#"required plugin "nri-align" not present"#),
        "{test}: the refusal names the missing plugin: {refused}"
    );

    // 2. A pod that tolerates the missing plugin starts (how the DaemonSet's own pod starts).
    let tolerant = guaranteed_pod("tolerates").annotation(TOLERATE, "true");
    let tolerant_sandbox = rt.run_kube_pod(&tolerant, &node).expect("sandbox");
    let started = rt
        .create_kube_container(&tolerant_sandbox, &tolerant, &node, "app", 0)
        .unwrap_or_else(|e| panic!("{test}: the tolerating pod starts: {e}"));
    rt.cri().ok(&["start", &started]).expect("start");

    // 3. nri-align registers: the kubelet's retry of the refused container is accepted and
    // nri-align places it on a CPU of its own.
    let host = EmulatedHost::of_this_machine(&rt.dir().join("host"), 0, 0).expect("emulate");
    let mut run = AlignRun::new(rt.dir().join("align-state")).on(&host);
    run.write_config(&rt.dir().join("nri-align.yaml"), "")
        .expect("config");
    let mut plugin = run
        .start(&rt)
        .unwrap_or_else(|e| panic!("{test}: nri-align registers: {e}"));
    let id = rt
        .create_kube_container(&waiting_sandbox, &waiting, &node, "app", 0)
        .unwrap_or_else(|e| panic!("{test}: accepted once nri-align is there: {e}"));
    rt.cri().ok(&["start", &id]).expect("start");
    let live = rt
        .live(&id)
        .expect("inspect")
        .unwrap_or_else(|| panic!("{test}: {id} runs"));
    assert_eq!(
        live.cpus.len(),
        1,
        "{test}: nri-align gave the Guaranteed container one CPU of its own: {live:?}"
    );
    assert!(
        plugin.wait_for_output("waits-for-align", std::time::Duration::from_secs(5)),
        "{test}: nri-align's log names the pod it placed: {}",
        plugin.output()
    );

    // 4. A pod can require more plugins than the node does: refused while one is missing.
    // Burstable: this 2-CPU machine has no second CPU to give exclusively.
    let guarded = KubePod::new("default", "needs-guard")
        .container(KubeContainer::new("app").resources(Resources::none().request("cpu", "100m")))
        .annotation("required-plugins.noderesource.dev/pod", r#"["gpu-guard"]"#);
    let guarded_sandbox = rt.run_kube_pod(&guarded, &node).expect("sandbox");
    let refused = rt
        .create_kube_container(&guarded_sandbox, &guarded, &node, "app", 0)
        .expect_err("a pod-level required plugin that is absent refuses the container");
    assert!(
        refused
            .to_string()
            .contains(r#"required plugin "gpu-guard" not present"#),
        "{test}: the refusal names the pod's own required plugin: {refused}"
    );

    plugin.stop(nix::sys::signal::Signal::SIGTERM);
}
