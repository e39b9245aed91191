use super::*;
use crate::enforce::inputs::tests::{gpu_topology, node};
use std::collections::HashMap;

struct FakeDevs(HashMap<&'static str, DeviceNode>);
impl DeviceLookup for FakeDevs {
    fn lookup(&self, path: &str) -> Option<DeviceNode> {
        self.0.get(path).cloned()
    }
}

fn host() -> FakeDevs {
    FakeDevs(HashMap::from([
        ("/dev/nvidia0", node("/dev/nvidia0", 195, 0)),
        ("/dev/nvidia1", node("/dev/nvidia1", 195, 1)),
        ("/dev/nvidiactl", node("/dev/nvidiactl", 195, 255)),
        ("/dev/nvidia-uvm", node("/dev/nvidia-uvm", 510, 0)),
        (
            "/dev/infiniband/uverbs0",
            node("/dev/infiniband/uverbs0", 231, 192),
        ),
        (
            "/dev/infiniband/rdma_cm",
            node("/dev/infiniband/rdma_cm", 10, 58),
        ),
    ]))
}

/// [`super::build_adjustment`] with the device claims `inputs` reads from `c`, as the engine
/// passes them.
fn build_adjustment(
    a: &Assignment,
    topo: &Topology,
    c: &ContainerView,
    devs: &dyn DeviceLookup,
) -> Result<Adjustment, AdjustError> {
    let pod = crate::enforce::container::PodView::default();
    let built = crate::enforce::inputs::build(topo, &pod, c, false).expect("readable devices");
    super::build_adjustment(a, topo, c, &built.devices, devs)
}

fn decision(gpus: &[&str], nics: &[&str]) -> Assignment {
    Assignment {
        container_id: "c".into(),
        cpus: "2-3".parse().expect("set"),
        exclusive: true,
        mems: "0".parse().expect("set"),
        numa_nodes: "0".parse().expect("set"),
        gpus: gpus.iter().map(|s| s.to_string()).collect(),
        nics: nics.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

#[test]
fn remapped_gpu_is_swapped_with_control_nodes_rules_and_env() {
    // The device plugin gave GPU 0; placement chose GPU 1 (same count).
    let c = ContainerView {
        devices: vec![
            node("/dev/nvidia0", 195, 0),
            node("/dev/nvidiactl", 195, 255),
        ],
        ..Default::default()
    };
    let adj = build_adjustment(
        &decision(&["0000:3b:00.0"], &[]),
        &gpu_topology(),
        &c,
        &host(),
    )
    .expect("ok");
    assert_eq!(
        (
            adj.cpuset_cpus.to_string().as_str(),
            adj.cpuset_mems.to_string().as_str()
        ),
        ("2-3", "0")
    );
    let added: Vec<_> = adj.add_devices.iter().map(|d| d.path.as_str()).collect();
    // nvidiactl is already in the spec; nvidia-uvm-tools is absent on the host.
    assert_eq!(added, vec!["/dev/nvidia1", "/dev/nvidia-uvm"]);
    assert_eq!(adj.remove_devices, vec!["/dev/nvidia0"]);
    let allowed: Vec<_> = adj
        .device_rules
        .iter()
        .filter(|r| r.allow)
        .map(|r| (r.major, r.minor))
        .collect();
    assert_eq!(
        allowed,
        vec![
            (Some(195), Some(1)),
            (Some(195), Some(255)),
            (Some(510), Some(0))
        ]
    );
    assert!(adj
        .device_rules
        .iter()
        .any(|r| !r.allow && r.major == Some(195) && r.minor == Some(0)));
    assert_eq!(adj.env["CUDA_VISIBLE_DEVICES"], "0");
    assert_eq!(adj.env["NVIDIA_VISIBLE_DEVICES"], "GPU-1aaa");
    assert!(adj.annotations[DECISION_KEY].contains("gpus=0000:3b:00.0"));
    assert_eq!(adj.env[DECISION_ENV], adj.annotations[DECISION_KEY]);
}

#[test]
fn two_gpus_and_a_nic_are_numbered_from_zero_inside() {
    let a = decision(&["0000:3b:00.0", "0000:1b:00.0"], &["ib0"]);
    let adj =
        build_adjustment(&a, &gpu_topology(), &ContainerView::default(), &host()).expect("ok");
    assert_eq!(adj.env["CUDA_VISIBLE_DEVICES"], "0,1");
    assert_eq!(adj.env["NVIDIA_VISIBLE_DEVICES"], "GPU-0aaa,GPU-1aaa");
    let added: Vec<_> = adj.add_devices.iter().map(|d| d.path.as_str()).collect();
    assert!(added.contains(&"/dev/infiniband/uverbs0") && added.contains(&RDMA_CM));
    assert!(adj.remove_devices.is_empty());
}

#[test]
fn a_shared_gpu_given_as_a_node_stays_and_is_recorded_as_seen() {
    // GPU 0 (/dev/nvidia0) is held by another container and used shared here (a
    // time-sliced replica, a MIG parent); GPU 1 arrived too and was not chosen.
    let c = ContainerView {
        devices: vec![node("/dev/nvidia0", 195, 0), node("/dev/nvidia1", 195, 1)],
        ..Default::default()
    };
    let a = Assignment {
        shared_gpus: vec!["0000:1b:00.0".into()],
        ..decision(&[], &[])
    };
    let adj = build_adjustment(&a, &gpu_topology(), &c, &host()).expect("ok");
    assert_eq!(adj.remove_devices, vec!["/dev/nvidia1"]);
    assert!(
        !adj.device_rules.iter().any(|r| r.minor == Some(0)),
        "{:?}",
        adj.device_rules
    );
    assert_eq!(adj.visible_devices, vec!["/dev/nvidia0"]);
    // Named only by the env (no node in the spec): nothing to keep, nothing seen.
    let adj =
        build_adjustment(&a, &gpu_topology(), &ContainerView::default(), &host()).expect("ok");
    assert!(adj.visible_devices.is_empty() && adj.remove_devices.is_empty());
}

#[test]
fn cpu_only_decision_touches_no_devices_and_missing_nodes_fail() {
    let adj = build_adjustment(
        &decision(&[], &[]),
        &gpu_topology(),
        &ContainerView::default(),
        &host(),
    )
    .expect("ok");
    assert!(adj.add_devices.is_empty() && adj.device_rules.is_empty());
    assert!(!adj.env.contains_key("CUDA_VISIBLE_DEVICES"));
    let empty = FakeDevs(HashMap::new());
    let err = build_adjustment(
        &decision(&["0000:1b:00.0"], &[]),
        &gpu_topology(),
        &ContainerView::default(),
        &empty,
    )
    .expect_err("missing");
    assert_eq!(err, AdjustError::MissingNode("/dev/nvidia0".into()));
}

#[test]
fn the_device_map_goes_in_the_env_and_the_record() {
    use crate::placement::device_map::{DeviceMap, GpuShare, NicShare};
    let mut a = decision(&["0000:1b:00.0", "0000:3b:00.0"], &["ib0"]);
    a.cpus = "2-5".parse().expect("set");
    a.device_map = DeviceMap {
        gpus: vec![
            GpuShare {
                ordinal: 0,
                pci_bus_id: "0000:1b:00.0".into(),
                cpus: "2-3".parse().expect("set"),
                mems: "0".parse().expect("set"),
            },
            GpuShare {
                ordinal: 1,
                pci_bus_id: "0000:3b:00.0".into(),
                cpus: "4-5".parse().expect("set"),
                mems: "0".parse().expect("set"),
            },
        ],
        nics: vec![NicShare {
            name: "ib0".into(),
            cpus: "2-5".parse().expect("set"),
        }],
    };
    let c = ContainerView::default();
    let mut devs = host();
    devs.0.insert("/dev/nvidia1", node("/dev/nvidia1", 195, 1));
    let adj = build_adjustment(&a, &gpu_topology(), &c, &devs).expect("ok");
    assert_eq!(adj.env[GPU_CPUS_ENV], "0:2-3;1:4-5");
    assert_eq!(adj.env[GPU_MEMS_ENV], "0:0;1:0");
    assert_eq!(adj.env[NIC_CPUS_ENV], "ib0:2-5");
    let record = &adj.annotations[DECISION_KEY];
    assert!(
        record.ends_with(" gpu_cpus=0:2-3;1:4-5 gpu_mems=0:0;1:0 nic_cpus=ib0:2-5"),
        "{record}"
    );
    // Without devices, no map entries.
    let adj = build_adjustment(&decision(&[], &[]), &gpu_topology(), &c, &host()).expect("ok");
    assert!(!adj.env.contains_key(GPU_CPUS_ENV) && !adj.env.contains_key(NIC_CPUS_ENV));
}
