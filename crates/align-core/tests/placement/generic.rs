//! Generic devices (a CDI device that is neither a GPU nor an RDMA NIC the topology knows):
//! the container's CPUs and memory follow the device's NUMA node, as they follow a GPU's.

use std::sync::Arc;

use align_core::placement::{Allocator, GenericDevice, PlacementConfig, Policy, Request};
use align_core::topology::testing::TopologyBuilder;
use align_core::topology::Topology;
use test_support::requests::{guaranteed, GIB};

fn two_nodes() -> Topology {
    TopologyBuilder::new().sockets(2).cores(4).build()
}

fn with_device(mut r: Request, node: Option<u32>) -> Request {
    r.generic_devices.push(GenericDevice {
        name: "example.com/accel=fn0".into(),
        pci_bus_id: "0000:3b:00.0".into(),
        numa_node: node,
        pcie_path: vec!["pci0000:3a".into(), "0000:3b:00.0".into()],
    });
    r
}

fn nodes_of(topo: &Topology, a: &align_core::placement::Assignment) -> Vec<u32> {
    let mut v: Vec<u32> = a
        .cpus
        .iter()
        .map(|c| topo.cpus[c as usize].numa_node)
        .collect();
    v.dedup();
    v
}

#[test]
fn exclusive_cpus_and_memory_land_on_the_device_node() {
    let topo = two_nodes();
    let mut alloc = Allocator::new(Arc::new(topo.clone()), PlacementConfig::default());
    // Without the device the first node is the best fit; with it, the device's node.
    let plain = alloc
        .plan(&guaranteed("p", 2000, Some(GIB)))
        .expect("plain");
    assert_eq!(nodes_of(&topo, &plain), [0]);
    let a = alloc
        .place(&with_device(guaranteed("c", 2000, Some(GIB)), Some(1)))
        .expect("placed");
    assert_eq!(nodes_of(&topo, &a), [1]);
    assert_eq!(a.mems.iter().collect::<Vec<_>>(), [1]);
    assert!(a.aligned, "{}", a.reason);
    assert_eq!(a.generic_devices, ["0000:3b:00.0"]);
    // Never held: a second container with the same device is placed beside it.
    let b = alloc
        .place(&with_device(guaranteed("d", 2000, Some(GIB)), Some(1)))
        .expect("second");
    assert_eq!(nodes_of(&topo, &b), [1]);
}

#[test]
fn a_shared_pool_container_gets_the_device_node_memory() {
    let topo = two_nodes();
    let alloc = Allocator::new(Arc::new(topo), PlacementConfig::default());
    let mut r = with_device(Request::default(), Some(1));
    r.container_id = "s".into();
    let a = alloc.plan(&r).expect("planned");
    assert!(!a.exclusive);
    assert_eq!(a.mems.iter().collect::<Vec<_>>(), [1]);
    // A device whose node the host does not say constrains nothing.
    let mut r = with_device(Request::default(), None);
    r.container_id = "u".into();
    let a = alloc.plan(&r).expect("planned");
    assert_eq!(a.mems.iter().collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn restricted_refuses_a_container_its_device_node_cannot_hold() {
    let topo = two_nodes();
    let mut alloc = Allocator::new(
        Arc::new(topo),
        PlacementConfig {
            policy: Policy::Restricted,
            ..PlacementConfig::default()
        },
    );
    alloc
        .place(&guaranteed("fill", 4000, Some(GIB)))
        .expect("fills a node");
    // The first container took node 0 whole; the device is there, the CPUs are not.
    let r = with_device(guaranteed("c", 2000, Some(GIB)), Some(0));
    assert!(alloc.plan(&r).is_err());
    let r = with_device(guaranteed("c", 2000, Some(GIB)), Some(1));
    assert!(alloc.plan(&r).is_ok());
}
