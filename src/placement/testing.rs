//! In-memory topologies for placement tests, benchmarks and examples: a small builder and the
//! shapes of the shipped emulated hosts (DGX-1 V100 cube mesh, DGX H100, EPYC NPS4, a
//! Grace-Hopper-like host with GPU memory as a NUMA node, a 16-node 1024-CPU host).

use crate::topology::{Cpu, CpuSet, Gpu, GpuLinks, Nic, NumaNode, PciDevice, PciKind, Topology};

const GIB: u64 = 1 << 30;

/// Where a device hangs.
#[derive(Debug, Clone)]
enum At {
    Node(u32),
    Switch(String),
}

/// Builds a [`Topology`] from a few numbers. CPU numbering is x86-style interleaved: the first
/// threads of all cores, then the second threads.
#[derive(Debug, Clone)]
pub struct TopologyBuilder {
    sockets: u32,
    numa_per_socket: u32,
    cores: u32,
    threads: u32,
    l3_per_numa: u32,
    memory: u64,
    distances: Option<Vec<Vec<u32>>>,
    memory_only: Vec<(String, u32, u64)>,
    switches: Vec<(String, u32, Option<String>)>,
    gpus: Vec<At>,
    nics: Vec<(String, At, bool)>,
    nvlink: Option<Vec<Vec<u32>>>,
    nvswitch: bool,
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
            distances: None,
            memory_only: Vec::new(),
            switches: Vec::new(),
            gpus: Vec::new(),
            nics: Vec::new(),
            nvlink: None,
            nvswitch: false,
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
    /// Memory per CPU node in GiB.
    pub fn memory_gib(mut self, g: u64) -> Self {
        self.memory = g * GIB;
        self
    }
    /// Full distance matrix (CPU nodes first, then memory-only nodes).
    pub fn distances(mut self, d: Vec<Vec<u32>>) -> Self {
        self.distances = Some(d);
        self
    }
    /// A memory-only node of `gib` GiB attached to CPU node `to`.
    pub fn memory_only(mut self, kind: &str, to: u32, gib: u64) -> Self {
        self.memory_only.push((kind.to_string(), to, gib * GIB));
        self
    }
    /// A PCIe switch below node `node`'s root complex, or below switch `parent`.
    pub fn switch(mut self, id: &str, node: u32, parent: Option<&str>) -> Self {
        self.switches
            .push((id.to_string(), node, parent.map(str::to_string)));
        self
    }
    /// A GPU under switch `sw`.
    pub fn gpu_on_switch(mut self, sw: &str) -> Self {
        self.gpus.push(At::Switch(sw.to_string()));
        self
    }
    /// A GPU directly on node `node`'s root complex.
    pub fn gpu_on_node(mut self, node: u32) -> Self {
        self.gpus.push(At::Node(node));
        self
    }
    /// An RDMA NIC under switch `sw`.
    pub fn nic_on_switch(mut self, name: &str, sw: &str) -> Self {
        self.nics
            .push((name.to_string(), At::Switch(sw.to_string()), true));
        self
    }
    /// A NIC directly on node `node`'s root complex (`rdma`: with an RDMA device).
    pub fn nic_on_node(mut self, name: &str, node: u32, rdma: bool) -> Self {
        self.nics.push((name.to_string(), At::Node(node), rdma));
        self
    }
    /// NVLink link counts between GPUs.
    pub fn nvlink(mut self, m: Vec<Vec<u32>>) -> Self {
        self.nvlink = Some(m);
        self
    }
    /// All GPUs on NVSwitch.
    pub fn nvswitch(mut self) -> Self {
        self.nvswitch = true;
        self
    }
    /// CPUs isolated with `isolcpus=`.
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
        let all_nodes = nodes as usize + self.memory_only.len();
        let socket_of = |n: u32| n / self.numa_per_socket;
        let mut numa_nodes = Vec::new();
        for n in 0..all_nodes as u32 {
            let is_mem = n >= nodes;
            let attached = |m: u32| {
                if m >= nodes {
                    self.memory_only[(m - nodes) as usize].1
                } else {
                    m
                }
            };
            let distances = (0..all_nodes as u32)
                .map(|m| match &self.distances {
                    Some(d) => d[n as usize][m as usize],
                    None if n == m => 10,
                    None if is_mem || m >= nodes => {
                        if attached(n) == attached(m) {
                            40
                        } else {
                            80
                        }
                    }
                    None if socket_of(n) == socket_of(m) => 12,
                    None => 21,
                })
                .collect();
            numa_nodes.push(NumaNode {
                id: n,
                cpus: if is_mem {
                    CpuSet::new()
                } else {
                    cpus.iter()
                        .filter(|c| c.numa_node == n)
                        .map(|c| c.id)
                        .collect()
                },
                memory_bytes: if is_mem {
                    self.memory_only[(n - nodes) as usize].2
                } else {
                    self.memory
                },
                hugepages: Vec::new(),
                distances,
                memory_kind: is_mem.then(|| self.memory_only[(n - nodes) as usize].0.clone()),
            });
        }
        let mut pci = Vec::new();
        let mut bus = 0x10u32;
        let mut next_bus = || {
            bus += 1;
            format!("0000:{:02x}:00.0", bus)
        };
        // Each switch: a root port on its node (or a downstream port of its parent) and an
        // upstream port; bridges are listed nearest first up to the root port.
        let mut sw_chain: Vec<(String, u32, Vec<String>)> = Vec::new();
        for (id, node, parent) in &self.switches {
            let above = match parent
                .as_ref()
                .and_then(|p| sw_chain.iter().find(|s| &s.0 == p))
            {
                Some((_, _, chain)) => {
                    let mut c = vec![next_bus()];
                    c.extend(chain.iter().cloned());
                    c
                }
                None => vec![next_bus()],
            };
            let mut chain = vec![next_bus()];
            chain.extend(above);
            sw_chain.push((id.clone(), *node, chain));
        }
        let mut place = |at: &At, kind: PciKind, class: u32, vendor: u16| -> (String, u32) {
            let bus_id = next_bus();
            let (node, bridges) = match at {
                At::Node(n) => (*n, vec![next_bus()]),
                At::Switch(s) => {
                    let (_, n, chain) = sw_chain.iter().find(|x| &x.0 == s).cloned().unwrap_or((
                        String::new(),
                        0,
                        Vec::new(),
                    ));
                    let mut b = vec![next_bus()];
                    b.extend(chain);
                    (n, b)
                }
            };
            for b in &bridges {
                if !pci.iter().any(|d: &PciDevice| &d.bus_id == b) {
                    pci.push(PciDevice {
                        bus_id: b.clone(),
                        vendor: 0x8086,
                        device: 0,
                        class: 0x060400,
                        kind: PciKind::Bridge,
                        numa_node: Some(node),
                        bridges: Vec::new(),
                        root_complex: format!("pci0000:{node:02x}"),
                    });
                }
            }
            pci.push(PciDevice {
                bus_id: bus_id.clone(),
                vendor,
                device: 0x2330,
                class,
                kind,
                numa_node: Some(node),
                bridges,
                root_complex: format!("pci0000:{node:02x}"),
            });
            (bus_id, node)
        };
        let gpus: Vec<Gpu> = self
            .gpus
            .iter()
            .enumerate()
            .map(|(i, at)| {
                let (bus, node) = place(at, PciKind::Gpu, 0x030200, 0x10de);
                Gpu {
                    index: i as u32,
                    pci_bus_id: bus,
                    numa_node: Some(node),
                    uuid: Some(format!("GPU-{i:08}")),
                    minor: Some(i as u32),
                    name: Some("Test GPU".into()),
                    mig_enabled: Some(false),
                }
            })
            .collect();
        let nics: Vec<Nic> = self
            .nics
            .iter()
            .enumerate()
            .map(|(i, (name, at, rdma))| {
                let (bus, node) = place(at, PciKind::Nic, 0x020700, 0x15b3);
                Nic {
                    name: name.clone(),
                    pci_bus_id: Some(bus),
                    numa_node: Some(node),
                    rdma_device: rdma.then(|| format!("mlx5_{i}")),
                    uverbs: if *rdma {
                        vec![format!("uverbs{i}")]
                    } else {
                        Vec::new()
                    },
                }
            })
            .collect();
        let n = gpus.len();
        let gpu_links = (self.nvswitch || self.nvlink.is_some()).then(|| GpuLinks {
            nvlink: self.nvlink.clone().unwrap_or_else(|| vec![vec![0; n]; n]),
            nvswitch: self.nvswitch,
        });
        Topology {
            source: "testing".into(),
            cpus,
            offline_cpus: CpuSet::new(),
            isolated_cpus: self.isolated,
            numa_nodes,
            pci_devices: pci,
            gpus,
            nics,
            gpu_links,
        }
    }
}

