//! The share rule, alone and through the allocator on shipped and random hosts.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::placement::test_requests::request;
use crate::placement::{Allocator, Assignment, GpuMode, PlacementConfig, Request};
use crate::topology::testing::{shipped, TopologyBuilder};
use crate::topology::{CpuSet, Gpu, Topology};

#[test]
fn pack_and_devices_on_one_node_fill_in_order() {
    let caps = [112, 112];
    assert_eq!(
        shares(CpuSpread::Pack, &caps, &[4, 4], &[0, 0], 120, 2),
        None
    );
    // Devices on one node (or none): the fill in order, as before the setting existed.
    assert_eq!(
        shares(CpuSpread::ByDevice, &caps, &[8, 0], &[0, 0], 120, 2),
        None
    );
    assert_eq!(
        shares(CpuSpread::ByDevice, &caps, &[0, 0], &[0, 0], 120, 2),
        None
    );
}

#[test]
fn by_device_splits_in_proportion_in_whole_cores() {
    let caps = [112, 112];
    let got = shares(CpuSpread::ByDevice, &caps, &[8, 8], &[0, 0], 120, 2);
    assert_eq!(got, Some(vec![60, 60]));
    let got = shares(CpuSpread::ByDevice, &caps, &[4, 1], &[0, 0], 20, 2);
    assert_eq!(got, Some(vec![16, 4]));
    // 10 CPUs over 3:1 devices, 2 threads a core: 7.5 and 2.5 become whole cores, 8 and 2.
    let got = shares(CpuSpread::ByDevice, &caps, &[3, 1], &[0, 0], 10, 2);
    assert_eq!(got, Some(vec![8, 2]));
}

#[test]
fn what_device_nodes_cannot_hold_goes_to_the_closest_other_node() {
    // Node 0 and 1 hold the devices but only 4 free CPUs each; node 3 is closer than node 2.
    let caps = [4, 4, 16, 16];
    let got = shares(
        CpuSpread::ByDevice,
        &caps,
        &[1, 1, 0, 0],
        &[20, 20, 42, 40],
        14,
        2,
    );
    assert_eq!(got, Some(vec![4, 4, 0, 6]));
    // More than the set holds: no split (the caller's fill reports the shortage).
    assert_eq!(
        shares(CpuSpread::ByDevice, &caps, &[1, 1, 0, 0], &[0; 4], 41, 2),
        None
    );
}

#[test]
fn even_weighs_every_node_with_cpus_the_same() {
    let got = shares(CpuSpread::Even, &[32, 0, 32], &[0, 0, 0], &[0; 3], 12, 2);
    assert_eq!(got, Some(vec![6, 0, 6]));
}

proptest! {
    /// For any capacities, weights, count and core size: the shares add up, stay within each
    /// node's capacity, and a weighted node gets at least ⌊k·w/W⌋ − step (or all it has).
    #[test]
    fn shares_follow_the_rule(
        caps in prop::collection::vec(0u32..80, 2..7),
        weights in prop::collection::vec(0u32..9, 7),
        closeness in prop::collection::vec(0u64..100, 7),
        step in 1u32..5,
        frac in 0.0f64..=1.0,
    ) {
        let n = caps.len();
        let weights = &weights[..n];
        let total: u32 = caps.iter().sum();
        let k = (f64::from(total) * frac) as u32;
        let got = shares(CpuSpread::ByDevice, &caps, weights, &closeness[..n], k, step);
        let weighted = weights.iter().filter(|w| **w > 0).count();
        prop_assert_eq!(got.is_some(), weighted >= 2);
        if let Some(out) = got {
            prop_assert_eq!(out.iter().sum::<u32>(), k);
            let w_total: u32 = weights.iter().sum();
            for j in 0..n {
                prop_assert!(out[j] <= caps[j]);
                let floor = (u64::from(k) * u64::from(weights[j]) / u64::from(w_total)) as u32;
                let least = floor.saturating_sub(step).min(caps[j]);
                prop_assert!(out[j] >= least, "node {j}: {} < {least} ({out:?})", out[j]);
            }
        }
    }
}

/// One container of `cpus` exclusive CPUs and `gpus` GPUs (the plugin's count; remap chooses).
fn gpu_request(cpus: u64, gpus: usize, topo: &Topology) -> Request {
    let mut r = request(1, cpus);
    r.allocated_gpus = topo.gpus[..gpus]
        .iter()
        .map(|g| g.pci_bus_id.clone())
        .collect();
    r
}

fn on_node(topo: &Topology, a: &Assignment, node: u32) -> usize {
    topo.node(node)
        .map_or(0, |n| a.cpus.intersection_len(&n.cpus))
}

#[test]
fn eight_gpus_on_dgx_h100_get_half_the_cpus_on_each_node() {
    let topo = Arc::new(shipped("dgx-h100"));
    let mut alloc = Allocator::new(topo.clone(), PlacementConfig::default());
    let mut req = gpu_request(120, 8, &topo);
    req.allocated_nics = topo.nics.iter().take(8).map(|n| n.name.clone()).collect();
    let a = alloc.place(&req).expect("placed");
    assert_eq!(a.cpus.len(), 120);
    for node in [0, 1] {
        let n = on_node(&topo, &a, node);
        assert!((58..=62).contains(&n), "node {node}: {n} CPUs ({})", a.cpus);
    }
}

