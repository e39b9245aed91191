use super::*;
use align_core::topology::testing::shipped;

/// The GB200 tray in NUMA mode: 34 nodes, 2 with CPUs. The kubelet counts all 34, so it
/// refuses the host at its default limit and runs once the limit is raised to cover them;
/// under CDMM the same tray has 2 nodes and needs nothing.
#[test]
fn gpu_memory_nodes_count_against_the_kubelet_limit() {
    let numa = Arc::new(shipped("gb200-nvl4-numa"));
    assert_eq!(numa.numa_nodes.len(), 34);
    let err = KubeletBaseline::new(Arc::clone(&numa), PlacementConfig::default())
        .expect_err("refused at the default limit");
    assert_eq!(err, TooManyNodes { nodes: 34, max: 8 });
    assert!(err.to_string().contains("max-allowable-numa-nodes"));
    let raised = KubeletBaseline::with_max_numa_nodes(numa, PlacementConfig::default(), 34)
        .expect("accepted with the limit raised");
    assert_eq!(raised.nodes, vec![0, 1]);
    let cdmm = shipped("gb200-nvl4-cdmm");
    assert_eq!(cdmm.numa_nodes.len(), 2);
    assert!(KubeletBaseline::new(Arc::new(cdmm), PlacementConfig::default()).is_ok());
    // A value below the default is the default (the kubelet rejects lower ones).
    let nps4 = Arc::new(shipped("epyc-nps4"));
    assert!(KubeletBaseline::with_max_numa_nodes(nps4, PlacementConfig::default(), 2).is_ok());
}
