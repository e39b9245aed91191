//! Declarative host descriptions: the shape of a machine in a few lines of YAML (or JSON),
//! materialised by `nri-align emulate` into a sysfs/proc tree plus an NVML fixture, turned into
//! a QEMU guest by `hack/vm`, and fed directly to `nri-align simulate --host`.
//!
//! Shipped descriptions live in `packaging/hosts/*.yaml`.

use serde::{Deserialize, Serialize};

/// A whole machine.
///
/// CPU numbering follows Linux on x86: first thread of every core across all nodes, then the
/// second threads (`cpu = thread * total_cores + core_index`), so `0-55` and `112-167` are the
/// two threads of socket 0's cores on a 2 x 56-core box. `numbering: sequential` puts the
/// threads of a core next to each other instead (as many ARM and POWER hosts do).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostDesc {
    /// Short name (`dgx-h100`).
    pub name: String,
    /// One line for reports.
    #[serde(default)]
    pub description: String,
    /// Number of sockets (packages).
    pub sockets: u32,
    /// NUMA nodes with CPUs per socket (NPS / SNC setting).
    #[serde(default = "one")]
    pub numa_per_socket: u32,
    /// Physical cores per NUMA node.
    pub cores_per_numa: u32,
    /// Hardware threads per core.
    #[serde(default = "one")]
    pub threads_per_core: u32,
    /// L3 (uncore) cache groups per NUMA node; cores are split evenly between them.
    #[serde(default = "one")]
    pub l3_per_numa: u32,
    /// Memory per CPU NUMA node, with a binary suffix (`512Gi`, `1Ti`).
    pub memory_per_numa: String,
    /// 2 MiB huge pages per CPU NUMA node.
    #[serde(default)]
    pub hugepages_2m_per_numa: u64,
    /// CPU numbering scheme: `interleaved` (x86 default) or `sequential`.
    #[serde(default)]
    pub numbering: CpuNumbering,
    /// Full distance matrix over all nodes (CPU nodes first, then memory-only nodes, in id
    /// order). Default: 10 local, 12 same socket, 21 across sockets; memory-only nodes 40 from
    /// the nodes they attach to... see `to_topology`.
    #[serde(default)]
    pub distances: Option<Vec<Vec<u32>>>,
    /// CPU-less NUMA nodes (HBM, CXL, GPU memory), numbered after the CPU nodes.
    #[serde(default)]
    pub memory_only_nodes: Vec<MemoryOnlyNode>,
    /// CPUs present but offline, in list form (`"6-7"`).
    #[serde(default)]
    pub offline_cpus: String,
    /// CPUs isolated with `isolcpus=`, in list form.
    #[serde(default)]
    pub isolated_cpus: String,
    /// PCIe switches (each one upstream port with a downstream port per device below it).
    #[serde(default)]
    pub pcie_switches: Vec<PcieSwitchDesc>,
    /// GPUs, in index order.
    #[serde(default)]
    pub gpus: Vec<GpuDesc>,
    /// GPU interconnect.
    #[serde(default)]
    pub nvlink: NvlinkDesc,
    /// NICs (with or without RDMA).
    #[serde(default)]
    pub nics: Vec<NicDesc>,
}

fn one() -> u32 {
    1
}

/// CPU numbering scheme.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuNumbering {
    /// First threads of all cores, then second threads (x86 Linux).
    #[default]
    Interleaved,
    /// Threads of one core numbered consecutively.
    Sequential,
}

/// A NUMA node with memory and no CPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryOnlyNode {
    /// Memory size with a binary suffix.
    pub memory: String,
    /// What backs it: `hbm`, `cxl`, `gpu`.
    pub kind: String,
    /// The CPU node it is closest to.
    pub attached_to: u32,
}

/// A PCIe switch below one NUMA node's root complex, or below another switch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieSwitchDesc {
    /// Name the devices refer to (`sw0`).
    pub id: String,
    /// NUMA node of the root complex it hangs off.
    pub numa_node: u32,
    /// Parent switch, when switches are nested (then `numa_node` must match the parent's).
    #[serde(default)]
    pub parent: Option<String>,
}

/// Where a PCI device is attached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attachment {
    /// NUMA node of the root complex (required when `switch` is absent).
    #[serde(default)]
    pub numa_node: Option<u32>,
    /// The switch it sits under.
    #[serde(default)]
    pub switch: Option<String>,
    /// Fixed bus id in sysfs form; generated when absent (QEMU guests pin it to the guest's).
    #[serde(default)]
    pub pci_bus_id: Option<String>,
    /// Report `numa_node` as -1 in sysfs (as some BIOSes do), so readers must resolve it.
    #[serde(default)]
    pub hide_numa_node: bool,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuDesc {
    /// Product name (`NVIDIA H100 80GB HBM3`).
    #[serde(default = "default_gpu_name")]
    pub name: String,
    /// Where it sits.
    #[serde(flatten)]
    pub at: Attachment,
    /// MIG mode enabled.
    #[serde(default)]
    pub mig: bool,
}

fn default_gpu_name() -> String {
    "NVIDIA Emulated GPU".to_string()
}

/// GPU interconnect.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum NvlinkDesc {
    /// PCIe only.
    #[default]
    None,
    /// Every GPU on NVSwitch with `links` links each (18 on H100).
    Nvswitch {
        /// Links per GPU into the switch fabric.
        links: u32,
    },
    /// Point-to-point links: symmetric matrix of link counts in GPU order.
    Matrix {
        /// `links[i][j]` links between GPU i and GPU j.
        links: Vec<Vec<u32>>,
    },
}

/// One NIC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NicDesc {
    /// Interface name (`ibp12s0`, `eth0`).
    pub name: String,
    /// Where it sits.
    #[serde(flatten)]
    pub at: Attachment,
    /// RDMA device name (`mlx5_0`) when the NIC does RDMA.
    #[serde(default)]
    pub rdma: Option<String>,
}
