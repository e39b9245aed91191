//! The kubelet's own take cases, each row written from a case of kubernetes/kubernetes
//! `pkg/kubelet/cm/cpumanager/cpu_assignment_test.go` (`commonTakeByTopologyTestCases` and
//! `TestTakeByTopologyNUMAPacked`; the row's comment names the case), on the same test
//! topologies.

use super::*;
use align_core::topology::{Cpu, NumaNode};

/// A topology as the kubelet's tests describe one: CPU `i` of `n` sits on socket, NUMA node and
/// core `place(i)`, the core's threads being the CPUs with the same core id.
pub(crate) fn kubelet_topo(n: u32, place: impl Fn(u32) -> (u32, u32, u32)) -> Topology {
    let cpus: Vec<Cpu> = (0..n)
        .map(|i| {
            let (socket, numa, core) = place(i);
            Cpu {
                id: i,
                package: socket,
                die: 0,
                core,
                numa_node: numa,
                l3_group: None,
                thread_siblings: (0..n).filter(|j| place(*j).2 == core).collect(),
            }
        })
        .collect();
    let nodes = cpus.iter().map(|c| c.numa_node).max().map_or(0, |m| m + 1);
    let numa_nodes = (0..nodes)
        .map(|id| NumaNode {
            id,
            cpus: cpus
                .iter()
                .filter(|c| c.numa_node == id)
                .map(|c| c.id)
                .collect(),
            memory_bytes: 64 << 30,
            hugepages: Vec::new(),
            distances: (0..nodes).map(|m| if m == id { 10 } else { 20 }).collect(),
            memory_kind: None,
        })
        .collect();
    Topology {
        source: "kubelet-test".into(),
        cpus,
        offline_cpus: CpuSet::new(),
        isolated_cpus: CpuSet::new(),
        outside_cpuset: CpuSet::new(),
        numa_nodes,
        pci_devices: Vec::new(),
        gpus: Vec::new(),
        nics: Vec::new(),
        gpu_links: None,
    }
}

/// `topoSingleSocketHT`: 1 socket, 4 cores, CPU i and i+4 are one core.
pub(crate) fn single_socket_ht() -> Topology {
    kubelet_topo(8, |i| (0, 0, i % 4))
}

/// `topoDualSocketHT`: 2 sockets (one NUMA node each), 6 cores; even CPUs on socket 0, CPU i
/// and i+6 are one core.
pub(crate) fn dual_socket_ht() -> Topology {
    kubelet_topo(12, |i| (i % 2, i % 2, i % 6))
}

/// `topoDualSocketMultiNumaPerSocketHT`: 2 sockets of 2 NUMA nodes, 10 cores a node; CPU i and
/// i+40 are one core, nodes hold 0-9, 10-19, 20-29, 30-39 and their siblings.
pub(crate) fn dual_socket_multi_numa_ht() -> Topology {
    kubelet_topo(80, |i| {
        let core = i % 40;
        (core / 20, core / 10, core)
    })
}

fn set(s: &str) -> CpuSet {
    s.parse().expect("cpu list")
}

/// One row: `k` CPUs of `avail` on `topo` are `want` (empty: the kubelet fails the take).
fn row(name: &str, topo: &Topology, avail: &str, k: u32, want: &str) {
    let got = take_packed(topo, &set(avail), k).unwrap_or_default();
    assert_eq!(
        got,
        set(want),
        "{name}: got {got}, the kubelet takes {want}"
    );
}

#[test]
fn the_kubelets_take_by_topology_rows() {
    let single = single_socket_ht();
    let dual = dual_socket_ht();
    let multi = dual_socket_multi_numa_ht();
    // "take more cpus than are available from single socket with HT"
    assert!(take_packed(&single, &set("0,2,4,6"), 5).is_none());
    // "take zero cpus from single socket with HT"
    row("zero", &single, "0-7", 0, "");
    // "take one cpu from single socket with HT"
    row("one", &single, "0-7", 1, "0");
    // "take one cpu from single socket with HT, some cpus are taken": the half-used core 2/6.
    row("one, some taken", &single, "1,3,5,6,7", 1, "6");
    // "take two cpus from single socket with HT": a whole core.
    row("two", &single, "0-7", 2, "0,4");
    // "take all cpus from single socket with HT"
    row("all", &single, "0-7", 8, "0-7");
    // "take two cpus from single socket with HT, only one core totally free"
    row("two, one core free", &single, "0,1,2,3,6", 2, "2,6");
    // "take one cpu from dual socket with HT - core from Socket 0": the fuller socket.
    row("one, socket 0", &dual, "1,2,3,4,5,7,8,9,10,11", 1, "2");
    // "take a socket of cpus from dual socket with HT"
    row("a socket", &dual, "0-11", 6, "0,2,4,6,8,10");
    // "take a socket of cpus from dual socket with multi-numa-per-socket with HT"
    row("a socket, multi-numa", &multi, "0-79", 40, "0-19,40-59");
    // "take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT"
    row("a NUMA node", &multi, "0-79", 20, "0-9,40-49");
    // "... with HT, with 1 NUMA node already taken"
    row(
        "a NUMA node, 1 taken",
        &multi,
        "10-39,50-79",
        20,
        "10-19,50-59",
    );
    // "take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT"
    row("a socket and a NUMA node", &multi, "0-79", 60, "0-29,40-69");
    // "... a core taken" (the first physical core, 0 and 40, reserved)
    row(
        "socket and node, a core taken",
        &multi,
        "1-39,41-79",
        60,
        "10-39,50-79",
    );
    // TestTakeByTopologyNUMAPacked: "allocate 4 full cores with 3 coming from the first NUMA
    // node (filling it up) and 1 coming from the second NUMA node"
    row("4 full cores", &dual, "0-11", 8, "0,6,2,8,4,10,1,7");
    // TestTakeByTopologyNUMAPacked: "allocate 32 full cores with 30 coming from the first 3
    // NUMA nodes (filling them up) and 2 coming from the fourth NUMA node"
    row(
        "32 full cores",
        &multi,
        "0-79",
        64,
        "0-29,40-69,30,31,70,71",
    );
}
