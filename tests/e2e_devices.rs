//! Proves nri-align's GPU and RDMA NIC handling reaches running containers on every real
//! runtime (containerd 1.7, 2.1, CRI-O), on an emulated host with this machine's CPUs and
//! nodes plus two fake GPUs (fake NVML, /dev/nvidiaN nodes 195:N) and an RDMA NIC, seen in the
//! container's /dev, environment and runtime spec:
//! - a GPU the kubelet allocated (its PodResources API, served by the test kubelet) and named
//!   the device plugin's way (NVIDIA_VISIBLE_DEVICES) is given with its node, the control nodes
//!   that exist, CUDA_VISIBLE_DEVICES and an exclusive CPU on the GPU's node;
//! - a GPU already held is remapped to the free one, which is the only one the container sees;
//!   one that arrives as a device node cannot be taken away, so it is refused instead;
//! - the environment alone grants nothing (issue 18): `NVIDIA_VISIBLE_DEVICES=all` and
//!   `CUDA_VISIBLE_DEVICES=0` in a container the kubelet gave no GPU bring no device node;
//! - an RDMA NIC's verbs node is kept and rdma_cm added;
//! - GPUs stay held across a runtime restart: the restarted runtime's next container is
//!   aligned, and a GPU request is refused while both are held.

mod common;

use std::time::Duration;

use common::suite::{burstable, guaranteed, Enforced};
use common::{ContainerSpec, PodSpec, Runtime, UpOptions};
use nix::sys::signal::Signal;

fn gpus_are_given_remapped_or_refused(rt: Runtime) {
    let Some(e) = Enforced::with_kubelet(rt, "gpus", "e2e-gpu", (2, 0), "", UpOptions::default())
    else {
        return;
    };
    let k = e.kubelet.as_ref().expect("test kubelet");
    let (gpu0, gpu1) = (&e.host.gpus[0], &e.host.gpus[1]);
    let online = e.online();
    let cri = e.rt.cri();

    // GPU named through NVIDIA_VISIBLE_DEVICES: its node, the control nodes that exist
    // (nvidia-uvm-tools does not), env, one exclusive CPU on the GPU's node.
    let gpod = e.rt.run_pod(&PodSpec::new("gpu-a")).expect("pod");
    k.allocate("default", "gpu-a", "g1", "nvidia.com/gpu", &[&gpu0.uuid]);
    let g1 = e.run(
        &gpod,
        &guaranteed("g1", 1).env("NVIDIA_VISIBLE_DEVICES", &gpu0.uuid),
    );
    let l1 = e.live(&g1);
    assert_eq!(l1.devices, vec![format!("/dev/nvidia{}", gpu0.minor)]);
    assert_eq!(l1.cpus.len(), 1);
    let node = e.host.machine.node_of(l1.cpus[0]).expect("node");
    assert_eq!(l1.mems, node.to_string());
    let dev = e.ls(&g1, &["/dev"]);
    for present in ["nvidiactl", "nvidia-uvm"] {
        assert!(
            dev.iter().any(|d| d == present),
            "{present} missing: {dev:?}"
        );
    }
    assert!(
        !dev.iter()
            .any(|d| d == "nvidia-uvm-tools" || d == "nvidia1"),
        "{dev:?}"
    );
    let env = cri.env(&g1).expect("env");
    assert_eq!(
        env.get("CUDA_VISIBLE_DEVICES").map(String::as_str),
        Some("0")
    );
    assert_eq!(env.get("NVIDIA_VISIBLE_DEVICES"), Some(&gpu0.uuid));
    let rest: Vec<u32> = online
        .iter()
        .copied()
        .filter(|c| !l1.cpus.contains(c))
        .collect();

    // A second pod is handed the same GPU by a device plugin that knows nothing of nri-align:
    // remapped to the free GPU, which is the only one it sees.
    let gpod2 = e.rt.run_pod(&PodSpec::new("gpu-b")).expect("pod");
    k.allocate("default", "gpu-b", "g2", "nvidia.com/gpu", &[&gpu0.uuid]);
    let g2 = e.run(
        &gpod2,
        &ContainerSpec::new("g2")
            .cpu_millis(500, None)
            .env("NVIDIA_VISIBLE_DEVICES", &gpu0.uuid),
    );
    let l2 = e.live(&g2);
    assert_eq!(l2.devices, vec![format!("/dev/nvidia{}", gpu1.minor)]);
    assert_eq!(l2.cpus, rest, "a shared GPU container stays in the pool");
    let env = cri.env(&g2).expect("env");
    assert_eq!(
        env.get("CUDA_VISIBLE_DEVICES").map(String::as_str),
        Some("0")
    );
    assert_eq!(env.get("NVIDIA_VISIBLE_DEVICES"), Some(&gpu1.uuid));
    let spec = cri.inspect(&g2).expect("inspect");
    let devs = spec["info"]["runtimeSpec"]["linux"]["devices"].to_string();
    assert!(
        devs.contains(&format!("/dev/nvidia{}", gpu1.minor)),
        "{devs}"
    );
    assert!(
        !devs.contains(&format!("\"/dev/nvidia{}\"", gpu0.minor)),
        "{devs}"
    );

    // A GPU that arrives as a device node cannot be taken away (the runtime would not remove
    // it), so one held by another container is refused instead of shared.
    let gpod3 = e.rt.run_pod(&PodSpec::new("gpu-c")).expect("pod");
    let node1 = format!("/dev/nvidia{}", gpu1.minor);
    let msg = e.refused(
        &gpod3,
        &ContainerSpec::new("g3").cpu_millis(500, None).device(
            &node1,
            &e.host.dev(&node1).to_string_lossy(),
            "rwm",
        ),
    );
    assert!(
        msg.contains(&format!("is already held by container {g2}")),
        "{msg}"
    );

    // The environment alone grants nothing: a CUDA base image's `all` and a user's
    // CUDA_VISIBLE_DEVICES in a container the kubelet lists without devices.
    let gpod4 = e.rt.run_pod(&PodSpec::new("cuda-base")).expect("pod");
    k.allocate("default", "cuda-base", "c", "nvidia.com/gpu", &[]);
    let c = e.run(
        &gpod4,
        &burstable("c")
            .env("NVIDIA_VISIBLE_DEVICES", "all")
            .env("CUDA_VISIBLE_DEVICES", "0"),
    );
    assert!(e.live(&c).devices.is_empty(), "{:?}", e.live(&c).devices);
    let dev = e.ls(&c, &["/dev"]);
    assert!(!dev.iter().any(|d| d.starts_with("nvidia")), "{dev:?}");
    let env = cri.env(&c).expect("env");
    assert_eq!(
        env.get("NVIDIA_VISIBLE_DEVICES").map(String::as_str),
        Some("none")
    );
    // TensorFlow's way of hiding GPUs is no allocation either: admitted, nothing added.
    let t = e.run(&gpod4, &burstable("tf").env("CUDA_VISIBLE_DEVICES", "-1"));
    assert!(e.live(&t).devices.is_empty());
}

