//! Arithmetic on values from outside never overflows: memory sizes and distances a topology
//! source reports (sysfs, an hwloc capture, a JSON capture), NVLink counts, and requests from
//! the runtime. These panicked in debug builds and wrapped silently in release ones.

use std::sync::Arc;

use align_core::placement::{Allocator, PlacementConfig, PlacementError, Policy};
use align_core::topology::testing::{self, TopologyBuilder};
use align_core::topology::{GpuLinks, Topology};
use test_support::requests::guaranteed;

fn alloc(topo: Topology, config: PlacementConfig) -> Allocator {
    Allocator::new(Arc::new(topo), config)
}

fn policy(policy: Policy) -> PlacementConfig {
    PlacementConfig {
        policy,
        ..PlacementConfig::default()
    }
}

/// Four nodes of a third of u64::MAX bytes each, every distance between them u32::MAX.
fn huge_host() -> (Topology, u64) {
    let mut topo = TopologyBuilder::new().sockets(2).numa_per_socket(2).build();
    let each = u64::MAX / 3 + 1;
    let n = topo.numa_nodes.len();
    for (i, node) in topo.numa_nodes.iter_mut().enumerate() {
        node.memory_bytes = each;
        node.distances = (0..n).map(|j| if i == j { 10 } else { u32::MAX }).collect();
    }
    (topo, each)
}

#[test]
fn memory_and_distance_sums_over_huge_nodes_do_not_overflow() {
    let (topo, each) = huge_host();
    // Needs three nodes: their memory sum passes u64::MAX, their distance sum u32::MAX.
    let mut a = alloc(topo, policy(Policy::BestEffort));
    let x = a
        .place(&guaranteed("wide", 2000, Some(2 * each + 1)))
        .expect("three nodes hold it");
    assert_eq!(x.numa_nodes.len(), 3, "{x:?}");
    assert_eq!(x.memory_bytes, 2 * each + 1);
}

#[test]
fn a_memory_limit_near_u64_max_is_refused_with_a_message_or_spread_exactly() {
    let (topo, each) = huge_host();
    // One node holds a third of it: a single-node policy refuses, saying memory.
    let mut a = alloc(topo.clone(), policy(Policy::SingleNumaNode));
    let err = a
        .place(&guaranteed("big", 1000, Some(u64::MAX - 1)))
        .expect_err("no single node holds it");
    assert!(
        matches!(
            err,
            PlacementError::Unalignable { .. } | PlacementError::Insufficient { .. }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("memory"), "{err}");
    // Three nodes hold u64::MAX + 2 bytes together: a wrapping sum made that 1 byte and
    // refused, a saturating one places it on exactly three.
    assert!(each.checked_mul(3).is_none());
    let mut a = alloc(topo, policy(Policy::Restricted));
    let x = a
        .place(&guaranteed("big", 1000, Some(u64::MAX - 1)))
        .expect("three nodes hold it");
    assert_eq!(x.numa_nodes.len(), 3, "{x:?}");
}

#[test]
fn full_pcpus_only_rounding_of_a_huge_request_is_an_error_not_a_wrap() {
    let topo = TopologyBuilder::new().threads(2).build();
    let config = PlacementConfig {
        full_pcpus_only: true,
        ..PlacementConfig::default()
    };
    let mut a = alloc(topo, config);
    // u32::MAX CPUs (odd): the next multiple of 2 does not fit in u32.
    let err = a
        .place(&guaranteed("huge", u64::from(u32::MAX) * 1000, None))
        .expect_err("absurd request");
    match &err {
        PlacementError::SmtAlignment {
            cpus,
            threads,
            suggest,
            ..
        } => {
            assert_eq!((*cpus, *threads), (u32::MAX, 2));
            assert_eq!(suggest % 2, 0, "{err}");
        }
        other => panic!("expected SmtAlignment, got {other}"),
    }
}

#[test]
fn nvlink_counts_beyond_any_gpu_are_clamped_not_overflowed() {
    let mut topo = testing::shipped("dgx1-v100");
    let n = topo.gpus.len();
    topo.gpu_links = Some(GpuLinks {
        nvlink: (0..n)
            .map(|i| (0..n).map(|j| if i == j { 0 } else { u32::MAX }).collect())
            .collect(),
        nvswitch: false,
    });
    let mut a = alloc(topo.clone(), policy(Policy::BestEffort));
    let mut r = guaranteed("gpu", 2000, None);
    r.allocated_gpus = topo.gpus[..4]
        .iter()
        .map(|g| g.pci_bus_id.clone())
        .collect();
    let x = a.place(&r).expect("placed");
    assert_eq!(x.gpus.len(), 4);
}
