use super::*;

#[test]
fn distribute_cpus_across_numa_splits_a_two_node_container_evenly() {
    let topo = Arc::new(align_core::topology::testing::shipped("dgx-h100"));
    let config = PlacementConfig {
        reserved_cpus: kubelet_reserved(&topo, 2),
        ..PlacementConfig::default()
    };
    let mut req = align_core::placement::Request {
        container_id: "c".into(),
        container_name: "main".into(),
        cpu_request_milli: 120_000,
        cpu_limit_milli: Some(120_000),
        // No memory limit: the memory provider's one-node hint would narrow the CPUs' mask.
        memory_limit_bytes: None,
        ..Default::default()
    };
    req.allocated_gpus = topo.gpus.iter().map(|g| g.pci_bus_id.clone()).collect();
    let on = |a: &Assignment, id: u32| a.cpus.intersection_len(&topo.node(id).expect("node").cpus);
    let mut packed = KubeletBaseline::new(topo.clone(), config.clone()).expect("baseline");
    let a = packed.place(&req).expect("placed");
    // Packed, the kubelet takes the whole free node 1 first (node 0 holds the reserved core),
    // then 8 threads of node 0.
    assert_eq!((on(&a, 0), on(&a, 1)), (8, 112), "{}", a.cpus);
    let mut spread = KubeletBaseline::new(topo.clone(), config)
        .expect("baseline")
        .with_distribute_cpus(true);
    let a = spread.place(&req).expect("placed");
    assert_eq!((on(&a, 0), on(&a, 1)), (60, 60), "{}", a.cpus);
}
