use super::*;
use align_core::topology::testing::shipped;

#[test]
fn the_split_counts_cpus_and_devices_per_node() {
    let topo = shipped("dgx-h100");
    let node = |id: u32| topo.node(id).expect("node").cpus.clone();
    let mut cpus = node(0)
        .iter()
        .take(6)
        .collect::<align_core::topology::CpuSet>();
    cpus.extend_from(&node(1).iter().take(2).collect());
    let on = |id: u32| {
        topo.gpus
            .iter()
            .find(|g| g.numa_node == Some(id))
            .map(|g| g.pci_bus_id.clone())
            .expect("GPU")
    };
    let a = Assignment {
        cpus,
        gpus: vec![on(0), on(1)],
        ..Assignment::default()
    };
    assert_eq!(
        device_split(&topo, &a),
        "node 0: 6 cpus 1 gpus | node 1: 2 cpus 1 gpus"
    );
    let cpu_only = Assignment {
        cpus: node(0),
        ..Assignment::default()
    };
    assert_eq!(device_split(&topo, &cpu_only), "");
}
