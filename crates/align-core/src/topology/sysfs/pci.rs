//! The PCI tree from `sys/bus/pci/devices` (links into `sys/devices/pciDDDD:BB/...`), and the
//! GPUs, network interfaces and RDMA devices that hang off it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::{read_hex, read_list_or_mask, read_str, SysFs};
use crate::topology::idset::CpuSet;
use crate::topology::model::{Gpu, Nic, NumaNode, PciDevice, PciKind, Topology};

const NVIDIA: u32 = 0x10de;

/// One PCI function as found in sysfs, before filtering.
struct Function {
    dir: PathBuf,
    vendor: u32,
    device: u32,
    class: u32,
    /// Ancestor functions from the root port down to the direct parent.
    ancestors: Vec<String>,
    root_complex: String,
}

pub(super) fn read_devices(fs: &SysFs, topo: &mut Topology) {
    let devices_dir = fs.devices_dir();
    let functions = scan(fs, devices_dir.as_deref());
    if functions.is_empty() {
        return;
    }
    let nets = class_links(fs, "class/net", devices_dir.as_deref(), &functions);
    let rdma = class_links(fs, "class/infiniband", devices_dir.as_deref(), &functions);

    // Keep what placement cares about, plus every bridge above it.
    let mut keep: BTreeSet<&str> = BTreeSet::new();
    for (bdf, f) in &functions {
        let wanted = matches!(kind(f), PciKind::Gpu | PciKind::Nic)
            || (f.vendor == NVIDIA && f.class >> 8 == 0x0680);
        if wanted {
            keep.insert(bdf);
        }
    }
    for (_, bdf) in nets.iter().chain(&rdma) {
        keep.insert(bdf);
    }
    let leaves: Vec<&str> = keep.iter().copied().collect();
    for bdf in leaves {
        if let Some(f) = functions.get(bdf) {
            keep.extend(f.ancestors.iter().map(String::as_str));
        }
    }

    topo.pci_devices = keep
        .iter()
        .filter_map(|bdf| {
            let f = functions.get(*bdf)?;
            let (numa_node, sysfs_numa_node) = resolve_numa(bdf, &functions, &topo.numa_nodes);
            Some(PciDevice {
                bus_id: (*bdf).to_string(),
                vendor: u16::try_from(f.vendor).unwrap_or(u16::MAX),
                device: u16::try_from(f.device).unwrap_or(u16::MAX),
                class: f.class,
                kind: kind(f),
                numa_node,
                sysfs_numa_node,
                bridges: f.ancestors.iter().rev().cloned().collect(),
                root_complex: f.root_complex.clone(),
            })
        })
        .collect();

    let nvidia = nvidia_proc_info(fs);
    // Coherent GPU memory onlined as a CPU-less NUMA node (Grace Hopper) is named by the driver.
    for info in nvidia.values() {
        let Some(node) = info.memory_node else {
            continue;
        };
        if let Some(n) = topo.numa_nodes.iter_mut().find(|n| n.id == node) {
            if n.is_memory_only() {
                n.memory_kind = Some("gpu".to_string());
            }
        }
    }
    topo.gpus = topo
        .pci_devices
        .iter()
        .filter(|d| d.kind == PciKind::Gpu && u32::from(d.vendor) == NVIDIA)
        .enumerate()
        .map(|(i, d)| {
            let info = nvidia.get(&d.bus_id);
            Gpu {
                index: u32::try_from(i).unwrap_or(u32::MAX),
                pci_bus_id: d.bus_id.clone(),
                numa_node: d.numa_node,
                uuid: info.and_then(|i| i.uuid.clone()),
                minor: info.and_then(|i| i.minor),
                name: info.and_then(|i| i.model.clone()),
                mig_enabled: None,
                mig_devices: Vec::new(),
                memory_node: info.and_then(|i| i.memory_node),
            }
        })
        .collect();

    topo.nics = build_nics(fs, topo, &nets, &rdma);
}