/// DGX-1 V100: 2 x 20 cores x 2 threads; GPUs in pairs under 4 PCIe switches with one IB NIC
/// each; the hybrid cube-mesh NVLink (quads 0-3 and 4-7 with NV1/NV2, plus 0-4, 1-5, 2-6, 3-7).
pub fn dgx1_v100() -> Topology {
    let nv = vec![
        vec![0, 1, 1, 2, 2, 0, 0, 0],
        vec![1, 0, 2, 1, 0, 2, 0, 0],
        vec![1, 2, 0, 2, 0, 0, 1, 0],
        vec![2, 1, 2, 0, 0, 0, 0, 1],
        vec![2, 0, 0, 0, 0, 1, 1, 2],
        vec![0, 2, 0, 0, 1, 0, 2, 1],
        vec![0, 0, 1, 0, 1, 2, 0, 2],
        vec![0, 0, 0, 1, 2, 1, 2, 0],
    ];
    let mut b = TopologyBuilder::new()
        .sockets(2)
        .cores(20)
        .threads(2)
        .memory_gib(256)
        .nvlink(nv);
    for s in 0..4 {
        b = b.switch(&format!("sw{s}"), s / 2, None);
    }
    for g in 0..8 {
        b = b.gpu_on_switch(&format!("sw{}", g / 2));
    }
    for s in 0..4 {
        b = b.nic_on_switch(&format!("ib{s}"), &format!("sw{s}"));
    }
    b.build()
}

