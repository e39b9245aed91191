//! The host topology as placement sees it: CPUs, NUMA nodes, the PCI tree, GPUs, NICs and the
//! GPU interconnect. Produced by the sysfs reader, the hwloc XML importer and emulated host
//! descriptions; consumed by placement, the report and the plugin. Serialises to the JSON
//! contract of `nri-align topology --json`.

use serde::{Deserialize, Serialize};

use super::idset::{CpuSet, NodeSet};

/// Everything nri-align knows about one machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// Where the picture came from (`/`, a host root, an hwloc XML file, a description name).
    pub source: String,
    /// Online CPUs, sorted by id.
    pub cpus: Vec<Cpu>,
    /// CPUs present but offline (never placed on).
    pub offline_cpus: CpuSet,
    /// CPUs isolated from the scheduler (`isolcpus=`); placed on only when asked for exclusively.
    pub isolated_cpus: CpuSet,
    /// Online CPUs outside the cpuset containers are created under (the `kubepods` cgroup's,
    /// which systemd's `AllowedCPUs=` or a partitioned node can narrow): a container can never
    /// run there, so they are never placed on, as if offline (`sysfs::cpuset`).
    #[serde(default, skip_serializing_if = "CpuSet::is_empty")]
    pub outside_cpuset: CpuSet,
    /// NUMA nodes sorted by id; a machine without NUMA information gets one node 0.
    pub numa_nodes: Vec<NumaNode>,
    /// PCI functions of interest (GPUs, NICs, RDMA devices, and the bridges above them).
    pub pci_devices: Vec<PciDevice>,
    /// GPUs, sorted by index (NVML index when NVML is present, else PCI order).
    pub gpus: Vec<Gpu>,
    /// Network interfaces with a PCI function, plus their RDMA devices.
    pub nics: Vec<Nic>,
    /// GPU-to-GPU interconnect, when NVML (or an hwloc capture) reports it.
    pub gpu_links: Option<GpuLinks>,
}

/// One online logical CPU (hardware thread).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpu {
    /// Logical CPU id (`cpuN`).
    pub id: u32,
    /// Physical package (socket) id.
    pub package: u32,
    /// Die id within the package (0 where sysfs has none).
    pub die: u32,
    /// Core id as sysfs reports it (`topology/core_id`); unique only within a package.
    pub core: u32,
    /// NUMA node the CPU belongs to.
    pub numa_node: u32,
    /// L3 (uncore) cache group: the smallest CPU id sharing this CPU's L3, if cache info exists.
    pub l3_group: Option<u32>,
    /// Hardware threads of the same core, this one included.
    pub thread_siblings: CpuSet,
}

/// Huge pages of one size on one NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugePages {
    /// Page size in KiB (2048, 1048576).
    pub size_kb: u64,
    /// Pages configured.
    pub total: u64,
    /// Pages free at discovery time.
    pub free: u64,
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumaNode {
    /// Node id (`nodeN`); ids may be sparse.
    pub id: u32,
    /// Online CPUs of the node; empty for memory-only nodes.
    pub cpus: CpuSet,
    /// Total memory (`MemTotal` of the node's meminfo).
    pub memory_bytes: u64,
    /// Huge pages by size.
    pub hugepages: Vec<HugePages>,
    /// Distances to every node, in `Topology::numa_nodes` order (10 = local).
    pub distances: Vec<u32>,
    /// What backs a CPU-less node, when known ("hbm", "cxl", "gpu", "unknown"); `None` for nodes
    /// with CPUs. Memory-only nodes are never picked for CPU memory unless asked for.
    pub memory_kind: Option<String>,
}

impl NumaNode {
    /// Whether the node has memory but no CPUs (HBM, CXL, GPU memory exposed as NUMA).
    pub fn is_memory_only(&self) -> bool {
        self.cpus.is_empty()
    }
}

/// What a PCI function is, as far as placement cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PciKind {
    /// A host bridge / root port / switch port (class 0x0604 and friends).
    Bridge,
    /// A GPU (display/3D controller, NVIDIA vendor 0x10de or another GPU vendor).
    Gpu,
    /// A network controller (class 0x02), possibly with RDMA.
    Nic,
    /// Anything else kept for completeness (NVMe, NVSwitch).
    Other,
}

