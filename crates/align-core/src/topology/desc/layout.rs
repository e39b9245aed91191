//! The concrete machine a description stands for: every CPU's place, every node's memory and
//! distances, and the PCI tree with deterministic bus numbers. The tree writer, the NVML fixture,
//! QEMU arguments and `to_topology` all read this one layout, so they cannot disagree.

use super::pcitree::{Builder, FuncRole, HostBridge, LayoutFunc, Slot};
use super::uuid::uuid_of_seed;
use super::{CpuNumbering, HostDesc, NvlinkDesc};
use crate::topology::idset::CpuSet;
use crate::topology::model::{
    Cpu, Gpu, GpuLinks, HugePages, Nic, NumaNode, PciDevice, PciKind, Topology,
};

/// One logical CPU, online or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutCpu {
    /// Logical id.
    pub id: u32,
    /// Package (socket).
    pub package: u32,
    /// Core id within the package (sysfs `core_id`).
    pub core_id: u32,
    /// Core number across the machine.
    pub core_index: u32,
    /// NUMA node.
    pub node: u32,
    /// L3 group number across the machine.
    pub l3_index: u32,
    /// Whether the CPU is online.
    pub online: bool,
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq)]
pub struct LayoutNode {
    /// Node id.
    pub id: u32,
    /// Online CPUs.
    pub cpus: CpuSet,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// 2 MiB pages configured.
    pub hugepages_2m: u64,
    /// Distances to every node in id order.
    pub distances: Vec<u32>,
    /// Backing of a memory-only node.
    pub kind: Option<String>,
}

/// The concrete machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// All CPUs (online and offline) by id.
    pub cpus: Vec<LayoutCpu>,
    /// All nodes by id.
    pub nodes: Vec<LayoutNode>,
    /// Host bridges in bus order.
    pub host_bridges: Vec<HostBridge>,
    /// PCI functions in depth-first (bus) order.
    pub funcs: Vec<LayoutFunc>,
    /// Function of each GPU, in GPU index order.
    pub gpu_funcs: Vec<usize>,
    /// Function of each NIC, in description order.
    pub nic_funcs: Vec<usize>,
    /// Function of each NVSwitch chip.
    pub nvswitch_funcs: Vec<usize>,
    /// For each GPU, the NVLink links in link order: `Some(peer)` is another GPU's index,
    /// `None` a link into NVSwitch chip `nvswitch_link_chip[gpu][link]`.
    pub gpu_link_peers: Vec<Vec<LinkPeer>>,
}

/// The far end of one NVLink link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkPeer {
    /// Another GPU (its index).
    Gpu(usize),
    /// An NVSwitch chip (its number).
    NvSwitch(usize),
}

impl HostDesc {
    /// The in-memory topology this description stands for: what the sysfs reader must return
    /// for the emulated tree (before NVML enrichment adds UUIDs and links, which this already has).
    ///
    /// Descriptions from [`HostDesc::load`] are validated; one whose PCI tree cannot be laid out
    /// gives a topology with only its name.
    pub fn to_topology(&self) -> Topology {
        match Layout::new(self) {
            Ok(layout) => layout.to_topology(self),
            Err(_) => Topology {
                source: format!("emulated:{}", self.name),
                ..Default::default()
            },
        }
    }
}

