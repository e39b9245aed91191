//! Proves nri-align's GPU and RDMA NIC handling reaches running containers on every real
//! runtime (containerd 1.7, 2.1, CRI-O), on an emulated host with this machine's CPUs and
//! nodes plus two fake GPUs (fake NVML, /dev/nvidiaN nodes 195:N) and an RDMA NIC, seen in the
//! container's /dev, environment and runtime spec:
//! - a GPU the kubelet allocated (its PodResources API, served by the test kubelet) and named
//!   the device plugin's way (NVIDIA_VISIBLE_DEVICES) is given with its node, the control nodes
//!   that exist, CUDA_VISIBLE_DEVICES and an exclusive CPU on the GPU's node;
//! - a GPU already held is remapped to the free one, which is the only one the container sees;
//!   one that arrives as a device node cannot be taken away, so it is refused instead;
//! - the environment alone grants nothing (the pod sets it): `NVIDIA_VISIBLE_DEVICES=all` and
//!   `CUDA_VISIBLE_DEVICES=0` in a container the kubelet gave no GPU bring no device node;
//! - an RDMA NIC's verbs node is kept and rdma_cm added;
//! - GPUs stay held across a runtime restart: the restarted runtime's next container is
//!   aligned, and a GPU request is refused while both are held.
//! - with CDI on (a CDI spec for `nvidia.com/gpu` in the runtime's spec dir), a kubelet-shaped
//!   request of each CDI strategy of the NVIDIA device plugin (`cdi-annotations`, `cdi-cri`)
//!   gets the GPU's node from the runtime and an exclusive CPU and memory on the GPU's node
//!   from nri-align; a CDI device of another kind is injected, logged, and changes nothing.

use std::time::Duration;
use test_support::e2e;
use test_support::each_cdi_runtime;

use nix::sys::signal::Signal;
use test_support::e2e::kubelet::{
    Allocation, KubeContainer, KubePod, ListStrategy, Node, NvidiaDevice, NvidiaPlugin, Resources,
};
use test_support::e2e::suite::{burstable, guaranteed, Enforced};
use test_support::e2e::{align::cpuset_dir, ContainerSpec, PodSpec, Runtime, UpOptions};

