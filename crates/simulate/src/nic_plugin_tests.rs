//! The kubelet baseline's RDMA NIC models ([`NicPlugin`]) on the DGX-1V (4 NICs, one per PCIe
//! switch, 2 per NUMA node).

use std::sync::Arc;

use super::*;
use crate::{replay_plugins, Event, GpuChoice, Report, Strategy, Workload};
use align_core::placement::policy::{PlacementConfig, Policy};
use align_core::topology::{testing, Topology};

const SRIOV: NicPlugin = NicPlugin::Sriov { vfs_per_pf: 8 };
const SHARED: NicPlugin = NicPlugin::Shared { hca_max: 63 };

/// `count` pods of one GPU and `nics` NICs, plus `extra` (YAML pod lines) first.
fn pods(extra: &str, count: usize, nics: u32) -> Workload {
    let mut text = format!("pods:\n{extra}");
    for i in 0..count {
        text.push_str(&format!(
            "  - {{name: p{i}, containers: [{{name: t, cpu: \"2\", memory: 8Gi, gpus: 1, nics: {nics}}}]}}\n"
        ));
    }
    Workload::parse(&text).expect("workload")
}

fn run(topo: Topology, wl: &Workload, nic: NicPlugin) -> Report {
    let config = PlacementConfig {
        policy: Policy::SingleNumaNode,
        ..PlacementConfig::default()
    };
    replay_plugins(
        Arc::new(topo),
        config,
        wl,
        Strategy::Kubelet,
        GpuChoice::Preferred,
        nic,
    )
    .expect("replay")
}

#[test]
fn vf_hints_do_not_run_out_while_vfs_are_left() {
    let wl = pods("", 8, 1);
    let topo = testing::shipped("dgx1-v100");
    // One unit per NIC: two NIC pods a node, then no preferred hint with 4 GPUs free.
    assert_eq!(
        run(topo.clone(), &wl, NicPlugin::PerNic)
            .summary
            .pods_admitted,
        4
    );
    let sriov = run(topo.clone(), &wl, SRIOV);
    assert_eq!(sriov.summary.pods_admitted, 8);
    assert_eq!(sriov.summary.containers_aligned, 8);
    let node_of = |nic: &str| {
        let n = topo.nics.iter().find(|n| n.name == nic).expect("nic");
        n.numa_node.expect("node").to_string()
    };
    for d in &sriov.decisions {
        // One VF: one NIC, its PF, on the hint's node.
        assert_eq!(d.nics.len(), 1, "{d:?}");
        assert_eq!(node_of(&d.nics[0]), d.mems, "{d:?}");
    }
    // Two VFs asked from a node's 16: still hinted, one or two NICs (two VFs of a PF are one).
    let two = run(topo.clone(), &pods("", 8, 2), SRIOV);
    assert_eq!(two.summary.pods_admitted, 8);
    assert!(two
        .decisions
        .iter()
        .all(|d| (1..=2).contains(&d.nics.len())));
    // The shared plugin: no NIC hint, every HCA given, units never short here.
    let shared = run(topo, &wl, SHARED);
    assert_eq!(shared.summary.pods_admitted, 8);
    assert!(shared.decisions.iter().all(|d| d.nics.len() == 4));
}

#[test]
fn the_last_vfs_and_shared_units_run_out_and_come_back() {
    let topo = testing::shipped("dgx1-v100");
    // 1 VF per NIC: 4 units as per-NIC, but the PF's VFs, not the NIC, are the units.
    let one = NicPlugin::Sriov { vfs_per_pf: 1 };
    assert_eq!(
        run(topo.clone(), &pods("", 8, 1), one)
            .summary
            .pods_admitted,
        4
    );
    let text = "pods:\n  - {name: a, containers: [{name: t, cpu: \"2\", gpus: 1, nics: 2}]}\n  - {name: b, containers: [{name: t, cpu: \"2\", gpus: 1, nics: 2}]}\nevents: [{add: a}, {add: b}, {remove: a}, {add: b2}]\n";
    let text = text.replace(
        "events",
        "  - {name: b2, containers: [{name: t, cpu: \"2\", gpus: 1, nics: 2}]}\nevents",
    );
    let wl = Workload::parse(&text).expect("workload");
    let r = run(topo, &wl, NicPlugin::Shared { hca_max: 3 });
    let admitted: Vec<bool> = r.decisions.iter().map(|d| d.admitted).collect();
    // 2 of 3 units, then 1 left for b, then a's 2 back for b2.
    assert_eq!(admitted, vec![true, false, true], "{:?}", r.decisions);
}