impl Layout {
    /// Lays out a validated description; fails only on PCI trees that do not fit (over 256 buses,
    /// pinned bus ids out of depth-first order, over 32 devices below one switch).
    pub fn new(desc: &HostDesc) -> Result<Layout, String> {
        let cpus = lay_cpus(desc);
        let nodes = lay_nodes(desc, &cpus);
        let mut b = Builder::new(desc);
        for node in 0..desc.cpu_node_count() {
            let mut tops = b.children(None, node);
            tops.sort_by_key(|s| b.key(*s));
            // Slots sharing a host bridge name go together, where the first of them sorts.
            let mut done = vec![false; tops.len()];
            for i in 0..tops.len() {
                if done[i] {
                    continue;
                }
                let group: Vec<Slot> = match b.host_bridge_of(tops[i]) {
                    None => vec![tops[i]],
                    Some(name) => (i..tops.len())
                        .filter(|&j| !done[j] && b.host_bridge_of(tops[j]) == Some(name))
                        .map(|j| tops[j])
                        .collect(),
                };
                for (j, t) in tops.iter().enumerate() {
                    if group.contains(t) {
                        done[j] = true;
                    }
                }
                b.place_host_bridge(node, &group)?;
            }
        }
        let chips = match desc.nvlink {
            NvlinkDesc::Nvswitch { chips, .. } => chips as usize,
            _ => 0,
        };
        if chips > 0 {
            let all: Vec<Slot> = (0..chips).map(Slot::NvSwitch).collect();
            b.place_host_bridge(0, &all)?;
        }
        let find = |want: FuncRole| b.funcs.iter().position(|f| f.role == want);
        let gpu_funcs: Vec<usize> = (0..desc.gpus.len())
            .filter_map(|i| find(FuncRole::Gpu(i)))
            .collect();
        let nic_funcs = (0..desc.nics.len())
            .filter_map(|i| find(FuncRole::Nic(i)))
            .collect();
        let nvswitch_funcs = (0..chips)
            .filter_map(|i| find(FuncRole::NvSwitch(i)))
            .collect();
        // NVML orders GPUs by bus id; descriptions must list them the same way.
        for w in gpu_funcs.windows(2) {
            if b.funcs[w[0]].bus_id > b.funcs[w[1]].bus_id {
                return Err(format!(
                    "GPU bus ids must increase with the GPU index ({} comes before {})",
                    b.funcs[w[0]].bus_id, b.funcs[w[1]].bus_id
                ));
            }
        }
        Ok(Layout {
            cpus,
            nodes,
            host_bridges: b.host_bridges,
            funcs: b.funcs,
            gpu_funcs,
            nic_funcs,
            nvswitch_funcs,
            gpu_link_peers: link_peers(desc),
        })
    }

    /// Bridges from `f`'s parent up to its root port, nearest first.
    pub fn bridge_chain(&self, f: usize) -> Vec<usize> {
        let mut chain = Vec::new();
        let mut cur = self.funcs.get(f).and_then(|x| x.parent);
        while let Some(p) = cur {
            chain.push(p);
            cur = self.funcs.get(p).and_then(|x| x.parent);
        }
        chain
    }

    /// Online CPUs of node `node`.
    pub fn node_cpus(&self, node: u32) -> CpuSet {
        self.nodes
            .get(node as usize)
            .map(|n| n.cpus.clone())
            .unwrap_or_default()
    }

