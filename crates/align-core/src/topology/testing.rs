//! Topologies for tests and benchmarks (only with `cfg(test)` or the `testing` feature): the
//! shipped host descriptions as the CLI sees them, and a small builder for ad-hoc CPU shapes.
//! Hosts with devices come from descriptions (`packaging/hosts/`, or
//! `HostDesc::from_yaml`), so every test, bench and `emulate` reads one source.

use super::{Cpu, CpuSet, NumaNode, Topology};

const GIB: u64 = 1 << 30;

/// The topology of the shipped description `name` (`packaging/hosts/NAME.yaml`, built in), as
/// `simulate --host NAME` sees it.
///
/// # Panics
/// When `name` is not shipped or does not validate (a test fixture bug).
pub fn shipped(name: &str) -> Topology {
    let text = super::desc::shipped::text(name)
        .unwrap_or_else(|| panic!("no shipped description {name:?}"));
    match super::desc::HostDesc::from_yaml(text) {
        Ok(desc) => desc.to_topology(),
        Err(e) => panic!("shipped description {name}: {e}"),
    }
}

/// The GPU hosts the GPU search's tests run on: the three 16-GPU fixtures (twins everywhere)
/// and the shipped 8-GPU hosts (none on the DGX-1V's cube mesh).
pub const GPU_HOSTS: [&str; 5] = [
    "dgx2-like",
    "hgx16-nvswitch",
    "islands16",
    "dgx1-v100",
    "dgx-h100",
];

/// The host description `name` from the test fixtures (`tests/fixtures/hosts/NAME.yaml`: hosts
/// only tests and benches use, such as the 16-GPU ones), else the shipped one of that name.
pub fn fixture_or_shipped(name: &str) -> Topology {
    let path = format!(
        "{}/../../tests/fixtures/hosts/{name}.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    match std::fs::read_to_string(&path) {
        Ok(text) => match super::desc::HostDesc::from_yaml(&text) {
            Ok(desc) => desc.to_topology(),
            Err(e) => panic!("fixture {path}: {e}"),
        },
        Err(_) => shipped(name),
    }
}

/// Builds a CPU-and-memory [`Topology`] from a few numbers. CPU numbering is x86-style
/// interleaved: the first threads of all cores, then the second threads. Distances are 10 on
/// the node, 12 within a socket, 21 across.
#[derive(Debug, Clone)]
pub struct TopologyBuilder {
    sockets: u32,
    numa_per_socket: u32,
    cores: u32,
    threads: u32,
    l3_per_numa: u32,
    memory: u64,
    isolated: CpuSet,
}

impl Default for TopologyBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl TopologyBuilder {
    /// One socket, one node, 4 cores, no SMT, 16 GiB.
    pub fn new() -> Self {
        Self {
            sockets: 1,
            numa_per_socket: 1,
            cores: 4,
            threads: 1,
            l3_per_numa: 1,
            memory: 16 * GIB,
            isolated: CpuSet::new(),
        }
    }
    /// Sockets.
    pub fn sockets(mut self, n: u32) -> Self {
        self.sockets = n;
        self
    }
    /// NUMA nodes per socket.
    pub fn numa_per_socket(mut self, n: u32) -> Self {
        self.numa_per_socket = n;
        self
    }
    /// Cores per NUMA node.
    pub fn cores(mut self, n: u32) -> Self {
        self.cores = n;
        self
    }
    /// Threads per core.
    pub fn threads(mut self, n: u32) -> Self {
        self.threads = n;
        self
    }
    /// L3 groups per NUMA node.
    pub fn l3_per_numa(mut self, n: u32) -> Self {
        self.l3_per_numa = n;
        self
    }
    /// Memory per NUMA node in GiB.
    pub fn memory_gib(mut self, g: u64) -> Self {
        self.memory = g * GIB;
        self
    }
    /// Isolated CPUs (Linux list).
    pub fn isolated(mut self, cpus: &str) -> Self {
        self.isolated = cpus.parse().unwrap_or_default();
        self
    }

    /// The topology.
    pub fn build(self) -> Topology {
        let nodes = self.sockets * self.numa_per_socket;
        let total_cores = nodes * self.cores;
        let cores_per_l3 = (self.cores / self.l3_per_numa.max(1)).max(1);
        let mut cpus = Vec::new();
        for t in 0..self.threads {
            for c in 0..total_cores {
                let node = c / self.cores;
                let in_node = c % self.cores;
                let first_of_l3 = node * self.cores + (in_node / cores_per_l3) * cores_per_l3;
                cpus.push(Cpu {
                    id: t * total_cores + c,
                    package: node / self.numa_per_socket,
                    die: 0,
                    core: c % (self.cores * self.numa_per_socket),
                    numa_node: node,
                    l3_group: Some(first_of_l3),
                    thread_siblings: (0..self.threads).map(|s| s * total_cores + c).collect(),
                });
            }
        }
        cpus.sort_by_key(|c| c.id);
        let socket_of = |n: u32| n / self.numa_per_socket;
        let numa_nodes = (0..nodes)
            .map(|n| NumaNode {
                id: n,
                cpus: cpus
                    .iter()
                    .filter(|c| c.numa_node == n)
                    .map(|c| c.id)
                    .collect(),
                memory_bytes: self.memory,
                hugepages: Vec::new(),
                distances: (0..nodes)
                    .map(|m| match m {
                        _ if m == n => 10,
                        _ if socket_of(n) == socket_of(m) => 12,
                        _ => 21,
                    })
                    .collect(),
                memory_kind: None,
            })
            .collect();
        Topology {
            source: "testing".into(),
            cpus,
            offline_cpus: CpuSet::new(),
            isolated_cpus: self.isolated,
            outside_cpuset: CpuSet::new(),
            numa_nodes,
            pci_devices: Vec::new(),
            gpus: Vec::new(),
            nics: Vec::new(),
            gpu_links: None,
        }
    }
}

/// A 2-node host with 8 cores x 2 threads per node.
pub fn two_node() -> Topology {
    TopologyBuilder::new()
        .sockets(2)
        .cores(8)
        .threads(2)
        .memory_gib(64)
        .build()
}