/// One PCI function and where it sits in the tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciDevice {
    /// Bus id in sysfs form, lowercase: `0000:1b:00.0`.
    pub bus_id: String,
    /// Vendor id (`0x10de` NVIDIA, `0x15b3` Mellanox).
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Class code (24 bits, `0x030200` 3D controller, `0x020000` Ethernet, `0x020700` InfiniBand).
    pub class: u32,
    /// Classification of `class` and `vendor`.
    pub kind: PciKind,
    /// NUMA node after resolving -1 through the parents or `local_cpulist`; `None` if unknowable.
    /// Where sysfs `numa_node` names a CPU node whose CPUs `local_cpulist` does not cover, this
    /// is the node `local_cpulist` covers (nearest by distance to the named one when it covers
    /// several), and [`PciDevice::sysfs_numa_node`] keeps what sysfs said.
    pub numa_node: Option<u32>,
    /// What sysfs `numa_node` said, only when it disagrees with `local_cpulist` and so was not
    /// used (firmware in SNC/NPS modes that reports the socket's first node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysfs_numa_node: Option<u32>,
    /// Bridges from the nearest parent up to the root port (bus ids), nearest first.
    pub bridges: Vec<String>,
    /// Root complex (host bridge) the device hangs off, as the sysfs directory name (`pci0000:00`).
    pub root_complex: String,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// Index (NVML order, which is PCI bus order on NVIDIA drivers).
    pub index: u32,
    /// PCI bus id in sysfs form, lowercase.
    pub pci_bus_id: String,
    /// NUMA node, `None` if unknown.
    pub numa_node: Option<u32>,
    /// GPU UUID (`GPU-...`), from NVML.
    pub uuid: Option<String>,
    /// Minor number: the device node is `/dev/nvidia<minor>`.
    pub minor: Option<u32>,
    /// Product name, when known.
    pub name: Option<String>,
    /// MIG mode enabled, when NVML says.
    pub mig_enabled: Option<bool>,
    /// The MIG devices configured on this GPU (NVML, while MIG mode is on), in slot order: a
    /// container given one of them is aligned to this GPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_devices: Vec<MigDevice>,
    /// The memory-only NUMA node holding this GPU's own memory, on coherent platforms that
    /// online it (Grace Hopper, GB200 in NUMA mode; the driver's `numa_status`); `None` where
    /// GPU memory is not a NUMA node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_node: Option<u32>,
}

/// One MIG device (a GPU instance with a compute instance) of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigDevice {
    /// Slot on the parent (`nvmlDeviceGetMigDeviceHandleByIndex`): the `<mig>` of the device
    /// plugin's `<gpu>:<mig>` ids.
    pub index: u32,
    /// `MIG-<uuid>`, as the device plugin hands it over.
    pub uuid: String,
    /// Profile (`1g.10gb`), from the device's NVML name, when it has one.
    pub profile: Option<String>,
}

/// One network interface backed by a PCI function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nic {
    /// Interface name (`/sys/class/net/NAME`); for RDMA-only ports, the RDMA device name.
    pub name: String,
    /// PCI bus id in sysfs form.
    pub pci_bus_id: Option<String>,
    /// NUMA node, `None` if unknown.
    pub numa_node: Option<u32>,
    /// RDMA device (`/sys/class/infiniband/NAME`), e.g. `mlx5_0`.
    pub rdma_device: Option<String>,
    /// uverbs character devices of the RDMA device (`uverbs0` -> `/dev/infiniband/uverbs0`).
    pub uverbs: Vec<String>,
}

/// How two PCI devices are connected, in `nvidia-smi topo -m` terms, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PcieLevel {
    /// The same device.
    #[serde(rename = "X")]
    Same,
    /// At most a single PCIe switch between them.
    #[serde(rename = "PIX")]
    SingleSwitch,
    /// Multiple PCIe switches, without crossing a host bridge.
    #[serde(rename = "PXB")]
    MultipleSwitches,
    /// Through a PCIe host bridge (same root complex).
    #[serde(rename = "PHB")]
    HostBridge,
    /// Different root complexes within one NUMA node.
    #[serde(rename = "NODE")]
    SameNuma,
    /// Across NUMA nodes / the socket interconnect.
    #[serde(rename = "SYS")]
    CrossSocket,
}

impl PcieLevel {
    /// The `nvidia-smi topo -m` abbreviation.
    pub fn label(self) -> &'static str {
        match self {
            PcieLevel::Same => "X",
            PcieLevel::SingleSwitch => "PIX",
            PcieLevel::MultipleSwitches => "PXB",
            PcieLevel::HostBridge => "PHB",
            PcieLevel::SameNuma => "NODE",
            PcieLevel::CrossSocket => "SYS",
        }
    }
}