/// Every function under `bus/pci/devices`, by bus id.
fn scan(fs: &SysFs, devices_dir: Option<&Path>) -> BTreeMap<String, Function> {
    let mut out = BTreeMap::new();
    let Ok(entries) = fs::read_dir(fs.sys("bus/pci/devices")) else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(bdf) = entry.file_name().to_str().map(str::to_ascii_lowercase) else {
            continue;
        };
        if !is_bus_id(&bdf) {
            continue;
        }
        let link = entry.path();
        let dir = fs::canonicalize(&link).unwrap_or_else(|_| link.clone());
        let (root_complex, mut ancestors) = devices_dir
            .and_then(|d| dir.strip_prefix(d).ok())
            .map(split_chain)
            .unwrap_or_default();
        // The last element of the chain is the function itself.
        if ancestors.last() == Some(&bdf) {
            ancestors.pop();
        }
        let root_complex = if root_complex.is_empty() {
            // Flattened copies lose the tree; the domain and bus are the best guess.
            format!("pci{}", root_bus(&bdf))
        } else {
            root_complex
        };
        out.insert(
            bdf,
            Function {
                vendor: read_hex(&dir.join("vendor")).unwrap_or(0),
                device: read_hex(&dir.join("device")).unwrap_or(0),
                class: read_hex(&dir.join("class")).unwrap_or(0),
                dir,
                ancestors,
                root_complex,
            },
        );
    }
    out
}

/// Splits `pci0000:00/0000:00:01.0/0000:01:00.0/...` into the root complex and the PCI
/// functions along the way (anything that is not a bus id, like `virtio2` or `net`, ends it).
fn split_chain(rel: &Path) -> (String, Vec<String>) {
    let mut parts = rel.iter().filter_map(|c| c.to_str());
    let Some(root) = parts.next().filter(|r| r.starts_with("pci")) else {
        return (String::new(), Vec::new());
    };
    let chain = parts
        .take_while(|p| is_bus_id(p))
        .map(str::to_ascii_lowercase)
        .collect();
    (root.to_string(), chain)
}

/// `DDDD:BB` of a bus id `DDDD:BB:DD.F`: the name of the root complex the function would hang
/// off if it sat directly on a root bus (the best guess when the tree is flattened).
pub(crate) fn root_bus(bus_id: &str) -> &str {
    bus_id
        .get(..bus_id.len().saturating_sub(5))
        .unwrap_or(bus_id)
}

/// `DDDD:BB:DD.F` (the domain may be longer on VMD hosts).
fn is_bus_id(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    let hex = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_hexdigit());
    match parts.as_slice() {
        [dom, bus, devfn] => {
            dom.len() >= 4
                && hex(dom)
                && bus.len() == 2
                && hex(bus)
                && devfn
                    .split_once('.')
                    .is_some_and(|(d, f)| d.len() == 2 && hex(d) && f.len() == 1 && hex(f))
        }
        _ => false,
    }
}

fn kind(f: &Function) -> PciKind {
    let base = f.class >> 16;
    let sub = (f.class >> 8) & 0xff;
    match (base, sub) {
        (0x06, 0x04) | (0x06, 0x09) => PciKind::Bridge,
        (0x03, _) if f.vendor == NVIDIA => PciKind::Gpu,
        // 3D and "other" display controllers of any vendor are accelerators; plain VGA from
        // other vendors is the BMC's console (ASPEED, Matrox) and not worth placing.
        (0x03, 0x02) | (0x03, 0x80) => PciKind::Gpu,
        (0x02, _) => PciKind::Nic,
        _ => PciKind::Other,
    }
}

