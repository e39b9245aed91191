//! MIG devices on a real runtime (containerd 2.1, runc, real cgroups), with kubelet-shaped
//! requests (`crates/test-support/src/e2e/kubelet.rs`) and the test kubelet's PodResources answer, on an
//! emulated host whose GPU 1 has MIG mode on with two `3g.40gb` devices the fake NVML lists
//! (through nvml-wrapper, as on a real node):
//! - each pod the NVIDIA device plugin (`mig-strategy=mixed`, envvar strategy) gave one MIG
//!   device by its `MIG-<uuid>` is accepted and placed on its parent GPU's NUMA node, both
//!   slices of the one GPU at once (shared use, never a conflict);
//! - each keeps exactly its MIG device: `NVIDIA_VISIBLE_DEVICES` stays its `MIG-<uuid>`, no
//!   device node of the parent is added, and the record names the parent as a shared GPU;
//! - a MIG device NVML does not list (reconfigured since start-up) is admitted on the shared
//!   pool, not refused.
//!
//! One runtime only: what is tested is the request's resolution, which is the same for every
//! runtime (e2e_devices covers the GPU paths per runtime).

use test_support::e2e::kubelet::{
    KubeContainer, KubePod, Node, NvidiaDevice, NvidiaPlugin, Resources,
};
use test_support::e2e::suite::Enforced;
use test_support::e2e::Runtime;

/// `00000000:1B:00.0` (NVML) -> `0000:1b:00.0` (what records hold).
fn sysfs_bus_id(nvml: &str) -> String {
    let lower = nvml.to_ascii_lowercase();
    match lower.rsplitn(3, ':').collect::<Vec<_>>().as_slice() {
        [devfn, bus, domain] => {
            let short = &domain[domain.len().saturating_sub(4)..];
            format!("{short}:{bus}:{devfn}")
        }
        _ => lower.clone(),
    }
}

/// A pod of one app container given `dev` by the device plugin as resource `resource`, with
/// `cpu` (request = limit) and 256Mi.
fn mig_pod(name: &str, resource: &str, dev: &NvidiaDevice, cpu: &str) -> KubePod {
    let mut plugin = NvidiaPlugin::new();
    plugin.resource = resource.into();
    let alloc = plugin.allocate(&[(dev, None)]);
    KubePod::new("ml", name).container(
        KubeContainer::new("cuda")
            .resources(
                Resources::none()
                    .both("cpu", cpu)
                    .both("memory", "256Mi")
                    .both(resource, "1"),
            )
            .allocation(alloc),
    )
}

#[test]
fn mig_devices_align_to_their_parent_gpu_and_keep_their_id() {
    let rt = Runtime::CONTAINERD_2_1;
    let Some(e) = Enforced::builder(
        rt,
        "mig_devices_align_to_their_parent_gpu_and_keep_their_id",
        "e2e-mig",
    )
    .gpus(2)
    .kubelet()
    .mig(&[(1, &["3g.40gb", "3g.40gb"])])
    .start() else {
        return;
    };
    let k = e.kubelet.as_ref().expect("test kubelet");
    let node = Node::for_instance(&e.rt).expect("node");
    let parent = &e.host.gpus[1];
    assert_eq!(parent.mig.len(), 2, "the fixture lists both MIG devices");
    assert!(e.host.gpus[0].mig.is_empty());
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&e.host.nvml_fixture).expect("nvml.json"))
            .expect("json");
    let parent_bus = sysfs_bus_id(fixture["gpus"][1]["pci_bus_id"].as_str().expect("bus id"));
    // The emulated GPUs sit on the first node (see crates/test-support/src/e2e/host.rs).
    let gpu_node = *e.host.machine.nodes.keys().next().expect("a node");
    let resource = "nvidia.com/mig-3g.40gb";

    let mut ids = Vec::new();
    for (slot, uuid) in parent.mig.iter().enumerate() {
        let dev = NvidiaDevice::Mig {
            uuid: uuid.clone(),
            index: (parent.index, slot as u32),
            parent_minor: parent.minor,
            caps: (12 + 2 * slot as u32, 13 + 2 * slot as u32),
            numa: Some(i64::from(gpu_node)),
        };
        // Not whole CPUs: a shared-pool container, aligned to the GPU's node.
        let pod = mig_pod(&format!("slice-{slot}"), resource, &dev, "500m");
        k.report(pod.pod_resources());
        let sandbox = e.rt.run_kube_pod(&pod, &node).expect("sandbox");
        let id =
            e.rt.create_kube_container(&sandbox, &pod, &node, "cuda", 0)
                .unwrap_or_else(|err| panic!("slice {slot} refused: {err}"));
        e.rt.cri().ok(&["start", &id]).expect("start");
        let live = e.live(&id);
        assert_eq!(live.mems, gpu_node.to_string(), "slice {slot}");
        for c in &live.cpus {
            assert_eq!(
                e.host.machine.node_of(*c),
                Some(gpu_node),
                "slice {slot}: cpu {c}"
            );
        }
        assert!(
            live.devices.is_empty(),
            "slice {slot}: nri-align adds no node of the parent: {:?}",
            live.devices
        );
        let env = e.rt.cri().env(&id).expect("env");
        assert_eq!(
            env.get("NVIDIA_VISIBLE_DEVICES"),
            Some(uuid),
            "slice {slot}: the container keeps exactly its MIG device"
        );
        assert!(!env.contains_key("CUDA_VISIBLE_DEVICES"), "{env:?}");
        ids.push(id);
    }
    let state = e.run.state().expect("state");
    for id in &ids {
        let a = &state[id]["assignment"];
        assert_eq!(a["gpus"].as_array().map(Vec::len).unwrap_or(0), 0, "{a}");
        assert_eq!(
            a["shared_gpus"][0].as_str(),
            Some(parent_bus.as_str()),
            "{a}"
        );
    }

    // A MIG device NVML does not list: admitted, on the shared pool.
    let stale = NvidiaDevice::Mig {
        uuid: "MIG-00000000-dead-4000-8000-000000000000".into(),
        index: (parent.index, 5),
        parent_minor: parent.minor,
        caps: (30, 31),
        numa: None,
    };
    let pod = mig_pod("stale", "nvidia.com/mig-1g.10gb", &stale, "500m");
    k.report(pod.pod_resources());
    let sandbox = e.rt.run_kube_pod(&pod, &node).expect("sandbox");
    let id =
        e.rt.create_kube_container(&sandbox, &pod, &node, "cuda", 0)
            .unwrap_or_else(|err| panic!("an unknown MIG device is never refused: {err}"));
    e.rt.cri().ok(&["start", &id]).expect("start");
    let env = e.rt.cri().env(&id).expect("env");
    assert_eq!(
        env.get("NVIDIA_VISIBLE_DEVICES").map(String::as_str),
        Some("MIG-00000000-dead-4000-8000-000000000000")
    );
    let state = e.run.state().expect("state");
    let a = &state[&id]["assignment"];
    assert_eq!(
        a["shared_gpus"].as_array().map(Vec::len).unwrap_or(0),
        0,
        "{a}"
    );
}