#[test]
fn the_fifth_gpu_gets_cpus_on_its_node_and_pack_gives_it_none() {
    let topo = Arc::new(shipped("dgx-h100"));
    let req = gpu_request(20, 5, &topo);
    let a = Allocator::new(topo.clone(), PlacementConfig::default())
        .plan(&req)
        .expect("placed");
    let gpu_nodes: Vec<u32> = topo
        .gpus
        .iter()
        .filter(|g| a.gpus.contains(&g.pci_bus_id))
        .filter_map(|g| g.numa_node)
        .collect();
    let lone = [0, 1]
        .into_iter()
        .find(|n| gpu_nodes.iter().filter(|g| *g == n).count() == 1)
        .expect("one GPU alone on its node");
    assert!(on_node(&topo, &a, lone) >= 4, "{}", a.cpus);
    let pack = PlacementConfig {
        cpu_spread: CpuSpread::Pack,
        ..PlacementConfig::default()
    };
    let p = Allocator::new(topo.clone(), pack)
        .plan(&req)
        .expect("placed");
    assert_eq!(on_node(&topo, &p, lone), 0, "{}", p.cpus);
}

#[test]
fn a_container_annotation_picks_its_spread() {
    let topo = Arc::new(shipped("dgx-h100"));
    let mut req = gpu_request(120, 8, &topo);
    req.pod.annotations.insert(
        "cpu-spread.nri-align.io/container.main".into(),
        "pack".into(),
    );
    let a = Allocator::new(topo.clone(), PlacementConfig::default())
        .plan(&req)
        .expect("placed");
    assert_eq!(on_node(&topo, &a, 0), 112, "{}", a.cpus);
    req.pod
        .annotations
        .insert("cpu-spread.nri-align.io/pod".into(), "sideways".into());
    let err = Allocator::new(topo, PlacementConfig::default())
        .plan(&req)
        .expect_err("refused")
        .to_string();
    assert!(err.contains("by-device even pack"), "{err}");
}

/// A random host with `gpus` placed on the given node indices.
fn host_with_gpus(
    sockets: u32,
    per_socket: u32,
    cores: u32,
    threads: u32,
    gpus: &[u32],
) -> Topology {
    let mut topo = TopologyBuilder::new()
        .sockets(sockets)
        .numa_per_socket(per_socket)
        .cores(cores)
        .threads(threads)
        .build();
    let nodes = topo.numa_nodes.len() as u32;
    topo.gpus = gpus
        .iter()
        .enumerate()
        .map(|(i, n)| Gpu {
            index: i as u32,
            pci_bus_id: format!("0000:{:02x}:00.0", i + 1),
            numa_node: Some(n % nodes),
            uuid: None,
            minor: Some(i as u32),
            name: None,
            mig_enabled: None,
            mig_devices: Vec::new(),
            memory_node: None,
        })
        .collect();
    topo
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Through the allocator, GPUs kept where the device plugin put them: every chosen node
    /// holding GPUs gets its share by the rule (when the set holds every GPU's node).
    #[test]
    fn the_allocator_splits_by_device(
        sockets in 1u32..=2,
        per_socket in 1u32..=3,
        cores in 2u32..=8,
        threads in 1u32..=2,
        gpus in prop::collection::vec(0u32..6, 1..=6),
        frac in 0.05f64..0.9,
    ) {
        let topo = Arc::new(host_with_gpus(sockets, per_socket, cores, threads, &gpus));
        let total = topo.cpus.len() as f64;
        let k = ((total * frac) as u64).max(1);
        let config = PlacementConfig { gpu_mode: GpuMode::Keep, ..PlacementConfig::default() };
        let req = gpu_request(k, topo.gpus.len(), &topo);
        let Ok(a) = Allocator::new(topo.clone(), config).plan(&req) else {
            return Ok(());
        };
        let nodes: Vec<u32> = topo.gpus.iter().filter_map(|g| g.numa_node).collect();
        prop_assume!(nodes.iter().all(|n| a.numa_nodes.contains(*n)));
        // The map's lists make up the cpuset, without overlap.
        let mut union = CpuSet::new();
        for g in &a.device_map.gpus {
            prop_assert_eq!(g.cpus.intersection_len(&union), 0);
            union.extend_from(&g.cpus);
        }
        prop_assert_eq!(&union, &a.cpus);
        let step = threads as usize;
        for node in a.numa_nodes.iter() {
            let g = nodes.iter().filter(|n| **n == node).count();
            let cpus = topo.node(node).map_or(0, |n| n.cpus.len());
            let floor = (k as usize * g / nodes.len()).min(cpus);
            let have = on_node(&topo, &a, node);
            prop_assert!(have + step >= floor, "node {}: {} < {} - {}", node, have, floor, step);
        }
    }
}

#[test]
fn a_device_whose_node_is_unknown_counts_on_no_node() {
    // GPUs on node 0, node 1 and nowhere known: the split is 1:1, not 2:1 either way.
    let mut topo = host_with_gpus(2, 1, 8, 1, &[0, 1, 0]);
    topo.gpus[2].numa_node = None;
    let topo = Arc::new(topo);
    let config = PlacementConfig {
        gpu_mode: GpuMode::Keep,
        ..PlacementConfig::default()
    };
    let a = Allocator::new(topo.clone(), config)
        .plan(&gpu_request(8, 3, &topo))
        .expect("placed");
    assert_eq!(
        (on_node(&topo, &a, 0), on_node(&topo, &a, 1)),
        (4, 4),
        "{}",
        a.cpus
    );
}