/// The function's NUMA node and, when it was overruled, what its own `numa_node` said.
///
/// Its own `numa_node`, else the nearest ancestor's, else the node whose CPUs its (or an
/// ancestor's) `local_cpulist` covers. A `numa_node` naming a CPU node outside the
/// `local_cpulist` loses to it: firmware in sub-NUMA modes (Intel SNC, AMD NPS) may report the
/// socket's first node for every device, while `local_cpulist` is computed from the root port's
/// proximity domain and keeps the true one. When `local_cpulist` covers several nodes, the one
/// nearest (by NUMA distance) to the named node is taken.
fn resolve_numa(
    bdf: &str,
    functions: &BTreeMap<String, Function>,
    nodes: &[NumaNode],
) -> (Option<u32>, Option<u32>) {
    let Some(f) = functions.get(bdf) else {
        return (None, None);
    };
    let chain = std::iter::once(bdf).chain(f.ancestors.iter().rev().map(String::as_str));
    let dirs: Vec<&Path> = chain
        .filter_map(|b| functions.get(b).map(|f| f.dir.as_path()))
        .collect();
    let cpu_nodes: Vec<&NumaNode> = nodes.iter().filter(|n| !n.cpus.is_empty()).collect();
    let local = dirs
        .iter()
        .find_map(|dir| read_list_or_mask(dir, "local_cpulist", "local_cpus"));
    for (depth, dir) in dirs.iter().enumerate() {
        let raw = read_str(&dir.join("numa_node")).and_then(|s| s.parse::<i64>().ok());
        let Some(node) = raw.and_then(|n| u32::try_from(n).ok()) else {
            continue;
        };
        // Only the function's own value is checked: an ancestor's stands in for an unknown one.
        if depth == 0 {
            if let Some(true_node) = local
                .as_ref()
                .and_then(|l| overruled_by_cpulist(node, l, nodes))
            {
                return (Some(true_node), Some(node));
            }
        }
        return (Some(node), None);
    }
    if let [only] = cpu_nodes.as_slice() {
        return (Some(only.id), None);
    }
    (local.and_then(|l| node_covered_by(&l, &cpu_nodes)), None)
}

/// The node `local` points at instead of `named`, when `named` is a CPU node none of whose CPUs
/// are in `local` and `local` covers at least one node whole. `nodes` is the full node list,
/// whose order indexes every node's `distances`.
fn overruled_by_cpulist(named: u32, local: &CpuSet, nodes: &[NumaNode]) -> Option<u32> {
    let named_node = nodes.iter().find(|n| n.id == named && !n.cpus.is_empty())?;
    if named_node.cpus.iter().any(|c| local.contains(c)) {
        return None;
    }
    let distance = |i: usize| named_node.distances.get(i).copied().unwrap_or(u32::MAX);
    nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| !n.cpus.is_empty() && n.cpus.is_subset(local))
        .min_by_key(|(i, n)| (distance(*i), n.id))
        .map(|(_, n)| n.id)
}

/// The single node whose CPUs all lie in `local`; `None` when several do (the device is local to
/// the whole machine) or none.
fn node_covered_by(local: &CpuSet, nodes: &[&NumaNode]) -> Option<u32> {
    let mut covered = nodes.iter().filter(|n| n.cpus.is_subset(local));
    let first = covered.next()?;
    covered.next().is_none().then_some(first.id)
}

/// `sys/<class>/*` entries whose `device` link leads to a PCI function: (name, bus id).
fn class_links(
    fs: &SysFs,
    class: &str,
    devices_dir: Option<&Path>,
    functions: &BTreeMap<String, Function>,
) -> Vec<(String, String)> {
    let Ok(entries) = fs::read_dir(fs.sys(class)) else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let target = fs::canonicalize(e.path().join("device")).ok()?;
            let rel = target.strip_prefix(devices_dir?).ok()?;
            // The link may point below the function (virtio2); the deepest bus id is the function.
            let (_, chain) = split_chain(rel);
            let bdf = chain.last()?.clone();
            functions.contains_key(&bdf).then_some((name, bdf))
        })
        .collect();
    out.sort();
    out
}

