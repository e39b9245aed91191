use super::*;

#[test]
fn nodes_the_plugin_passes() {
    assert_eq!(
        parse_device_node("/dev/infiniband/uverbs0"),
        Some(RdmaNode::Uverbs(0))
    );
    assert_eq!(
        parse_device_node("/dev/infiniband/umad12"),
        Some(RdmaNode::Umad(12))
    );
    assert_eq!(
        parse_device_node("/dev/infiniband/issm1"),
        Some(RdmaNode::Issm(1))
    );
    assert_eq!(
        parse_device_node("/dev/infiniband/ucm3"),
        Some(RdmaNode::Ucm(3))
    );
    assert_eq!(parse_device_node(RDMA_CM), Some(RdmaNode::RdmaCm));
    assert!(!RdmaNode::RdmaCm.is_per_hca());
    assert_eq!(RdmaNode::Uverbs(0).sysfs_class(), Some("infiniband_verbs"));
    for p in [
        "/dev/infiniband",
        "/dev/infiniband/",
        "/dev/infiniband/uverbs",
        "/dev/infiniband/uverbsX",
        "/dev/infiniband/../nvidia0",
        "/dev/nvidia0",
        "/dev/infiniband/rdma_cm2",
    ] {
        assert_eq!(parse_device_node(p), None, "{p}");
    }
}

#[test]
fn resource_names() {
    assert!(is_rdma_resource("rdma/hca_shared_devices_a"));
    assert!(!is_rdma_resource("rdma/"));
    assert!(!is_rdma_resource("nvidia.com/gpu"));
}
