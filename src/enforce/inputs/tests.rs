use super::*;
use crate::enforce::container::{DeviceNode, ResourcesView};
use crate::host::devices::{nvidia_minor, uverbs_name};
use crate::topology::{Gpu, Nic};

/// Two GPUs (minors 0 and 1) and one RDMA NIC.
pub(crate) fn gpu_topology() -> Topology {
    let gpu = |index: u32, bus: &str| Gpu {
        index,
        pci_bus_id: bus.into(),
        numa_node: Some(0),
        uuid: Some(format!("GPU-{index}aaa")),
        minor: Some(index),
        name: None,
        mig_enabled: None,
        mig_devices: Vec::new(),
        memory_node: None,
    };
    Topology {
        gpus: vec![gpu(0, "0000:1b:00.0"), gpu(1, "0000:3b:00.0")],
        nics: vec![Nic {
            name: "ib0".into(),
            pci_bus_id: Some("0000:1c:00.0".into()),
            numa_node: Some(0),
            rdma_device: Some("mlx5_0".into()),
            uverbs: vec!["uverbs0".into()],
        }],
        ..Default::default()
    }
}

pub(crate) fn node(path: &str, major: i64, minor: i64) -> DeviceNode {
    DeviceNode {
        path: path.into(),
        kind: "c".into(),
        major,
        minor,
        file_mode: Some(0o666),
        uid: Some(0),
        gid: Some(0),
    }
}

#[test]
fn shares_round_trip_through_the_kubelet_formula() {
    for milli in [10u64, 100, 250, 333, 999, 1000, 1500, 64_000] {
        let shares = (milli * 1024 / 1000).max(2);
        assert_eq!(shares_to_milli(shares), milli, "milli {milli}");
    }
    assert_eq!(shares_to_milli(2), 0);
    assert_eq!(quota_to_milli(Some(200_000), Some(100_000)), Some(2000));
    assert_eq!(quota_to_milli(Some(-1), Some(100_000)), None);
    assert_eq!(quota_to_milli(Some(50_000), None), Some(500));
}

#[test]
fn absurd_shares_and_quota_saturate_instead_of_panicking() {
    assert!(shares_to_milli(u64::MAX) > 0);
    assert!(quota_to_milli(Some(i64::MAX), Some(1)).is_some_and(|m| m > 1_000_000));
    assert_eq!(
        quota_to_milli(Some(i64::MAX), Some(0)),
        quota_to_milli(Some(i64::MAX), None)
    );
}

#[test]
fn resources_become_a_request() {
    let c = ContainerView {
        id: "c1".into(),
        name: "app".into(),
        resources: ResourcesView {
            cpu_shares: Some(2048),
            cpu_quota: Some(200_000),
            cpu_period: Some(100_000),
            memory_limit: Some(1 << 30),
            ..Default::default()
        },
        ..Default::default()
    };
    let pod = PodView {
        uid: "u".into(),
        namespace: "ns".into(),
        ..Default::default()
    };
    let r = build_request(&gpu_topology(), &pod, &c).expect("ok");
    assert_eq!((r.cpu_request_milli, r.cpu_limit_milli), (2000, Some(2000)));
    assert_eq!(r.memory_limit_bytes, Some(1 << 30));
    assert_eq!(r.pod.namespace, "ns");
    assert!(r.allocated_gpus.is_empty() && r.allocated_nics.is_empty());
}

#[test]
fn gpus_come_from_device_nodes_before_env() {
    let c = ContainerView {
        devices: vec![
            node("/dev/nvidia1", 195, 1),
            node("/dev/nvidiactl", 195, 255),
        ],
        env: vec!["NVIDIA_VISIBLE_DEVICES=all".into()],
        ..Default::default()
    };
    let r = build_request(&gpu_topology(), &PodView::default(), &c).expect("ok");
    assert_eq!(r.allocated_gpus, vec!["0000:3b:00.0"]);
}

#[test]
fn rdma_nics_come_from_uverbs_nodes() {
    let c = ContainerView {
        devices: vec![
            node("/dev/infiniband/uverbs0", 231, 192),
            node("/dev/infiniband/rdma_cm", 10, 58),
        ],
        ..Default::default()
    };
    let r = build_request(&gpu_topology(), &PodView::default(), &c).expect("ok");
    assert_eq!(r.allocated_nics, vec!["ib0"]);
    assert_eq!(uverbs_name("/dev/infiniband/uverbs"), None);
    assert_eq!(nvidia_minor("/dev/nvidia-uvm"), None);
}

#[test]
fn hugepage_limits_read_as_runc_names_the_page_sizes_and_zero_limits_ask_nothing() {
    use crate::placement::HugePageNeed;
    let limits = [
        ("2MB".to_string(), 3 << 20),
        ("1GB".to_string(), 0),
        ("64KB".to_string(), 64 << 10),
        ("2Mi".to_string(), 4 << 20),
        ("MB".to_string(), 4 << 20),
        ("99999999999999999999GB".to_string(), 1),
    ];
    assert_eq!(
        super::hugepage_needs(&limits),
        vec![
            HugePageNeed {
                size_kb: 2048,
                pages: 2
            },
            HugePageNeed {
                size_kb: 64,
                pages: 1
            },
        ]
    );
    let mut c = ContainerView::default();
    c.resources.hugepage_limits = vec![("1GB".into(), 2 << 30)];
    let r = build_request(&Topology::default(), &PodView::default(), &c).expect("request");
    assert_eq!(
        r.hugepages,
        vec![HugePageNeed {
            size_kb: 1 << 20,
            pages: 2
        }]
    );
}