    /// Online CPUs of the same core as `cpu`.
    pub fn thread_siblings(&self, cpu: &LayoutCpu) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| c.online && c.core_index == cpu.core_index)
            .map(|c| c.id)
            .collect()
    }

    /// Online CPUs sharing `cpu`'s L3.
    pub fn l3_siblings(&self, cpu: &LayoutCpu) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| c.online && c.l3_index == cpu.l3_index)
            .map(|c| c.id)
            .collect()
    }

    /// Online CPUs of `cpu`'s package.
    pub fn package_cpus(&self, package: u32) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| c.online && c.package == package)
            .map(|c| c.id)
            .collect()
    }

    /// NVLink link counts between GPU pairs; a pair on NVSwitch counts the smaller of the two
    /// GPUs' fabric links (what `nvidia-smi topo -m` prints as NV18 on DGX H100).
    pub fn nvlink_matrix(&self) -> Vec<Vec<u32>> {
        let n = self.gpu_link_peers.len();
        let fabric: Vec<u32> = self
            .gpu_link_peers
            .iter()
            .map(|l| {
                l.iter()
                    .filter(|p| matches!(p, LinkPeer::NvSwitch(_)))
                    .count() as u32
            })
            .collect();
        (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| {
                        if i == j {
                            return 0;
                        }
                        let direct = self.gpu_link_peers[i]
                            .iter()
                            .filter(|p| **p == LinkPeer::Gpu(j))
                            .count() as u32;
                        direct + fabric[i].min(fabric[j])
                    })
                    .collect()
            })
            .collect()
    }

    /// The topology model of the described machine, NVML data included.
    pub fn to_topology(&self, desc: &HostDesc) -> Topology {
        let cpus = self
            .cpus
            .iter()
            .filter(|c| c.online)
            .map(|c| Cpu {
                id: c.id,
                package: c.package,
                die: 0,
                core: c.core_id,
                numa_node: c.node,
                l3_group: self.l3_siblings(c).first(),
                thread_siblings: self.thread_siblings(c),
            })
            .collect();
        let numa_nodes = self.nodes.iter().map(numa_node).collect();
        let mut pci_devices: Vec<PciDevice> =
            (0..self.funcs.len()).map(|i| self.pci_device(i)).collect();
        pci_devices.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
        let gpus = self.gpus(desc);
        let nics = self.nics(desc);
        let gpu_links = (!gpus.is_empty()).then(|| GpuLinks {
            nvlink: self.nvlink_matrix(),
            nvswitch: matches!(desc.nvlink, NvlinkDesc::Nvswitch { .. }),
        });
        Topology {
            source: format!("emulated:{}", desc.name),
            cpus,
            offline_cpus: desc.offline_set(),
            isolated_cpus: desc.isolated_set(),
            outside_cpuset: Default::default(),
            numa_nodes,
            pci_devices,
            gpus,
            nics,
            gpu_links,
        }
    }

    /// The described GPUs, in the order of their functions, with the NVML data a fixture gives.
    fn gpus(&self, desc: &HostDesc) -> Vec<Gpu> {
        self.gpu_funcs
            .iter()
            .enumerate()
            .map(|(i, &f)| {
                let g = &desc.gpus[i];
                Gpu {
                    index: i as u32,
                    pci_bus_id: self.funcs[f].bus_id.clone(),
                    numa_node: Some(self.funcs[f].numa_node),
                    uuid: Some(gpu_uuid(desc, i)),
                    minor: Some(i as u32),
                    name: Some(g.name.clone()),
                    mig_enabled: Some(g.mig),
                    mig_devices: super::mig::mig_devices(desc, i),
                    memory_node: g.memory_node,
                }
            })
            .collect()
    }

    /// The described NICs; an RDMA one gets the next `uverbsN`.
    fn nics(&self, desc: &HostDesc) -> Vec<Nic> {
        let mut uverbs = 0;
        self.nic_funcs
            .iter()
            .enumerate()
            .map(|(i, &f)| {
                let n = &desc.nics[i];
                let verbs = match n.rdma {
                    Some(_) => {
                        uverbs += 1;
                        vec![format!("uverbs{}", uverbs - 1)]
                    }
                    None => Vec::new(),
                };
                Nic {
                    name: n.name.clone(),
                    pci_bus_id: Some(self.funcs[f].bus_id.clone()),
                    numa_node: Some(self.funcs[f].numa_node),
                    rdma_device: n.rdma.clone(),
                    uverbs: verbs,
                }
            })
            .collect()
    }

    fn pci_device(&self, i: usize) -> PciDevice {
        let f = &self.funcs[i];
        let kind = match f.role {
            FuncRole::RootPort | FuncRole::SwitchUpstream | FuncRole::SwitchDownstream => {
                PciKind::Bridge
            }
            FuncRole::Gpu(_) => PciKind::Gpu,
            FuncRole::Nic(_) => PciKind::Nic,
            FuncRole::NvSwitch(_) => PciKind::Other,
        };
        PciDevice {
            bus_id: f.bus_id.clone(),
            vendor: f.vendor,
            device: f.device,
            class: f.class,
            kind,
            numa_node: Some(f.numa_node),
            sysfs_numa_node: f.sysfs_numa_node.filter(|&n| n != f.numa_node),
            bridges: self
                .bridge_chain(i)
                .into_iter()
                .map(|p| self.funcs[p].bus_id.clone())
                .collect(),
            root_complex: self.host_bridges[f.host_bridge].dir_name(),
        }
    }
}