fn gpus_are_given_remapped_or_refused(rt: Runtime) {
    // Remapping is opt-in (gpu_mode: keep is the default).
    let Some(e) = Enforced::builder(rt, "gpus", "e2e-gpu")
        .gpus(2)
        .config("gpu_mode: remap\n")
        .kubelet()
        .start()
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
    let Some(e) = Enforced::builder(rt, "rdma", "e2e-rdma").nics(1).start() else {
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
    // Remap, so that a third container the kubelet gives a held GPU is refused for want of a
    // free one (under the default `keep` it would share it, as time-sliced replicas do).
    let Some(mut e) = Enforced::builder(rt, "gpus_restart", "e2e-gpurestart")
        .gpus(2)
        .config("gpu_mode: remap\n")
        .kubelet()
        .start()
    else {
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

/// The CDI specs a GPU node has (as `nvidia-ctk cdi generate` writes them: each GPU by index and
/// by UUID, the control nodes in the spec-wide edits) for the emulated GPUs, plus one of another
/// vendor's kind, in the runtime's CDI spec dir.
fn write_cdi_specs(e: &Enforced) {
    let dir = e.rt.dir().join("cdi");
    let node = |path: &str| serde_json::json!({"path": path, "hostPath": e.host.dev(path).to_string_lossy()});
    let mut devices = Vec::new();
    for g in &e.host.gpus {
        let edits = serde_json::json!({"deviceNodes": [node(&format!("/dev/nvidia{}", g.minor))]});
        for name in [g.index.to_string(), g.uuid.clone()] {
            devices.push(serde_json::json!({"name": name, "containerEdits": edits}));
        }
    }
    let nvidia = serde_json::json!({
        "cdiVersion": "0.5.0",
        "kind": e2e::kubelet::devices::CDI_KIND,
        "devices": devices,
        "containerEdits": {"deviceNodes": [node("/dev/nvidiactl"), node("/dev/nvidia-uvm")]},
    });
    let fpga = serde_json::json!({
        "cdiVersion": "0.5.0",
        "kind": "vendor.com/fpga",
        "devices": [{"name": "x", "containerEdits": {
            "env": ["VENDOR_FPGA=x"],
            "deviceNodes": [{"path": "/dev/fpga-x", "hostPath": "/dev/null"}],
        }}],
    });
    for (file, spec) in [
        ("nvidia.com-gpu.json", nvidia),
        ("vendor.com-fpga.json", fpga),
    ] {
        std::fs::write(dir.join(file), spec.to_string()).expect("write CDI spec");
    }
}

/// nri-align's "gpus read" log line for container `name` of pod `pod`.
fn gpus_read(e: &Enforced, pod: &str, name: &str) -> String {
    let pod = format!("/{pod} container={name} ");
    let mut line = String::new();
    let found = e2e::wait_until(Duration::from_secs(5), || {
        let out = e.plugin.output();
        line = out
            .lines()
            .rev()
            .find(|l| l.contains("gpus read") && l.contains(&pod))
            .unwrap_or_default()
            .to_string();
        !line.is_empty()
    });
    assert!(found, "no \"gpus read\" for {pod}:\n{}", e.plugin.output());
    line
}

fn gpus_arrive_through_each_cdi_strategy(rt: Runtime) {
    let options = UpOptions {
        cdi: true,
        ..UpOptions::default()
    };
    // No PodResources socket: CDI is the first source nri-align has for these containers.
    let Some(e) = Enforced::builder(rt, "cdi", "e2e-cdi")
        .gpus(2)
        .options(options)
        .start()
    else {
        return;
    };
    write_cdi_specs(&e);
    let node = Node::for_instance(&e.rt).expect("node");
    let gpu_node = *e.host.machine.nodes.keys().next().expect("a node");
    let cri = e.rt.cri();
    let online = e.online();

    // Where nri-align reads the GPU from. Every runtime here hands NRI the CRI annotations
    // (containerd `criContainer.GetAnnotations`: spec and CRI config annotations; CRI-O: the
    // spec's, which carry the CRI ones), so `cdi.k8s.io/*` is read as CDI. Only containerd 2.3
    // fills NRI's `Container.CDI_devices` from the CRI field, so `cdi-cri` is read as CDI
    // there; containerd 1.7/2.1 (NRI v0.6.1/v0.8.0) and CRI-O 1.34 (NRI v0.10.0) do not set it,
    // and nri-align, which has no spec of these GPUs here, sees `cdi-cri` through what the
    // runtime injected before NRI's CreateContainer: the GPU's device node.
    let cri_source = if rt.sends_cdi_devices() {
        "cdi"
    } else {
        "device-nodes"
    };
    for (strategy, tag, g, source) in [
        (
            ListStrategy::CdiAnnotations,
            "annotations",
            &e.host.gpus[0],
            "cdi",
        ),
        (ListStrategy::CdiCri, "cri", &e.host.gpus[1], cri_source),
    ] {
        let dev = NvidiaDevice::Gpu {
            uuid: g.uuid.clone(),
            index: g.index,
            minor: g.minor,
            numa: Some(i64::from(gpu_node)),
        };
        let alloc = NvidiaPlugin::new()
            .strategies(&[strategy])
            .allocate(&[(&dev, None)]);
        let pod = KubePod::new("ml", &format!("cdi-{tag}")).container(
            KubeContainer::new("cuda")
                .resources(
                    Resources::none()
                        .both("cpu", "1")
                        .both("memory", "64Mi")
                        .both("nvidia.com/gpu", "1"),
                )
                .allocation(alloc),
        );
        let sandbox = e.rt.run_kube_pod(&pod, &node).expect("sandbox");
        let id =
            e.rt.create_kube_container(&sandbox, &pod, &node, "cuda", 0)
                .unwrap_or_else(|err| panic!("cdi-{tag}: {err}"));
        cri.ok(&["start", &id]).expect("start");
        let line = gpus_read(&e, &pod.name, "cuda");
        assert!(
            line.contains(&format!("source=\"{source}\""))
                || line.contains(&format!("source={source} ")),
            "cdi-{tag} on {}: want source {source}: {line}",
            rt.name()
        );
        // The runtime applied the CDI spec: the GPU's node and the control nodes.
        let live = e.live(&id);
        assert_eq!(
            live.devices,
            vec![format!("/dev/nvidia{}", g.minor)],
            "cdi-{tag}"
        );
        let in_dev = e.ls(&id, &["/dev"]);
        assert!(in_dev.iter().any(|d| d == "nvidiactl"), "{in_dev:?}");
        // nri-align: one exclusive CPU and the memory of the GPU's node, in the real cgroup.
        assert_eq!(live.cpus.len(), 1, "cdi-{tag}: {:?}", live.cpus);
        assert_eq!(e.host.machine.node_of(live.cpus[0]), Some(gpu_node));
        e.wait_cpus(&id, &live.cpus);
        assert_eq!(live.mems, gpu_node.to_string());
        let mems =
            std::fs::read_to_string(cpuset_dir(live.pid).expect("cpuset").join("cpuset.mems"))
                .expect("cpuset.mems");
        assert_eq!(mems.trim(), gpu_node.to_string(), "cdi-{tag}");
        let env = cri.env(&id).expect("env");
        assert_eq!(
            env.get("CUDA_VISIBLE_DEVICES").map(String::as_str),
            Some("0"),
            "cdi-{tag}: {env:?}"
        );
        assert_eq!(
            env.get("NVIDIA_VISIBLE_DEVICES"),
            Some(&g.uuid),
            "cdi-{tag}"
        );
        e.remove(&id);
        cri.remove_pod(&sandbox).expect("remove pod");
    }

    // Another vendor's CDI device: the runtime injects it, nri-align logs it and places the
    // container as if it had none (never refused, never narrowed to a GPU's node).
    let fpga = Allocation {
        resource: "vendor.com/fpga".into(),
        ids: vec!["x".into()],
        numa: vec![None],
        annotations: [(
            "cdi.k8s.io/fpga-plugin_1".to_string(),
            "vendor.com/fpga=x".to_string(),
        )]
        .into(),
        ..Allocation::default()
    };
    let pod = KubePod::new("ml", "fpga").container(
        KubeContainer::new("f")
            .resources(
                Resources::none()
                    .request("cpu", "250m")
                    .limit("cpu", "500m")
                    .both("vendor.com/fpga", "1"),
            )
            .allocation(fpga),
    );
    let sandbox = e.rt.run_kube_pod(&pod, &node).expect("sandbox");
    let id =
        e.rt.create_kube_container(&sandbox, &pod, &node, "f", 0)
            .unwrap_or_else(|err| panic!("fpga: {err}"));
    cri.ok(&["start", &id]).expect("start");
    let env = cri.env(&id).expect("env");
    assert_eq!(
        env.get("VENDOR_FPGA").map(String::as_str),
        Some("x"),
        "{env:?}"
    );
    assert!(e.ls(&id, &["/dev"]).iter().any(|d| d == "fpga-x"));
    e.wait_cpus(&id, &online);
    assert!(e.live(&id).devices.is_empty());
    assert!(
        e.plugin.wait_for_output(
            "vendor.com/fpga=x: CDI device of a kind nri-align does not align",
            Duration::from_secs(5)
        ),
        "{}",
        e.plugin.output()
    );
}

/// A time-sliced GPU (the NVIDIA device plugin's replicas `UUID::N`, its node passed as a
/// device spec) given to two pods: both run with it, nri-align neither removes nor denies the
/// node of a GPU it does not hand out, and `verify` finds both as decided.
fn a_time_sliced_gpu_reaches_both_pods_and_verifies(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "timesliced", "e2e-slice")
        .gpus(1)
        .kubelet()
        .start()
    else {
        return;
    };
    let k = e.kubelet.as_ref().expect("test kubelet");
    let gpu = &e.host.gpus[0];
    let path = format!("/dev/nvidia{}", gpu.minor);
    let host_path = e.host.dev(&path).to_string_lossy().into_owned();
    let mut ids = Vec::new();
    for (pod, replica) in [("slice-a", 0), ("slice-b", 1)] {
        let sandbox = e.rt.run_pod(&PodSpec::new(pod)).expect("pod");
        let id = format!("{}::{replica}", gpu.uuid);
        k.allocate("default", pod, "c", "nvidia.com/gpu", &[&id]);
        ids.push(
            e.run(
                &sandbox,
                &burstable("c")
                    .env("NVIDIA_VISIBLE_DEVICES", &gpu.uuid)
                    .device(&path, &host_path, "rwm"),
            ),
        );
    }
    for id in &ids {
        assert_eq!(e.live(id).devices, vec![path.clone()], "{id}");
    }
    e.assert_verified(&[&ids[0], &ids[1]]);
}

/// The kubelet never learns of a remap: it believes the GPU nri-align moved a pod onto free and
/// gives it to the next pod. When that pod's PodResources lookup fails (the kubelet is gone, so
/// lookups are off for a while), its GPU is known from its env alone, and the runtime hook would
/// give it the GPU beside the remapped pod: it is refused instead.
fn a_gpu_held_by_remap_is_refused_while_the_kubelet_cannot_be_asked(rt: Runtime) {
    let Some(mut e) = Enforced::builder(rt, "gpu_held_by_remap", "e2e-gpuheld")
        .gpus(2)
        .config("gpu_mode: remap\n")
        .kubelet()
        .start()
    else {
        return;
    };
    let (gpu0, gpu1) = (e.host.gpus[0].uuid.clone(), e.host.gpus[1].uuid.clone());
    let minor1 = e.host.gpus[1].minor;
    let k = e.kubelet.as_ref().expect("test kubelet");
    // A holds GPU 0; B is handed GPU 0 too (the device plugin's view lags): remapped to GPU 1.
    let apod = e.rt.run_pod(&PodSpec::new("gpu-a")).expect("pod");
    k.allocate("default", "gpu-a", "a", "nvidia.com/gpu", &[&gpu0]);
    e.run(
        &apod,
        &guaranteed("a", 1).env("NVIDIA_VISIBLE_DEVICES", &gpu0),
    );
    let bpod = e.rt.run_pod(&PodSpec::new("gpu-b")).expect("pod");
    k.allocate("default", "gpu-b", "b", "nvidia.com/gpu", &[&gpu0]);
    let b = e.run(
        &bpod,
        &ContainerSpec::new("b")
            .cpu_millis(500, None)
            .env("NVIDIA_VISIBLE_DEVICES", &gpu0),
    );
    assert_eq!(e.live(&b).devices, vec![format!("/dev/nvidia{minor1}")]);
    // The kubelet, believing GPU 1 free, gives it to C, and then cannot be asked.
    k.allocate("default", "gpu-c", "c", "nvidia.com/gpu", &[&gpu1]);
    e.kubelet.as_mut().expect("test kubelet").stop();
    let cpod = e.rt.run_pod(&PodSpec::new("gpu-c")).expect("pod");
    let msg = e.refused(
        &cpod,
        &ContainerSpec::new("c")
            .cpu_millis(500, None)
            .env("NVIDIA_VISIBLE_DEVICES", &gpu1),
    );
    assert!(
        msg.contains(&format!("is already held by container {b}")),
        "{msg}"
    );
    // B still has GPU 1 alone.
    assert_eq!(e.live(&b).devices, vec![format!("/dev/nvidia{minor1}")]);
}

each_cdi_runtime!(
    a_gpu_held_by_remap_is_refused_while_the_kubelet_cannot_be_asked,
    a_time_sliced_gpu_reaches_both_pods_and_verifies,
    gpus_arrive_through_each_cdi_strategy,
    gpus_are_given_remapped_or_refused,
    rdma_nic_keeps_its_verbs_node,
    gpus_stay_held_across_a_runtime_restart,
);
