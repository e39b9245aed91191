//! Declarative host descriptions: the shape of a machine in a few lines of YAML (or JSON),
//! materialised by `nri-align emulate` into a sysfs/proc tree plus an NVML fixture, turned into
//! a QEMU guest by `hack/vm`, and fed directly to `nri-align simulate --host`.
//!
//! Shipped descriptions live in `packaging/hosts/*.yaml`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::idset::{CpuSet, IdSet};

mod layout;
pub mod mig;
mod pcitree;
pub mod shipped;
mod uuid;
mod validate;

pub use layout::{gpu_uuid, Layout, LayoutCpu, LayoutNode, LinkPeer};
pub use pcitree::{parse_bus_id, FuncRole, HostBridge, LayoutFunc};
pub use validate::MAX_NVLINKS;

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
    /// CPU model name for `/proc/cpuinfo`.
    #[serde(default = "default_cpu_model")]
    pub cpu_model: String,
}

fn default_cpu_model() -> String {
    "Emulated CPU".to_string()
}

fn one() -> u32 {
    1
}

fn four() -> u32 {
    4
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
    /// Memory size with a binary suffix; `0` for an online node without memory (the MIG
    /// memory-partition placeholders of a GB200 GPU in NUMA mode).
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
    /// Top-level switches and devices naming the same host bridge share one root complex (each
    /// on its own root port: `PHB` apart); without a name each gets its own (`NODE` apart).
    #[serde(default)]
    pub host_bridge: Option<String>,
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
    /// What sysfs `numa_node` says instead of the true node, while `local_cpulist` keeps the
    /// true node's CPUs: firmware in sub-NUMA (SNC, NPS) modes that reports the socket's first
    /// node for every device. Readers must take the locality from `local_cpulist`.
    #[serde(default)]
    pub sysfs_numa_node: Option<u32>,
    /// Host bridge group, for devices attached directly to a node (see `PcieSwitchDesc`).
    #[serde(default)]
    pub host_bridge: Option<String>,
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
    /// The MIG devices configured while `mig` is on, in NVML slot order.
    #[serde(default)]
    pub mig_devices: Vec<MigDesc>,
    /// UUID (`GPU-xxxxxxxx-...`); derived from the host name and index when absent.
    #[serde(default)]
    pub uuid: Option<String>,
    /// NVLink link slots of the GPU (V100: 6, A100: 12, H100: 18); default 18.
    #[serde(default)]
    pub nvlink_slots: Option<u32>,
    /// The CPU-less NUMA node holding this GPU's memory (Grace Hopper), which NVML reports as
    /// the GPU's NUMA node id; on other hosts NVML has no NUMA node id for GPUs.
    #[serde(default)]
    pub memory_node: Option<u32>,
    /// PCI device id (`0x2330` H100 SXM5 80GB).
    #[serde(default = "default_gpu_device_id")]
    pub device_id: u16,
}

/// One MIG device (GPU instance + compute instance) of a GPU with `mig: true`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigDesc {
    /// Profile (`1g.10gb`, `3g.40gb`).
    pub profile: String,
    /// `MIG-<uuid>`; derived from the host name, GPU and slot when absent.
    #[serde(default)]
    pub uuid: Option<String>,
    /// GPU instance id; slot + 1 when absent.
    #[serde(default)]
    pub gpu_instance: Option<u32>,
    /// Compute instance id; 0 when absent.
    #[serde(default)]
    pub compute_instance: Option<u32>,
}

fn default_gpu_device_id() -> u16 {
    0x2330
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
        /// NVSwitch chips (4 on DGX H100); each is a PCI function (class 0x0680) on its own
        /// host bridge of node 0, and every GPU spreads its links evenly over them.
        #[serde(default = "four")]
        chips: u32,
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
    /// Link layer: an InfiniBand port gets PCI class 0x0207, Ethernet 0x0200.
    #[serde(default)]
    pub link_layer: LinkLayer,
}

/// Link layer of a NIC port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkLayer {
    /// Ethernet (RoCE when `rdma` is set).
    #[default]
    Ethernet,
    /// InfiniBand.
    Infiniband,
}

/// Why a host description cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DescError {
    /// The file could not be read.
    #[error("reading host description {path}: {source}")]
    Read {
        /// File that failed.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// Neither a file nor a shipped description of that name exists.
    #[error(
        "no host description file or shipped description named {name:?}; shipped: {shipped} \
         (or a YAML file's path; installed descriptions are looked for in {searched})"
    )]
    NotFound {
        /// What was asked for.
        name: String,
        /// The shipped names, comma-separated.
        shipped: String,
        /// Directories searched for installed descriptions.
        searched: String,
    },
    /// The YAML/JSON does not match the schema.
    #[error("parsing host description {path}: {source}")]
    Parse {
        /// File that failed.
        path: PathBuf,
        /// Underlying error.
        source: serde_yaml_ng::Error,
    },
    /// YAML aliases that expand beyond what the text may.
    #[error("host description {path}: {source}")]
    Expansion {
        /// File refused.
        path: PathBuf,
        /// The bound it broke.
        source: crate::untrusted::yaml::ExpansionError,
    },
    /// The description parsed but is inconsistent.
    #[error("host description {name:?}: {reason}")]
    Invalid {
        /// Description name.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// Parses a size such as `512Gi`, `2Ti`, `96GiB`, `480G` or `1048576` (bytes). `Ki/Mi/Gi/Ti`
/// (optionally followed by `B`) are binary; `K/M/G/T` are decimal, as in Kubernetes quantities.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix('B').unwrap_or(t);
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("size {s:?}: expected a number followed by a unit"))?;
    let mult: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "K" | "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return Err(format!("size {s:?}: unknown unit {unit:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} does not fit in 64 bits"))
}

