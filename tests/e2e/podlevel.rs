//! Pod budgets (`pod_budgets`) through each runtime here: a pod whose sandbox carries
//! pod-level resources Guaranteed in whole CPUs gets them as its own pool, which no other
//! pod's container runs on, and gives them back with its last container. The test host has 2
//! CPUs: the budget is 1, the node's shared pool the other.
//!
//! Every runtime here passes the sandbox's `linux.resources` to NRI as
//! `PodSandbox.linux.pod_resources`: containerd 1.7.24 (NRI v0.6.1), 2.1.9 (v0.8), 2.3.2 and
//! CRI-O 1.34.11 (v0.10.0).

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
    let Some(e) = Enforced::start(rt, "podlevel", "e2e-podl", 0, 0, "pod_budgets: true\n") else {
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
    let rest: Vec<u32> = online.iter().copied().filter(|c| !mine.contains(c)).collect();
    e.wait_cpus(&web, &rest);
    e.assert_verified(&[&loader, &web]);
    // The pod's last container goes: its CPU is the node's again (with the next response).
    e.remove(&loader);
    e.next_event(&other, "nudge");
    e.wait_cpus(&web, &online);
}

each_cdi_runtime!(pod_level_resources_give_the_pod_its_own_cpus);
