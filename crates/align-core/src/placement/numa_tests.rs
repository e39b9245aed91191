use std::sync::Arc;

use super::*;
use crate::topology::testing::fixture_or_shipped;

/// The width counted from the host's totals every time, as it was before they were kept.
fn counted_width(ledger: &Ledger, need: &Need) -> usize {
    let topo = ledger.topo();
    let eligible = nics::eligible(ledger);
    let per_node: Vec<[u64; 4]> = topo
        .numa_nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| !n.is_memory_only())
        .map(|(i, n)| {
            [
                n.cpus.difference(ledger.reserved()).len() as u64,
                n.memory_bytes,
                (0..topo.gpus.len())
                    .filter(|g| ledger.gpu_node(*g) == Some(i))
                    .count() as u64,
                eligible
                    .iter()
                    .filter(|x| ledger.nic_node(**x) == Some(i))
                    .count() as u64,
            ]
        })
        .collect();
    let asks = [
        need.cpus as u64,
        need.memory,
        need.gpus as u64,
        need.nics as u64,
    ];
    (0..4)
        .map(|r| {
            let mut v: Vec<u64> = per_node.iter().map(|c| c[r]).collect();
            v.sort_unstable_by(|a, b| b.cmp(a));
            let (mut sum, mut width) = (0u64, 0);
            for c in v {
                if sum >= asks[r] {
                    break;
                }
                sum = sum.saturating_add(c);
                width += 1;
            }
            width
        })
        .max()
        .unwrap_or(1)
        .max(1)
}

#[test]
fn min_width_from_the_kept_totals_matches_counting_them_again() {
    for host in [
        "dgx-h100",
        "dgx1-v100",
        "numa16-1024",
        "epyc-nps4",
        "grace-hopper",
        "hgx16-nvswitch",
    ] {
        let topo = Arc::new(fixture_or_shipped(host));
        let mut ledger = Ledger::new(Arc::clone(&topo), CpuSet::new());
        let cpus = topo.cpus.len() as u32;
        let memory: u64 = topo.numa_nodes.iter().map(|n| n.memory_bytes).sum();
        for reserved in ["", "0-3", "0-15,64-79"] {
            ledger.set_reserved(reserved.parse().unwrap_or_default());
            for step in 0..=8u32 {
                let need = Need {
                    cpus: cpus * step / 8,
                    whole: false,
                    memory: memory / 8 * u64::from(step),
                    gpus: topo.gpus.len() as u32 * step / 8,
                    nics: topo.nics.len() as u32 * (8 - step) / 8,
                    shared: false,
                    hugepages: Vec::new(),
                };
                assert_eq!(
                    min_width(&ledger, &need),
                    counted_width(&ledger, &need),
                    "{host}, reserved {reserved:?}, step {step}"
                );
            }
        }
    }
}

use std::collections::BTreeMap;

use crate::placement::policy::{NumaChoice as Choice, PlacementConfig};
use crate::placement::request::{PodInfo, Request};
use crate::placement::Allocator;
use crate::topology::testing::TopologyBuilder;

/// Four nodes of 4 CPUs (one thread per core).
fn allocator(numa_choice: Choice) -> Allocator {
    let topo = TopologyBuilder::new()
        .sockets(2)
        .numa_per_socket(2)
        .cores(8)
        .threads(1)
        .memory_gib(64)
        .build();
    let config = PlacementConfig {
        numa_choice,
        ..PlacementConfig::default()
    };
    Allocator::new(Arc::new(topo), config)
}