/// GPU interconnect, indexed by position in `Topology::gpus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuLinks {
    /// Active NVLink links between each pair (0 = none; the diagonal is 0).
    pub nvlink: Vec<Vec<u32>>,
    /// GPUs that reach each other through NVSwitch (all-to-all at full bandwidth).
    pub nvswitch: bool,
}

impl Topology {
    /// Index into `numa_nodes` of node `id`.
    ///
    /// Node ids are unique and almost always equal to their index (sysfs numbers nodes
    /// 0..n), so that slot is tried first: [`Topology::distance`] calls this twice per lookup
    /// and placement's node-set growth asks for O(nodes^2) distances per seed, which made a
    /// 64-node decision spend most of its time scanning this list (the scaling bench).
    pub fn node_index(&self, id: u32) -> Option<usize> {
        match self.numa_nodes.get(id as usize) {
            Some(n) if n.id == id => Some(id as usize),
            _ => self.numa_nodes.iter().position(|n| n.id == id),
        }
    }

    /// The node with id `id`.
    pub fn node(&self, id: u32) -> Option<&NumaNode> {
        self.node_index(id).map(|i| &self.numa_nodes[i])
    }

    /// All online CPUs.
    pub fn online_cpus(&self) -> CpuSet {
        self.cpus.iter().map(|c| c.id).collect()
    }

    /// Ids of the nodes with CPUs.
    pub fn cpu_nodes(&self) -> NodeSet {
        self.numa_nodes
            .iter()
            .filter(|n| !n.is_memory_only())
            .map(|n| n.id)
            .collect()
    }

    /// The memory nodes (`cpuset.mems`) for containers placed on `nodes`: each node with
    /// memory stands for itself; a node with CPUs but no memory (memory-side initiators, CXL
    /// and HBM systems, where the kernel would refuse it in `cpuset.mems`) is replaced by the
    /// nearest node that has memory (ties: a node with CPUs first, then the lowest id). When no
    /// node reports any memory (a description or tree without meminfo), nothing is replaced.
    pub fn memory_nodes_for(&self, nodes: &NodeSet) -> NodeSet {
        let with_memory: Vec<&NumaNode> = self
            .numa_nodes
            .iter()
            .filter(|n| n.memory_bytes > 0)
            .collect();
        if with_memory.is_empty() {
            return nodes.clone();
        }
        nodes
            .iter()
            .map(|id| match self.node(id) {
                Some(n) if n.memory_bytes == 0 => with_memory
                    .iter()
                    .min_by_key(|m| (self.distance(id, m.id), m.is_memory_only(), m.id))
                    .map_or(id, |m| m.id),
                _ => id,
            })
            .collect()
    }

    /// Distance between nodes `a` and `b` (10 when unknown and equal, 20 when unknown).
    pub fn distance(&self, a: u32, b: u32) -> u32 {
        let d = self
            .node_index(a)
            .zip(self.node_index(b))
            .and_then(|(ia, ib)| self.numa_nodes[ia].distances.get(ib).copied());
        d.unwrap_or(if a == b { 10 } else { 20 })
    }

    /// The PCI function with bus id `bus_id` (sysfs form).
    pub fn pci(&self, bus_id: &str) -> Option<&PciDevice> {
        self.pci_devices.iter().find(|d| d.bus_id == bus_id)
    }

    /// How two PCI functions are connected. Unknown devices count as cross-socket.
    pub fn pcie_level(&self, a: &str, b: &str) -> PcieLevel {
        if a == b {
            return PcieLevel::Same;
        }
        let (Some(da), Some(db)) = (self.pci(a), self.pci(b)) else {
            return PcieLevel::CrossSocket;
        };
        if da.root_complex != db.root_complex {
            return match (da.numa_node, db.numa_node) {
                (Some(x), Some(y)) if x == y => PcieLevel::SameNuma,
                _ => PcieLevel::CrossSocket,
            };
        }
        // Same root complex: count the bridges below the deepest common one. The chains run
        // nearest-first up to the root port; the shared suffix is the common path.
        let common = da
            .bridges
            .iter()
            .rev()
            .zip(db.bridges.iter().rev())
            .take_while(|(x, y)| x == y)
            .count();
        if common == 0 {
            return PcieLevel::HostBridge;
        }
        // Below the lowest common bridge, each side may pass through further switch ports.
        // A single switch (the common upstream port and its downstream ports) is PIX.
        let below = (da.bridges.len() - common).max(db.bridges.len() - common);
        if below <= 1 {
            PcieLevel::SingleSwitch
        } else {
            PcieLevel::MultipleSwitches
        }
    }
}
