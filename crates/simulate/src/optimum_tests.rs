use std::sync::Arc;

use super::*;
use crate::{churn, repack, ContainerSpec, Event, NicPlugin, PodSpec, Quantity};
use align_core::placement::policy::{PlacementConfig, Policy};
use align_core::topology::testing;

fn pod(name: &str, gpus: u32) -> PodSpec {
    PodSpec {
        name: name.into(),
        namespace: "t".into(),
        annotations: Default::default(),
        containers: vec![ContainerSpec {
            name: "main".into(),
            cpu: Some(Quantity::Number(1.0)),
            cpu_limit: None,
            memory: Some(Quantity::Text("1Gi".into())),
            gpus,
            nics: 0,
            devices: Vec::new(),
            hugepages_2mi: None,
            hugepages_1gi: None,
        }],
    }
}

/// A node of 4 GPUs with room for everything else.
const NODE: Amounts = [8, 16 << 30, 4, 0];

/// Online first fit, as a placement without look-ahead: each pod on the first node with room
/// when it arrives, refused when none has.
fn online(bins: &[Amounts], wl: &Workload) -> Vec<Option<usize>> {
    let mut nodes = Vec::new();
    for _ in 0..sequence(wl).0.len() {
        nodes.push(None);
        let at = nodes.len() - 1;
        nodes[at] = (0..bins.len()).find(|n| {
            nodes[at] = Some(*n);
            feasible_prefix(bins, wl, &nodes)
        });
    }
    nodes
}

#[test]
fn refusing_a_pod_admits_more_later() {
    // One GPU held for good, then two whole-node pods one after the other.
    let wl = Workload {
        pods: vec![pod("a", 1), pod("b", 4), pod("c", 4)],
        events: vec![
            Event::add("a"),
            Event::add("b"),
            Event::remove("b"),
            Event::add("c"),
        ],
    };
    let first = online(&[NODE], &wl);
    assert_eq!(first, vec![Some(0), None, None]);
    let best = solve(&[NODE], &wl).expect("solved");
    assert_eq!(
        best,
        Optimum {
            offered: 3,
            admitted: 2,
            nodes: vec![None, Some(0), Some(0)],
        }
    );
    assert!(feasible(&[NODE], &wl, &best.nodes));
    // Two 4-GPU pods at once on one node: never.
    assert!(!feasible(&[NODE], &wl, &[None, Some(0), Some(0)][..2]));
}

#[test]
fn identical_nodes_keep_their_best_packing() {
    // 3 + 3 + 2 + 2 GPUs alive together on two nodes of 4: two 3s fill both nodes, while one
    // 3 and the two 2s (on the other node) make three pods. The order of identical nodes the
    // program imposes must not cut that packing off.
    let wl = Workload {
        pods: vec![pod("a", 3), pod("b", 3), pod("c", 2), pod("d", 2)],
        events: ["a", "b", "c", "d"].map(Event::add).to_vec(),
    };
    let bins = [NODE, NODE];
    assert_eq!(online(&bins, &wl).iter().flatten().count(), 2);
    let best = solve(&bins, &wl).expect("solved");
    assert_eq!(best.admitted, 3, "{best:?}");
    assert!(feasible(&bins, &wl, &best.nodes));
}

#[test]
fn the_optimum_bounds_first_fit_on_churn_streams() {
    let topo = Arc::new(testing::shipped("dgx1-v100"));
    let config = PlacementConfig {
        policy: Policy::SingleNumaNode,
        reserved_cpus: crate::baseline::kubelet_reserved(&topo, 2),
        ..PlacementConfig::default()
    };
    let mut bins = repack::bins(Arc::clone(&topo), &config);
    repack::loosen_nics(&mut bins, NicPlugin::default());
    for seed in 1..=3 {
        let wl = churn::workload(&topo, seed, 20);
        let best = solve(&bins, &wl).expect("solved");
        let first = online(&bins, &wl);
        assert!(feasible(&bins, &wl, &first));
        assert!(feasible(&bins, &wl, &best.nodes), "seed {seed}: {best:?}");
        assert_eq!(best.offered, 20);
        assert!(
            best.admitted >= first.iter().flatten().count(),
            "seed {seed}: {best:?} {first:?}"
        );
        // Nothing refused fits beside the optimum's pods: adding any refused pod breaks it.
        for i in (0..best.nodes.len()).filter(|i| best.nodes[*i].is_none()) {
            for n in 0..bins.len() {
                let mut more = best.nodes.clone();
                more[i] = Some(n);
                assert!(
                    !feasible(&bins, &wl, &more),
                    "seed {seed}: pod {i} fits node {n}"
                );
            }
        }
    }
}