fn req(id: &str, cpus: u64, annotations: &[(&str, &str)]) -> Request {
    Request {
        container_id: id.into(),
        container_name: "c".into(),
        pod: PodInfo {
            uid: id.into(),
            namespace: "ns".into(),
            name: id.into(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        },
        cpu_request_milli: cpus * 1000,
        cpu_limit_milli: Some(cpus * 1000),
        ..Request::default()
    }
}

/// The node of each of three decisions: 1 CPU on node 1 first (by annotation-free placement on
/// a host where node 0 is made busier), then two 1-CPU containers.
fn nodes_after(choice: Choice, annotations: &[(&str, &str)]) -> Vec<String> {
    let mut a = allocator(choice);
    // Node 0 half used, node 1 a quarter, nodes 2 and 3 idle.
    a.place(&req("busy0", 2, &[("cpus.nri-align.io/pod", "exclusive")]))
        .expect("first");
    let mut out = Vec::new();
    for id in ["x", "y"] {
        let got = a.place(&req(id, 1, annotations)).expect("placed");
        out.push(got.numa_nodes.to_string());
    }
    out
}

#[test]
fn each_numa_choice_packs_or_spreads() {
    // best-fit and most-allocated fill the busy node; least-allocated goes to idle ones.
    assert_eq!(nodes_after(Choice::BestFit, &[]), ["0", "0"]);
    assert_eq!(nodes_after(Choice::MostAllocated, &[]), ["0", "0"]);
    let spread = nodes_after(Choice::LeastAllocated, &[]);
    assert!(!spread.contains(&"0".to_string()), "{spread:?}");
    assert_ne!(spread[0], spread[1], "{spread:?}");
    // The pod annotation beats the node's setting.
    let by_pod = nodes_after(
        Choice::BestFit,
        &[("numa-choice.nri-align.io/pod", "least-allocated")],
    );
    assert_eq!(by_pod, spread);
}

#[test]
fn most_allocated_weighs_the_share_not_the_count() {
    // A big busy node and a small idle one: best-fit takes the node left with the fewest
    // free CPUs (the small one), most-allocated the one with the smallest share free.
    let mut topo = TopologyBuilder::new()
        .sockets(2)
        .cores(16)
        .threads(1)
        .memory_gib(64)
        .build();
    // Node 0 keeps 16 CPUs, node 1 four.
    let gone: Vec<u32> = topo.numa_nodes[1].cpus.iter().skip(4).collect();
    topo.cpus.retain(|c| !gone.contains(&c.id));
    for id in &gone {
        topo.numa_nodes[1].cpus.remove(*id);
        topo.offline_cpus.insert(*id);
    }
    for (choice, want) in [(Choice::BestFit, "1"), (Choice::MostAllocated, "0")] {
        let config = PlacementConfig {
            numa_choice: choice,
            ..PlacementConfig::default()
        };
        let mut a = Allocator::new(Arc::new(topo.clone()), config);
        // Node 0: 10 of 16 used (6 free, 37%); node 1: 4 of 4 free (100%).
        let big = a.place(&req("n0", 10, &[])).expect("first");
        assert_eq!(big.numa_nodes.to_string(), "0");
        let got = a.place(&req("z", 1, &[])).expect("placed");
        assert_eq!(got.numa_nodes.to_string(), want, "{choice}");
    }
}

/// Idle GPU nodes are those whose GPUs are all free; a set opens each idle node it takes a GPU
/// of once, and none of a node already in use.
#[test]
fn idle_gpu_nodes_and_the_sets_that_open_them() {
    let topo = Arc::new(fixture_or_shipped("dgx1-v100"));
    let mut ledger = Ledger::new(Arc::clone(&topo), CpuSet::new());
    assert_eq!(idle_gpu_nodes(&ledger), vec![true, true]);
    let (n0, n1) = (ledger.gpu_node(0), ledger.gpu_node(4));
    let (Some(n0), Some(n1)) = (n0, n1) else {
        panic!("DGX-1V GPUs without a node")
    };
    assert_ne!(n0, n1);
    let hold = crate::placement::assignment::Assignment {
        container_id: "hold".into(),
        gpus: vec![topo.gpus[0].pci_bus_id.clone()],
        ..Default::default()
    };
    ledger.record(hold, Vec::new()).expect("record");
    let idle = idle_gpu_nodes(&ledger);
    assert!(!idle[n0] && idle[n1], "{idle:?}");
    assert_eq!(idle_opened(&ledger, &idle, &[1]), 0);
    assert_eq!(idle_opened(&ledger, &idle, &[4, 5]), 1);
    assert_eq!(idle_opened(&ledger, &idle, &[1, 4]), 1);
}