fn rdma_nic_keeps_its_verbs_node(rt: Runtime) {
    let Some(e) = Enforced::start(rt, "rdma", "e2e-rdma", 0, 1, "") else {
        return;
    };
    let rpod = e.rt.run_pod(&PodSpec::new("rdma")).expect("pod");
    let uverbs = format!("/dev/infiniband/{}", e.host.uverbs[0]);
    let r1 = e.run(
        &rpod,
        &burstable("r1").device(&uverbs, &e.host.dev(&uverbs).to_string_lossy(), "rwm"),
    );
    assert_eq!(e.live(&r1).devices, vec![uverbs.clone()]);
    let ib = e.ls(&r1, &["/dev/infiniband"]);
    assert!(ib.iter().any(|d| d == "rdma_cm"), "{ib:?}");
    let env = e.rt.cri().env(&r1).expect("env");
    assert!(
        env.get("NRI_ALIGN_DECISION")
            .is_some_and(|d| d.contains("nics=ibemu0")),
        "{env:?}"
    );
}

fn gpus_stay_held_across_a_runtime_restart(rt: Runtime) {
    let Some(mut e) = Enforced::with_kubelet(
        rt,
        "gpus_restart",
        "e2e-gpurestart",
        (2, 0),
        "",
        UpOptions::default(),
    ) else {
        return;
    };
    let (gpu0, gpu1) = (&e.host.gpus[0].clone(), &e.host.gpus[1].clone());
    let online = e.online();
    let gpod = e.rt.run_pod(&PodSpec::new("gpu")).expect("pod");
    if let Some(k) = &e.kubelet {
        k.allocate("default", "gpu", "g1", "nvidia.com/gpu", &[&gpu0.uuid]);
        k.allocate("default", "gpu", "g2", "nvidia.com/gpu", &[&gpu1.uuid]);
        k.allocate("default", "gpu", "g4", "nvidia.com/gpu", &[&gpu1.uuid]);
    }
    let g1 = e.run(
        &gpod,
        &guaranteed("g1", 1).env("NVIDIA_VISIBLE_DEVICES", &gpu0.uuid),
    );
    let g2 = e.run(
        &gpod,
        &burstable("g2").env("NVIDIA_VISIBLE_DEVICES", &gpu1.uuid),
    );
    let g1_cpus = e.live(&g1).cpus;
    let rest: Vec<u32> = online
        .iter()
        .copied()
        .filter(|c| !g1_cpus.contains(c))
        .collect();

    e.rt.kill(Signal::SIGKILL).expect("kill the runtime");
    e.rt.start().expect("the runtime comes back");
    e.plugin
        .wait_registrations(2, Duration::from_secs(20))
        .expect("re-registers");
    // Both keep their GPU and CPUs; the next container is aligned on what the state kept.
    assert_eq!(
        e.live(&g1).devices,
        vec![format!("/dev/nvidia{}", gpu0.minor)]
    );
    assert_eq!(
        e.live(&g2).devices,
        vec![format!("/dev/nvidia{}", gpu1.minor)]
    );
    e.wait_cpus(&g1, &g1_cpus);
    let next = e.run(&gpod, &burstable("next"));
    e.wait_cpus(&next, &rest);
    assert!(e
        .rt
        .cri()
        .env(&next)
        .expect("env")
        .contains_key("NRI_ALIGN_DECISION"));
    let msg = e.refused(
        &gpod,
        &burstable("g4").env("NVIDIA_VISIBLE_DEVICES", &gpu1.uuid),
    );
    assert!(
        msg.contains("not enough free gpu"),
        "both GPUs still held: {msg}"
    );
}

each_runtime!(
    gpus_are_given_remapped_or_refused,
    rdma_nic_keeps_its_verbs_node,
    gpus_stay_held_across_a_runtime_restart,
);
