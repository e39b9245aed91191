//! The per-device map on shipped hosts: disjoint lists that make up the cpuset, each GPU's
//! CPUs on its node, GB200's HBM nodes only where asked for.

use std::sync::Arc;

use super::*;
use crate::placement::test_requests::request;
use crate::placement::{Allocator, Assignment, CpuSpread, PlacementConfig, Request};
use crate::topology::testing::shipped;

fn gpu_request(cpus: u64, gpus: usize, topo: &Topology) -> Request {
    let mut r = request(1, cpus);
    r.allocated_gpus = topo.gpus[..gpus]
        .iter()
        .map(|g| g.pci_bus_id.clone())
        .collect();
    r
}

fn plan(topo: &Arc<Topology>, req: &Request, config: PlacementConfig) -> Assignment {
    Allocator::new(topo.clone(), config)
        .plan(req)
        .expect("placed")
}

/// The lists are disjoint and their union is the cpuset.
fn assert_partition(a: &Assignment) {
    let mut union = CpuSet::new();
    for g in &a.device_map.gpus {
        assert_eq!(g.cpus.intersection_len(&union), 0, "{:?}", a.device_map);
        union.extend_from(&g.cpus);
    }
    assert_eq!(union, a.cpus);
}

fn node_of(topo: &Topology, bus: &str) -> u32 {
    topo.gpus
        .iter()
        .find(|g| g.pci_bus_id == bus)
        .and_then(|g| g.numa_node)
        .expect("GPU node")
}

#[test]
fn eight_gpus_each_get_cpus_of_their_own_node() {
    let topo = Arc::new(shipped("dgx-h100"));
    let a = plan(
        &topo,
        &gpu_request(120, 8, &topo),
        PlacementConfig::default(),
    );
    assert_partition(&a);
    let ordinals: Vec<u32> = a.device_map.gpus.iter().map(|g| g.ordinal).collect();
    assert_eq!(ordinals, (0..8).collect::<Vec<_>>());
    for g in &a.device_map.gpus {
        let node = topo.node(node_of(&topo, &g.pci_bus_id)).expect("node");
        assert!(g.cpus.is_subset(&node.cpus), "{g:?}");
        // 60 CPUs a node, 30 cores over 4 GPUs: whole cores, 7 or 8 each.
        assert!([14, 16].contains(&g.cpus.len()), "{g:?}");
        assert_eq!(g.mems, [node.id].into_iter().collect());
    }
    let env = a.device_map.gpu_cpus();
    assert_eq!(env.split(';').count(), 8, "{env}");
    // The example docs/usage.md shows.
    assert!(
        env.starts_with(
            "0:0-6,112-118;1:7-14,119-126;2:15-21,127-133;3:22-29,134-141;4:56-62,168-174;"
        ),
        "{env}"
    );
    assert!(env.ends_with(";7:78-85,190-197"), "{env}");
    assert_eq!(a.device_map.gpu_mems().split(';').next(), Some("0:0"));
}

#[test]
fn a_gpu_without_cpus_on_its_node_gets_some_of_the_closest_node() {
    let topo = Arc::new(shipped("dgx-h100"));
    let pack = PlacementConfig {
        cpu_spread: CpuSpread::Pack,
        ..PlacementConfig::default()
    };
    let a = plan(&topo, &gpu_request(20, 5, &topo), pack);
    assert_partition(&a);
    // Every CPU is on node 0: the five GPUs share them, two cores each.
    for g in &a.device_map.gpus {
        assert_eq!(g.cpus.len(), 4, "{:?}", a.device_map);
    }
}

#[test]
fn nics_get_their_nodes_cpus() {
    let topo = Arc::new(shipped("dgx-h100"));
    let mut req = gpu_request(120, 8, &topo);
    req.allocated_nics = topo.nics.iter().take(8).map(|n| n.name.clone()).collect();
    let a = plan(&topo, &req, PlacementConfig::default());
    assert_eq!(a.device_map.nics.len(), 8);
    for n in &a.device_map.nics {
        let node = topo
            .nics
            .iter()
            .find(|x| x.name == n.name)
            .and_then(|x| x.numa_node)
            .and_then(|id| topo.node(id))
            .expect("NIC node");
        assert_eq!(n.cpus, a.cpus.intersection(&node.cpus), "{n:?}");
    }
    assert!(a.device_map.nic_cpus().contains(&format!("{}:", a.nics[0])));
}

fn gb200(host: &str, with_memory_only: bool) -> (Topology, Assignment) {
    let topo = Arc::new(shipped(host));
    let mut req = gpu_request(16, 4, &topo);
    if with_memory_only {
        req.pod
            .annotations
            .insert("mems.nri-align.io/pod".into(), "with-memory-only".into());
    }
    let a = plan(&topo, &req, PlacementConfig::default());
    ((*topo).clone(), a)
}

#[test]
fn gb200_in_numa_mode_names_each_gpus_own_hbm_node() {
    let (topo, a) = gb200("gb200-nvl4-numa", true);
    assert_eq!(a.device_map.gpus.len(), 4);
    for g in &a.device_map.gpus {
        let gpu = topo
            .gpus
            .iter()
            .find(|x| x.pci_bus_id == g.pci_bus_id)
            .expect("GPU");
        let own = gpu.memory_node.expect("HBM node");
        assert!(g.mems.contains(own), "{g:?}");
        let others: Vec<u32> = topo
            .gpus
            .iter()
            .filter(|x| x.pci_bus_id != g.pci_bus_id)
            .filter_map(|x| x.memory_node)
            .collect();
        assert!(others.iter().all(|m| !g.mems.contains(*m)), "{g:?}");
        assert!(g.mems.contains(gpu.numa_node.expect("CPU node")), "{g:?}");
    }
    // Without the annotation the HBM nodes stay out.
    let (topo, a) = gb200("gb200-nvl4-numa", false);
    for g in &a.device_map.gpus {
        assert!(
            g.mems
                .iter()
                .all(|m| topo.node(m).is_some_and(|n| !n.is_memory_only())),
            "{g:?}"
        );
    }
}

#[test]
fn gb200_in_cdmm_mode_names_cpu_nodes_only() {
    let (topo, a) = gb200("gb200-nvl4-cdmm", true);
    assert_eq!(a.device_map.gpus.len(), 4);
    for g in &a.device_map.gpus {
        assert!(!g.mems.is_empty());
        assert!(
            g.mems
                .iter()
                .all(|m| topo.node(m).is_some_and(|n| !n.is_memory_only())),
            "{g:?}"
        );
    }
}

#[test]
fn a_container_without_devices_has_no_map() {
    let topo = Arc::new(shipped("dgx-h100"));
    let a = plan(&topo, &request(1, 4), PlacementConfig::default());
    assert!(a.device_map.is_empty());
    assert_eq!(a.device_map.gpu_cpus(), "");
}