/// DGX H100: 2 x 56 cores x 2 threads, 8 GPUs on NVSwitch, each with its own NIC under the same
/// PCIe switch (4 switches per socket).
pub fn dgx_h100() -> Topology {
    let mut b = TopologyBuilder::new()
        .sockets(2)
        .cores(56)
        .threads(2)
        .memory_gib(1024)
        .nvswitch();
    for s in 0..8 {
        b = b.switch(&format!("sw{s}"), s / 4, None);
    }
    for g in 0..8 {
        b = b.gpu_on_switch(&format!("sw{g}"));
    }
    for s in 0..8 {
        b = b.nic_on_switch(&format!("ibp{s}"), &format!("sw{s}"));
    }
    b.build()
}

/// A 2-socket host with 4 GPUs on PCIe only (two per switch, one switch per socket) and one
/// RDMA NIC per switch.
pub fn pcie_4gpu() -> Topology {
    TopologyBuilder::new()
        .sockets(2)
        .cores(16)
        .threads(2)
        .memory_gib(128)
        .switch("sw0", 0, None)
        .switch("sw1", 1, None)
        .gpu_on_switch("sw0")
        .gpu_on_switch("sw0")
        .gpu_on_switch("sw1")
        .gpu_on_switch("sw1")
        .nic_on_switch("ib0", "sw0")
        .nic_on_switch("ib1", "sw1")
        .build()
}

/// EPYC in NPS4: 2 sockets x 4 nodes x 16 cores x 2 threads, 2 L3 groups (CCX) per node,
/// distances 10 local, 11 neighbour, 12 same socket, 32 across sockets.
pub fn epyc_nps4() -> Topology {
    let d = (0..8)
        .map(|a: u32| {
            (0..8)
                .map(|b: u32| match (a, b) {
                    _ if a == b => 10,
                    _ if a / 4 != b / 4 => 32,
                    _ if a / 2 == b / 2 => 11,
                    _ => 12,
                })
                .collect()
        })
        .collect();
    TopologyBuilder::new()
        .sockets(2)
        .numa_per_socket(4)
        .cores(16)
        .threads(2)
        .l3_per_numa(2)
        .memory_gib(64)
        .distances(d)
        .build()
}

/// Grace-Hopper-like: 72 cores on node 0, the GPU's HBM as memory-only node 1.
pub fn grace_hopper() -> Topology {
    TopologyBuilder::new()
        .cores(72)
        .memory_gib(480)
        .memory_only("gpu", 0, 96)
        .gpu_on_node(0)
        .nic_on_node("ibp0", 0, true)
        .build()
}

/// 4 sockets x 4 nodes x 32 cores x 2 threads: 16 NUMA nodes, 1024 CPUs.
pub fn numa16_1024() -> Topology {
    TopologyBuilder::new()
        .sockets(4)
        .numa_per_socket(4)
        .cores(32)
        .threads(2)
        .l3_per_numa(4)
        .memory_gib(128)
        .build()
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