/// The GPU's UUID: the given one, or one derived from the host name and index so that two
/// emulated hosts never share UUIDs and the same host always gets the same ones.
pub fn gpu_uuid(desc: &HostDesc, index: usize) -> String {
    if let Some(u) = desc.gpus.get(index).and_then(|g| g.uuid.clone()) {
        return u;
    }
    format!("GPU-{}", uuid_of_seed(&format!("{}/{index}", desc.name)))
}

fn lay_cpus(desc: &HostDesc) -> Vec<LayoutCpu> {
    let total_cores = desc.total_cores();
    let threads = desc.threads_per_core;
    let cores_per_pkg = desc.cores_per_numa * desc.numa_per_socket;
    let cores_per_l3 = (desc.cores_per_numa / desc.l3_per_numa.max(1)).max(1);
    let offline = desc.offline_set();
    let mut cpus = Vec::with_capacity((total_cores * threads) as usize);
    for k in 0..total_cores {
        let node = k / desc.cores_per_numa.max(1);
        for t in 0..threads {
            let id = match desc.numbering {
                CpuNumbering::Interleaved => t * total_cores + k,
                CpuNumbering::Sequential => k * threads + t,
            };
            cpus.push(LayoutCpu {
                id,
                package: node / desc.numa_per_socket.max(1),
                core_id: k % cores_per_pkg.max(1),
                core_index: k,
                node,
                l3_index: k / cores_per_l3,
                online: !offline.contains(id),
            });
        }
    }
    cpus.sort_by_key(|c| c.id);
    cpus
}

fn lay_nodes(desc: &HostDesc, cpus: &[LayoutCpu]) -> Vec<LayoutNode> {
    let dist = desc.distance_matrix();
    let cpu_nodes = desc.cpu_node_count();
    (0..desc.node_count())
        .map(|id| {
            let mem_only = id
                .checked_sub(cpu_nodes)
                .and_then(|i| desc.memory_only_nodes.get(i as usize));
            LayoutNode {
                id,
                cpus: cpus
                    .iter()
                    .filter(|c| c.online && c.node == id)
                    .map(|c| c.id)
                    .collect(),
                memory_bytes: match mem_only {
                    Some(m) => super::parse_size(&m.memory).unwrap_or(0),
                    None => desc.memory_per_numa_bytes(),
                },
                hugepages_2m: if mem_only.is_some() {
                    0
                } else {
                    desc.hugepages_2m_per_numa
                },
                distances: dist.get(id as usize).cloned().unwrap_or_default(),
                kind: mem_only.map(|m| m.kind.clone()),
            }
        })
        .collect()
}

fn link_peers(desc: &HostDesc) -> Vec<Vec<LinkPeer>> {
    let n = desc.gpus.len();
    match &desc.nvlink {
        NvlinkDesc::None => vec![Vec::new(); n],
        NvlinkDesc::Nvswitch { links, chips } => {
            // Spread each GPU's links over the chips in contiguous runs (5/4/5/4 for 18 over 4).
            let per: Vec<LinkPeer> = (0..*links)
                .map(|l| LinkPeer::NvSwitch((l * chips / links) as usize))
                .collect();
            vec![per; n]
        }
        NvlinkDesc::Matrix { links } => (0..n)
            .map(|i| {
                (0..n)
                    .flat_map(|j| {
                        let c = links.get(i).and_then(|r| r.get(j)).copied().unwrap_or(0);
                        std::iter::repeat(LinkPeer::Gpu(j)).take(c as usize)
                    })
                    .collect()
            })
            .collect(),
    }
}

/// A described node: its CPUs, memory, distances and 2 MiB huge pages (no 1 GiB ones).
fn numa_node(n: &LayoutNode) -> NumaNode {
    NumaNode {
        id: n.id,
        cpus: n.cpus.clone(),
        memory_bytes: n.memory_bytes,
        hugepages: vec![
            HugePages {
                size_kb: 2048,
                total: n.hugepages_2m,
                free: n.hugepages_2m,
            },
            HugePages {
                size_kb: 1_048_576,
                total: 0,
                free: 0,
            },
        ],
        distances: n.distances.clone(),
        memory_kind: n.kind.clone(),
    }
}