/// Directories searched for installed descriptions, in order: `$NRI_ALIGN_HOSTS_DIR`, the
/// install's `share/nri-align/hosts` next to the executable's `bin/`, and
/// `/usr/share/nri-align/hosts`. The shipped ones are built into the binary besides, so the
/// source tree (a path on the build machine) is never searched.
pub fn shipped_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("NRI_ALIGN_HOSTS_DIR") {
        dirs.push(PathBuf::from(d));
    }
    if let Some(prefix) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().and_then(Path::parent).map(Path::to_path_buf))
    {
        dirs.push(prefix.join("share/nri-align/hosts"));
    }
    dirs.push(PathBuf::from("/usr/share/nri-align/hosts"));
    dirs
}

impl HostDesc {
    /// Loads and validates a description: `what` is a file path, or the name of a shipped one
    /// (`dgx-h100` finds `dgx-h100.yaml` in [`shipped_dirs`]).
    pub fn load(what: &str) -> Result<HostDesc, DescError> {
        let direct = Path::new(what);
        let path = if direct.is_file() {
            direct.to_path_buf()
        } else {
            let dirs = shipped_dirs();
            let is_name = !what.contains('/') && !what.is_empty();
            let found = dirs
                .iter()
                .filter(|_| is_name)
                .flat_map(|d| ["yaml", "yml", "json"].map(|ext| d.join(format!("{what}.{ext}"))))
                .find(|p| p.is_file());
            if let (None, Some(text)) = (&found, shipped::text(what).filter(|_| is_name)) {
                // Not installed anywhere: the copy built into the binary.
                return HostDesc::from_yaml(text);
            }
            found.ok_or_else(|| DescError::NotFound {
                name: crate::untrusted::excerpt(what),
                shipped: shipped::names().join(", "),
                searched: dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?
        };
        let text = std::fs::read_to_string(&path).map_err(|source| DescError::Read {
            path: path.clone(),
            source,
        })?;
        crate::untrusted::yaml::check(&text).map_err(|source| DescError::Expansion {
            path: path.clone(),
            source,
        })?;
        let desc: HostDesc =
            serde_yaml_ng::from_str(&text).map_err(|source| DescError::Parse { path, source })?;
        desc.validate()?;
        Ok(desc)
    }

    /// Parses and validates a description from YAML or JSON text.
    pub fn from_yaml(text: &str) -> Result<HostDesc, DescError> {
        crate::untrusted::yaml::check(text).map_err(|source| DescError::Expansion {
            path: PathBuf::from("<text>"),
            source,
        })?;
        let desc: HostDesc = serde_yaml_ng::from_str(text).map_err(|source| DescError::Parse {
            path: PathBuf::from("<text>"),
            source,
        })?;
        desc.validate()?;
        Ok(desc)
    }

    /// Names of the descriptions shipped in the first directory of [`shipped_dirs`] that has any,
    /// else those built into the binary.
    pub fn shipped_names() -> Vec<String> {
        for dir in shipped_dirs() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let p = e.path();
                    (p.extension()? == "yaml")
                        .then(|| p.file_stem().map(|s| s.to_string_lossy().into_owned()))?
                })
                .collect();
            if !names.is_empty() {
                names.sort();
                return names;
            }
        }
        shipped::names()
    }

    /// NUMA nodes with CPUs.
    pub fn cpu_node_count(&self) -> u32 {
        self.sockets * self.numa_per_socket
    }

    /// All NUMA nodes, memory-only ones included.
    pub fn node_count(&self) -> u32 {
        self.cpu_node_count() + self.memory_only_nodes.len() as u32
    }

    /// Physical cores in the machine.
    pub fn total_cores(&self) -> u32 {
        self.cpu_node_count() * self.cores_per_numa
    }

    /// Logical CPUs present (online and offline).
    pub fn total_cpus(&self) -> u32 {
        self.total_cores() * self.threads_per_core
    }

    /// Offline CPUs (validated list).
    pub fn offline_set(&self) -> CpuSet {
        IdSet::parse_list(&self.offline_cpus).unwrap_or_default()
    }

    /// Isolated CPUs (validated list).
    pub fn isolated_set(&self) -> CpuSet {
        IdSet::parse_list(&self.isolated_cpus).unwrap_or_default()
    }

    /// Memory per CPU node in bytes (validated).
    pub fn memory_per_numa_bytes(&self) -> u64 {
        parse_size(&self.memory_per_numa).unwrap_or(0)
    }

    /// The full distance matrix: the given one, or the defaults described on `distances`.
    pub fn distance_matrix(&self) -> Vec<Vec<u32>> {
        if let Some(d) = &self.distances {
            return d.clone();
        }
        let cpu_nodes = self.cpu_node_count();
        let n = self.node_count();
        // Memory-only nodes stand in for the CPU node they attach to when computing distances.
        let anchor = |i: u32| -> u32 {
            if i < cpu_nodes {
                i
            } else {
                self.memory_only_nodes[(i - cpu_nodes) as usize].attached_to
            }
        };
        let cpu_dist = |a: u32, b: u32| -> u32 {
            if a == b {
                10
            } else if a / self.numa_per_socket == b / self.numa_per_socket {
                12
            } else {
                21
            }
        };
        (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| {
                        if i == j {
                            10
                        } else {
                            let extra = u32::from(i >= cpu_nodes) + u32::from(j >= cpu_nodes);
                            let base = cpu_dist(anchor(i), anchor(j));
                            // One memory-only side costs 10 more than its anchor (20 when the
                            // anchor itself is the other side).
                            if anchor(i) == anchor(j) {
                                10 + 10 * extra
                            } else {
                                base + 10 * extra
                            }
                        }
                    })
                    .collect()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
