//! Pod budgets (`pod_budgets`) through each runtime here: a pod whose sandbox carries
//! pod-level resources Guaranteed in whole CPUs gets them as its own pool, which no other
//! pod's container runs on, and gives them back with its last container. The test host has 2
//! CPUs: the budget is 1, the node's shared pool the other.
//!
//! Every runtime here passes the sandbox's `linux.resources` to NRI as
//! `PodSandbox.linux.pod_resources`: containerd 1.7.24 (NRI v0.6.1), 2.1.9 (v0.8), 2.3.2 and
//! CRI-O 1.34.11 (v0.10.0).

use std::time::Duration;

use serde_json::json;
use test_support::each_cdi_runtime;

use test_support::e2e::suite::{burstable, Enforced};
use test_support::e2e::{PodSpec, Runtime};

/// The sandbox's pod-level resources: 1 CPU (request = limit) and 256 MiB, as the kubelet
/// sends a pod Guaranteed at pod level.
fn one_cpu() -> serde_json::Value {
    json!({
        "cpu_period": 100000,
        "cpu_quota": 100000,
        "cpu_shares": 1024,
        "memory_limit_in_bytes": 256 << 20
    })
}

fn pod_level_resources_give_the_pod_its_own_cpus(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "podlevel", "e2e-podl")
        .config("pod_budgets: true\n")
        .start()
    else {
        return;
    };
    let online = e.online();
    let mut spec = PodSpec::new("budget");
    spec.resources = Some(one_cpu());
    let pod = e.rt.run_pod(&spec).expect("pod");
    let other = e.rt.run_pod(&PodSpec::new("other")).expect("other pod");
    // A container without limits of the budgeted pod: the pod's pool, one CPU of its own.
    let loader = e.run(&pod, &burstable("loader"));
    let web = e.run(&other, &burstable("web"));
    let mine = e.live(&loader).cpus;
    assert_eq!(mine.len(), 1, "{rt:?}: the pod's budget is 1 CPU: {mine:?}");
    let rest: Vec<u32> = online
        .iter()
        .copied()
        .filter(|c| !mine.contains(c))
        .collect();
    e.wait_cpus(&web, &rest);
    e.assert_verified(&[&loader, &web]);
    // The pod's last container goes: its CPU is the node's again (with the next response).
    e.remove(&loader);
    e.next_event(&other, "nudge");
    e.wait_cpus(&web, &online);
}

each_cdi_runtime!(pod_level_resources_give_the_pod_its_own_cpus);

/// A pod-level resize (CRI `UpdatePodSandboxResources`, what the kubelet sends after resizing
/// a pod with pod-level resources) reaches nri-align as NRI `UpdatePodSandbox` where the
/// runtime has both: containerd 2.3.2 and CRI-O 1.34.11. containerd 1.7.24 and 2.1.9 answer the
/// CRI call Unimplemented (the kubelet treats it as best effort), and the budget stays as it
/// was. On 2 CPUs the budget cannot grow (one CPU always stays in the node's pool): the resize
/// changes its memory, which nri-align takes and logs; the engine and plugin tests grow it.
fn a_pod_resize_reaches_nri_align_where_the_runtime_sends_it(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "podlevel", "e2e-podr")
        .config("pod_budgets: true\n")
        .start()
    else {
        return;
    };
    let mut spec = PodSpec::new("resized");
    spec.resources = Some(one_cpu());
    let pod = e.rt.run_pod(&spec).expect("pod");
    let loader = e.run(&pod, &burstable("loader"));
    let before = e.live(&loader).cpus;
    let memory = (512 << 20).to_string();
    let sent = e.rt.cri().ok(&[
        "updatep",
        "--cpu-period",
        "100000",
        "--cpu-quota",
        "100000",
        "--cpu-share",
        "1024",
        "--memory",
        &memory,
        &pod.id,
    ]);
    let sends = matches!(rt, Runtime::Crio) || rt == Runtime::CONTAINERD_2_3;
    if sends {
        sent.unwrap_or_else(|err| panic!("{rt:?}: {err}"));
        assert!(
            e.plugin
                .wait_for_output("pod budget resized", Duration::from_secs(10)),
            "{rt:?}: {}",
            e.plugin.output()
        );
    } else {
        let err = sent.expect_err("no UpdatePodSandboxResources").to_string();
        assert!(err.contains("Unimplemented"), "{rt:?}: {err}");
        assert!(!e.plugin.output().contains("pod budget resized"));
    }
    assert_eq!(
        e.live(&loader).cpus,
        before,
        "{rt:?}: the pod keeps its CPU"
    );
}

each_cdi_runtime!(a_pod_resize_reaches_nri_align_where_the_runtime_sends_it);
