//! Proves pods placed by a topology-aware scheduler run where it said, on every real runtime
//! (containerd 1.7, 2.1, CRI-O), with pods annotated as each scheduler annotates them (the JSON
//! shapes of koordinator `apis/extension/numa_aware.go` and `device_share.go`, gocrane/api
//! `topology/v1alpha1`), on an emulated host with this machine's CPUs and nodes and a fake GPU:
//! - with `trusted_schedulers` naming them, Koordinator's cpuset and GPU minor: the container
//!   runs on exactly that CPU, with the memory of its node, and its GPU (the device plugin's
//!   device node) is held, with its env;
//! - without trust (the default), a pod's own `device-allocated` annotation gets it no device
//!   node and no GPU env;
//! - another pod told the same CPU after a race is refused, naming the holder and what is free;
//! - a malformed placement is refused naming the key;
//! - Crane's `numa` zone gives the shared CPUs of the zone, and a zone too small for the
//!   exclusive CPUs asked is refused, naming who holds the rest.

use test_support::each_runtime;

use test_support::e2e::suite::{burstable, guaranteed, Enforced};
use test_support::e2e::{PodSpec, Runtime};

const KOORD_STATUS: &str = "scheduling.koordinator.sh/resource-status";
const KOORD_DEVICES: &str = "scheduling.koordinator.sh/device-allocated";
const CRANE_RESULT: &str = "topology.crane.io/topology-result";
const CRANE_POLICY: &str = "topology.crane.io/cpu-policy";

fn scheduler_annotated_pods_run_where_it_said(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "scheduler_choice", "e2e-sched")
        .gpus(1)
        .config("trusted_schedulers: [koordinator, crane]\n")
        .start()
    else {
        return;
    };
    let online = e.online();
    let last = *online.last().expect("a CPU");
    let node = e.host.machine.node_of(last).expect("node");
    let gpu = &e.host.gpus[0];

    // Koordinator: the last CPU (left to itself nri-align would start from the first) and
    // the GPU by minor.
    let status = format!(
        r#"{{"cpuset":"{last}","numaNodeResources":[{{"node":{node},"resources":{{"cpu":"1","memory":"64Mi"}}}}]}}"#
    );
    let devices = format!(
        r#"{{"gpu":[{{"minor":{},"resources":{{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory-ratio":"100"}}}}]}}"#,
        gpu.minor
    );
    let kpod =
        e.rt.run_pod(
            &PodSpec::new("k-lsr")
                .annotation(KOORD_STATUS, &status)
                .annotation(KOORD_DEVICES, &devices),
        )
        .expect("pod");
    // The device plugin's GPU, as the kubelet passes it: a device node of the CRI request.
    let gpu_node = format!("/dev/nvidia{}", gpu.minor);
    let k = e.run(
        &kpod,
        &guaranteed("main", 1).device(&gpu_node, &e.host.dev(&gpu_node).to_string_lossy(), "rwm"),
    );
    let live = e.live(&k);
    assert_eq!(live.cpus, vec![last], "{rt:?}");
    assert_eq!(live.mems, node.to_string());
    assert_eq!(live.devices, vec![format!("/dev/nvidia{}", gpu.minor)]);
    let env = e.rt.cri().env(&k).expect("env");
    assert_eq!(env.get("NVIDIA_VISIBLE_DEVICES"), Some(&gpu.uuid));

    // Another pod told the same CPU: refused, with who holds it.
    let late =
        e.rt.run_pod(
            &PodSpec::new("k-late").annotation(KOORD_STATUS, &format!(r#"{{"cpuset":"{last}"}}"#)),
        )
        .expect("pod");
    let msg = e.refused(&late, &guaranteed("main", 1));
    assert!(
        msg.contains(&format!(
            "nri-align: koordinator chose cpus {last} for default/k-late/main, but cpu {last} is held; free there: node {node}: "
        )),
        "{msg}"
    );
    assert!(
        msg.contains("held by default/k-lsr/main (container "),
        "{msg}"
    );

    // Malformed: refused naming the key, never placed elsewhere.
    let bad =
        e.rt.run_pod(&PodSpec::new("k-bad").annotation(KOORD_STATUS, r#"{"cpuset":"x"}"#))
            .expect("pod");
    let msg = e.refused(&bad, &guaranteed("main", 1));
    assert!(
        msg.contains("nri-align: invalid annotation scheduling.koordinator.sh/resource-status=")
            && msg.contains("cpuset: invalid id list \"x\""),
        "{msg}"
    );

    // Crane: the zone's shared CPUs; then a zone too small for what is asked.
    let zone = format!(r#"[{{"name":"node{node}","type":"Node"}}]"#);
    let cpod =
        e.rt.run_pod(
            &PodSpec::new("c-numa")
                .annotation(CRANE_RESULT, &zone)
                .annotation(CRANE_POLICY, "numa"),
        )
        .expect("pod");
    let c = e.run(&cpod, &burstable("main"));
    let rest: Vec<u32> = e
        .host
        .machine
        .cpus
        .iter()
        .copied()
        .filter(|x| *x != last && e.host.machine.node_of(*x) == Some(node))
        .collect();
    e.wait_cpus(&c, &rest);
    assert_eq!(e.live(&c).mems, node.to_string());
    let big =
        e.rt.run_pod(&PodSpec::new("c-big").annotation(CRANE_RESULT, &zone))
            .expect("pod");
    let asked = rest.len() + 1;
    let msg = e.refused(&big, &guaranteed("main", asked as i64));
    assert!(
        msg.contains(&format!(
            "nri-align: crane chose NUMA node {node} for default/c-big/main, but {asked} exclusive CPUs are asked and {} are free there",
            rest.len()
        )),
        "{msg}"
    );
    assert!(msg.contains("held by default/k-lsr/main"), "{msg}");
}

each_runtime!(scheduler_annotated_pods_run_where_it_said);

fn a_pods_own_annotation_grants_no_device(rt: Runtime) {
    // The default configuration: no scheduler trusted.
    let Some(e) = Enforced::builder(rt, "scheduler_untrusted", "e2e-untrust")
        .gpus(1)
        .start()
    else {
        return;
    };
    let gpu = &e.host.gpus[0];
    let devices = format!(r#"{{"gpu":[{{"minor":{}}}]}}"#, gpu.minor);
    let pod =
        e.rt.run_pod(&PodSpec::new("self-granted").annotation(KOORD_DEVICES, &devices))
            .expect("pod");
    let c = e.run(&pod, &burstable("main"));
    assert!(
        e.live(&c).devices.is_empty(),
        "{rt:?}: {:?}",
        e.live(&c).devices
    );
    let env = e.rt.cri().env(&c).expect("env");
    assert_eq!(env.get("NVIDIA_VISIBLE_DEVICES"), None, "{rt:?}");
    assert_eq!(env.get("CUDA_VISIBLE_DEVICES"), None, "{rt:?}");
}

each_runtime!(a_pods_own_annotation_grants_no_device);