#[test]
fn a_node_without_an_rdma_nic_gets_no_preferred_hint_for_a_nic_pod() {
    let mut topo = testing::shipped("dgx1-v100");
    for n in &mut topo.nics {
        n.numa_node = Some(1);
    }
    // g0-g7 (a GPU each, no NIC) fill node 0 then node 1; g0 leaves: the one free GPU is on
    // node 0, every NIC on node 1.
    let busy: String = (0..8)
        .map(|i| format!("  - {{name: g{i}, containers: [{{name: t, cpu: \"2\", gpus: 1}}]}}\n"))
        .collect();
    let mut wl = pods(&busy, 1, 1);
    wl.events = (0..8).map(|i| Event::add(&format!("g{i}"))).collect();
    wl.events.push(Event {
        add: None,
        remove: Some("g0".into()),
    });
    wl.events.push(Event::add("p0"));
    for nic in [SRIOV, NicPlugin::PerNic, SHARED] {
        let r = run(topo.clone(), &wl, nic);
        let mems: Vec<&str> = r.decisions[..8].iter().map(|d| d.mems.as_str()).collect();
        assert_eq!(mems, ["0", "0", "0", "0", "1", "1", "1", "1"], "{nic:?}");
        let last = r.decisions.last().expect("nic pod");
        if nic == SHARED {
            // No NUMA node on the shared plugin's units: no NIC hint, the GPU's node wins.
            assert!(
                last.admitted && last.mems == "0" && last.nics.len() == 4,
                "{last:?}"
            );
        } else {
            assert!(!last.admitted, "{nic:?}: {last:?}");
            assert!(last.reason.contains("TopologyAffinityError"), "{last:?}");
        }
    }
}

#[test]
fn the_device_manager_takes_the_hints_units_first_in_set_order() {
    // Aligned first, then the other nodes', then node-less; each group in map order.
    let free: Vec<(u64, Option<bool>)> = vec![
        (1, None),
        (2, Some(false)),
        (3, Some(true)),
        (4, Some(true)),
        (5, Some(false)),
    ];
    let two = devices_to_allocate("c", &free, 2);
    assert_eq!(
        two.iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        [3, 4].into()
    );
    let four = devices_to_allocate("c", &free, 4);
    assert_eq!(&four[..2], &two[..]);
    assert!(
        [2, 5].contains(&four[2]) && [2, 5].contains(&four[3]),
        "{four:?}"
    );
    assert_eq!(devices_to_allocate("c", &free, 5)[4], 1);
    assert_eq!(devices_to_allocate("c", &free, 9).len(), 5);
    // Deterministic per container, not lowest-first across containers.
    assert_eq!(
        devices_to_allocate("c", &free, 1),
        devices_to_allocate("c", &free, 1)
    );
    let firsts: std::collections::BTreeSet<u64> = (0..16)
        .map(|i| devices_to_allocate(&format!("c{i}"), &free, 1)[0])
        .collect();
    assert_eq!(firsts, [3, 4].into());
    // On the DGX-1V, 1-VF pods on node 0 land on both of its NICs, not the lowest PF only.
    let r = run(testing::shipped("dgx1-v100"), &pods("", 4, 1), SRIOV);
    let nics: std::collections::BTreeSet<&str> =
        r.decisions.iter().map(|d| d.nics[0].as_str()).collect();
    assert_eq!(nics, ["ib0", "ib1"].into(), "{:?}", r.decisions);
}