/// RDMA device name -> uverbs devices, from `class/infiniband_verbs/uverbsN/ibdev`, or, where
/// that class directory is missing, from `class/infiniband/<dev>/device/infiniband_verbs/`.
fn uverbs_by_ibdev(fs: &SysFs) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut add_dir = |dir: &Path| {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if let Some(ibdev) = read_str(&e.path().join("ibdev")) {
                let list = out.entry(ibdev).or_default();
                if !list.contains(&name) {
                    list.push(name);
                }
            }
        }
    };
    let class = fs.sys("class/infiniband_verbs");
    if class.is_dir() {
        add_dir(&class);
    } else if let Ok(devs) = fs::read_dir(fs.sys("class/infiniband")) {
        for dev in devs.flatten() {
            add_dir(&dev.path().join("device/infiniband_verbs"));
        }
    }
    for list in out.values_mut() {
        list.sort_by_key(|n| (n.len(), n.clone()));
    }
    out
}

fn build_nics(
    fs: &SysFs,
    topo: &Topology,
    nets: &[(String, String)],
    rdma: &[(String, String)],
) -> Vec<Nic> {
    let uverbs = uverbs_by_ibdev(fs);
    let numa = |bdf: &str| topo.pci(bdf).and_then(|d| d.numa_node);
    let rdma_for = |bdf: &str| rdma.iter().find(|(_, b)| b == bdf).map(|(n, _)| n.clone());
    let mut nics: Vec<Nic> = nets
        .iter()
        .map(|(name, bdf)| {
            let rdma_device = rdma_for(bdf);
            Nic {
                name: name.clone(),
                pci_bus_id: Some(bdf.clone()),
                numa_node: numa(bdf),
                uverbs: rdma_device
                    .as_ref()
                    .and_then(|r| uverbs.get(r).cloned())
                    .unwrap_or_default(),
                rdma_device,
            }
        })
        .collect();
    // RDMA functions without a netdev (InfiniBand-only ports) still get an entry.
    for (ibdev, bdf) in rdma {
        if nets.iter().any(|(_, b)| b == bdf) {
            continue;
        }
        nics.push(Nic {
            name: ibdev.clone(),
            pci_bus_id: Some(bdf.clone()),
            numa_node: numa(bdf),
            rdma_device: Some(ibdev.clone()),
            uverbs: uverbs.get(ibdev).cloned().unwrap_or_default(),
        });
    }
    nics.sort_by(|a, b| (&a.pci_bus_id, &a.name).cmp(&(&b.pci_bus_id, &b.name)));
    nics
}

/// What the NVIDIA driver tells about one GPU in `/proc/driver/nvidia/gpus/<bus id>/information`.
#[derive(Default)]
struct NvidiaInfo {
    minor: Option<u32>,
    uuid: Option<String>,
    model: Option<String>,
    /// NUMA node of the GPU's own memory (`numa_status`: `Node: N`), on coherent platforms.
    memory_node: Option<u32>,
}

fn nvidia_proc_info(fs: &SysFs) -> BTreeMap<String, NvidiaInfo> {
    let mut out = BTreeMap::new();
    let Ok(entries) = fs::read_dir(fs.proc("driver/nvidia/gpus")) else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(text) =
            crate::untrusted::read_regular(&e.path().join("information"), super::MAX_FILE)
        else {
            continue;
        };
        let mut info = NvidiaInfo::default();
        let mut bus = e.file_name().to_str().map(str::to_ascii_lowercase);
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key.trim() {
                "Device Minor" => info.minor = value.parse().ok(),
                "GPU UUID" => info.uuid = Some(value.to_string()),
                "Model" => info.model = Some(value.to_string()),
                "Bus Location" => bus = Some(value.to_ascii_lowercase()),
                _ => {}
            }
        }
        info.memory_node =
            crate::untrusted::read_regular(&e.path().join("numa_status"), super::MAX_FILE)
                .ok()
                .and_then(|t| {
                    t.lines().find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        (k.trim() == "Node").then(|| v.trim().parse().ok())?
                    })
                });
        if let Some(bus) = bus {
            out.insert(bus, info);
        }
    }
    out
}

#[cfg(test)]
#[path = "pci_tests.rs"]
mod tests;
