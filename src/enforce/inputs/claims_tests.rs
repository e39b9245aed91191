use super::*;
use crate::enforce::container::{KubeletDevices, PodView};
use crate::enforce::inputs::build;
use crate::enforce::inputs::tests::{gpu_topology, node};
use crate::host::cdi::CdiDevice;

const BUS0: &str = "0000:1b:00.0";
const BUS1: &str = "0000:3b:00.0";

fn claims(c: &ContainerView) -> DeviceClaims {
    build(&gpu_topology(), &PodView::default(), c, false)
        .expect("readable")
        .devices
}

fn device(name: &str, target: CdiTarget) -> CdiDevice {
    CdiDevice {
        name: name.into(),
        spec: "/var/run/cdi/x.yaml".into(),
        targets: vec![target],
        unmapped: Vec::new(),
        net_devices: Vec::new(),
        env: Vec::new(),
        mounts: Vec::new(),
        nodes: Vec::new(),
    }
}

fn kubelet(ids: &[&str]) -> Option<Vec<KubeletDevices>> {
    Some(vec![KubeletDevices {
        resource: "nvidia.com/gpu".into(),
        ids: ids.iter().map(|s| s.to_string()).collect(),
    }])
}

#[test]
fn each_gpu_carries_its_source_authority_and_share() {
    let c = ContainerView {
        kubelet_devices: kubelet(&["GPU-1aaa", "GPU-0aaa::2"]),
        env: vec!["NVIDIA_VISIBLE_DEVICES=GPU-1aaa".into()],
        ..Default::default()
    };
    let d = claims(&c);
    assert_eq!(d.source, Some(GpuSource::Kubelet));
    let gpus: Vec<(&str, bool, bool)> = d
        .gpus
        .iter()
        .map(|g| (g.bus_id.as_str(), g.authoritative, g.shared))
        .collect();
    assert_eq!(gpus, [(BUS1, true, false), (BUS0, true, true)]);
    assert_eq!(
        (d.held_gpus(), d.shared_gpus()),
        (vec![BUS1.to_string()], vec![BUS0.to_string()])
    );
    // The kubelet named them and only the env hands them over: a remap may move them.
    assert!(d.spec.gpus_only_by_env && d.remappable && !d.has_spec_nodes());
    assert!(d.spec.env_names_gpus && !d.spec.env_allocated_mig);
    // Named only by the env: shared, not authoritative, never remappable.
    let c = ContainerView {
        env: vec!["NVIDIA_VISIBLE_DEVICES=1".into()],
        ..Default::default()
    };
    let d = claims(&c);
    assert_eq!(d.source, Some(GpuSource::Env));
    assert!(d.gpus.iter().all(|g| g.shared && !g.authoritative), "{d:?}");
    assert!(!d.remappable);
}

#[test]
fn a_gpu_and_a_nic_of_a_dra_claim_name_their_cdi_name_and_claim() {
    let gpu = "k8s.gpu.nvidia.com/claim=u1-gpu-1";
    let nic = "example.com/nic=rdma";
    let c = ContainerView {
        kubelet_claims: vec![crate::enforce::container::KubeletClaimDevice {
            claim: "ns/gpus".into(),
            driver: "gpu.nvidia.com".into(),
            pool: "node".into(),
            device: "gpu-1".into(),
            cdi_names: vec![gpu.into()],
        }],
        cdi_devices: vec![nic.into()],
        cdi_resolved: vec![
            device(gpu, CdiTarget::NvidiaGpu { minor: 1 }),
            device(
                nic,
                CdiTarget::Uverbs {
                    name: "uverbs0".into(),
                    pci: None,
                },
            ),
        ],
        ..Default::default()
    };
    let d = claims(&c);
    assert_eq!(d.gpus.len(), 1);
    let g = &d.gpus[0];
    assert_eq!(
        (
            g.bus_id.as_str(),
            g.source,
            g.cdi_name.as_deref(),
            g.dra_claim.as_deref()
        ),
        (BUS1, GpuSource::Cdi, Some(gpu), Some("ns/gpus"))
    );
    let n = &d.nics[0];
    assert_eq!(
        (
            n.name.as_str(),
            n.source,
            n.cdi_name.as_deref(),
            n.dra_claim.as_deref()
        ),
        ("ib0", GpuSource::Cdi, Some(nic), None)
    );
    assert_eq!(d.spec.cdi_names, [gpu, nic]);
    assert_eq!(d.spec.dra_claims.len(), 1);
    assert!(!d.spec.gpus_only_by_env && !d.remappable);
}

#[test]
fn spec_nodes_are_the_gpu_and_rdma_nodes_only() {
    let c = ContainerView {
        devices: vec![
            node("/dev/nvidia1", 195, 1),
            node("/dev/nvidiactl", 195, 255),
            node("/dev/nvidia-caps/nvidia-cap1", 235, 1),
            node("/dev/infiniband/uverbs0", 231, 192),
            node("/dev/infiniband/rdma_cm", 10, 58),
        ],
        ..Default::default()
    };
    let d = claims(&c);
    assert_eq!(
        d.spec.node_paths(),
        ["/dev/nvidia1", "/dev/infiniband/uverbs0"]
    );
    assert_eq!(d.nics[0].source, GpuSource::DeviceNodes);
    assert_eq!(d.source, Some(GpuSource::DeviceNodes));
    // A spec of control and capability nodes gives no GPU node, but a GPU may still reach
    // the container through them (a MIG device): not by env alone.
    let c = ContainerView {
        devices: vec![node("/dev/nvidia-caps/nvidia-cap1", 235, 1)],
        ..Default::default()
    };
    let spec = SpecDevices::read(&c);
    assert!(spec.nodes.is_empty() && !spec.gpus_only_by_env);
}

#[test]
fn an_env_of_allocated_mig_devices_is_the_device_plugins() {
    let mig = "MIG-5c1a7d4e-0000-4000-8000-000000000001";
    let with_env = |kubelet_ids: &[&str]| ContainerView {
        kubelet_devices: kubelet(kubelet_ids),
        env: vec![format!("NVIDIA_VISIBLE_DEVICES={mig}")],
        ..Default::default()
    };
    assert!(SpecDevices::read(&with_env(&[mig])).env_allocated_mig);
    // A MIG device no authoritative source names is the pod's own word.
    assert!(!SpecDevices::read(&with_env(&["GPU-0aaa"])).env_allocated_mig);
    // Through a CDI name of the spec.
    let c = ContainerView {
        cdi_devices: vec![format!("nvidia.com/mig={mig}")],
        env: vec![format!("NVIDIA_VISIBLE_DEVICES={mig}")],
        ..Default::default()
    };
    assert!(SpecDevices::read(&c).env_allocated_mig);
    for v in ["", "void", "none"] {
        let c = ContainerView {
            env: vec![format!("NVIDIA_VISIBLE_DEVICES={v}")],
            ..Default::default()
        };
        assert!(!SpecDevices::read(&c).env_names_gpus, "{v:?}");
    }
}
