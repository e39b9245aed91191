//! GPU details from NVML (through nvml-wrapper): UUID, minor number, NVML index order, MIG
//! mode and MIG devices (each `MIG-<uuid>` and slot mapped to its parent GPU), NVLink peers and link counts, NVSwitch, and the PCIe common ancestor of each GPU pair.
//! GPUs are matched to the PCI tree by bus id (normalised to the sysfs form); without NVML the
//! topology keeps the GPUs found in the PCI tree and has no link data.

use std::path::Path;

use nvml_wrapper::enum_wrappers::device::TopologyLevel;
use nvml_wrapper::error::NvmlError as WrapperError;
use nvml_wrapper::Nvml;

use nvml_wrapper::Device;

use super::model::{Gpu, GpuLinks, MigDevice, PcieLevel, Topology};

/// `NVML_NVLINK_MAX_LINKS`: link numbers are probed up to this.
const MAX_LINKS: u32 = 18;

/// `NVML_AFFINITY_SCOPE_NODE`.
const SCOPE_NODE: u32 = 0;

/// MIG slots probed per GPU at most: A100 and H100 have 7; a driver claiming more is not
/// believed past this (no unbounded loop on a bad answer).
const MAX_MIG_SLOTS: u32 = 16;

/// What NVML contributed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvmlStatus {
    /// No NVML library on this host (or it would not initialise): GPUs come from PCI only.
    Absent {
        /// Why, as NVML said it.
        reason: String,
    },
    /// NVML answered.
    Present {
        /// Driver version.
        driver_version: String,
        /// GPUs NVML reported.
        gpu_count: u32,
        /// `nvmlDeviceGetTopologyCommonAncestor` per pair of the first `gpu_count` GPUs of
        /// `Topology::gpus` (NVML order; `None` where NVML had no answer).
        common_ancestor: Vec<Vec<Option<PcieLevel>>>,
    },
}

/// Why NVML data could not be merged.
#[derive(Debug, thiserror::Error)]
pub enum NvmlError {
    /// An NVML library given explicitly (`--nvml-lib`) could not be loaded or initialised.
    #[error("loading NVML from {path}: {source}")]
    Load {
        /// Library path.
        path: String,
        /// What nvml-wrapper said.
        source: WrapperError,
    },
    /// A query every NVIDIA driver answers failed.
    #[error("NVML {what} of GPU {index}: {source}")]
    Query {
        /// Which query.
        what: &'static str,
        /// NVML index.
        index: u32,
        /// What nvml-wrapper said.
        source: WrapperError,
    },
    /// NVML returned a bus id that is not `domain:bus:device.function`.
    #[error("NVML returned an unparsable PCI bus id {0:?}")]
    BusId(String),
}

/// `00000000:1B:00.0` (NVML) -> `0000:1b:00.0` (sysfs); any case, domain of any width.
pub fn sysfs_bus_id(nvml: &str) -> Option<String> {
    let mut parts = nvml.trim().rsplitn(3, ':');
    let devfn = parts.next()?;
    let bus = parts.next()?;
    let domain = parts.next().unwrap_or("0");
    let (dev, func) = devfn.split_once('.')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let dev = u8::from_str_radix(dev, 16).ok()?;
    let func = u8::from_str_radix(func, 16).ok()?;
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

fn level(l: TopologyLevel) -> PcieLevel {
    match l {
        // Two GPUs on one board sit behind the board's own switch.
        TopologyLevel::Internal | TopologyLevel::Single => PcieLevel::SingleSwitch,
        TopologyLevel::Multiple => PcieLevel::MultipleSwitches,
        TopologyLevel::HostBridge => PcieLevel::HostBridge,
        TopologyLevel::Node => PcieLevel::SameNuma,
        TopologyLevel::System => PcieLevel::CrossSocket,
    }
}

/// Loads NVML (`lib`, or the system's `libnvidia-ml.so.1`) and merges what it knows about the
/// GPUs into `topo`: GPUs are re-ordered by NVML index, matched to the PCI tree by bus id, and
/// `gpu_links` is filled. A missing system NVML is a status, not an error.
pub fn enrich(topo: &mut Topology, lib: Option<&Path>) -> Result<NvmlStatus, NvmlError> {
    let nvml = match lib {
        Some(path) => Nvml::builder()
            .lib_path(path.as_os_str())
            .init()
            .map_err(|source| NvmlError::Load {
                path: path.display().to_string(),
                source,
            })?,
        None => match Nvml::init() {
            Ok(n) => n,
            Err(e) => {
                return Ok(NvmlStatus::Absent {
                    reason: e.to_string(),
                })
            }
        },
    };
    let q = |what: &'static str, index: u32| {
        move |source| NvmlError::Query {
            what,
            index,
            source,
        }
    };
    let driver_version = nvml.sys_driver_version().unwrap_or_default();
    let count = nvml.device_count().map_err(q("device count", 0))?;
    let mut devices = Vec::with_capacity(count as usize);
    let mut gpus = Vec::with_capacity(count as usize);
    for index in 0..count {
        let dev = nvml.device_by_index(index).map_err(q("handle", index))?;
        gpus.push(merged_gpu(topo, &dev, index)?);
        devices.push(dev);
    }
    // GPUs the PCI tree had but NVML did not report (excluded, fallen off the bus) go last.
    let rest: Vec<Gpu> = topo
        .gpus
        .iter()
        .filter(|g| !gpus.iter().any(|n| n.pci_bus_id == g.pci_bus_id))
        .cloned()
        .collect();
    for (k, mut g) in rest.into_iter().enumerate() {
        g.index = count + k as u32;
        gpus.push(g);
    }
    let n = gpus.len();
    let (nvlink, nvswitch) = nvlinks(&devices, &gpus);
    let common_ancestor = devices
        .iter()
        .map(|a| {
            devices
                .iter()
                .map(|b| {
                    if std::ptr::eq(a, b) {
                        Some(PcieLevel::Same)
                    } else {
                        nvml.topology_common_ancestor(a, b).ok().map(level)
                    }
                })
                .collect()
        })
        .collect();
    topo.gpus = gpus;
    // No GPUs, no interconnect to speak of (the same as a host without NVML).
    topo.gpu_links = (n > 0).then_some(GpuLinks { nvlink, nvswitch });
    Ok(NvmlStatus::Present {
        driver_version,
        gpu_count: count,
        common_ancestor,
    })
}

/// The GPU of NVML's `index`: the PCI tree's GPU at its bus id (or a new one), with what
/// NVML adds (UUID, minor, name, MIG, and a memory node where PCI gave none).
fn merged_gpu(topo: &Topology, dev: &Device, index: u32) -> Result<Gpu, NvmlError> {
    let q = |what: &'static str| {
        move |source| NvmlError::Query {
            what,
            index,
            source,
        }
    };
    let pci = dev.pci_info().map_err(q("PCI info"))?;
    let bus_id = sysfs_bus_id(&pci.bus_id).ok_or_else(|| NvmlError::BusId(pci.bus_id.clone()))?;
    let mut gpu = topo
        .gpus
        .iter()
        .find(|g| g.pci_bus_id == bus_id)
        .cloned()
        .unwrap_or_else(|| Gpu {
            index,
            pci_bus_id: bus_id.clone(),
            numa_node: topo.pci(&bus_id).and_then(|d| d.numa_node),
            uuid: None,
            minor: None,
            name: None,
            mig_enabled: None,
            mig_devices: Vec::new(),
            memory_node: None,
        });
    gpu.index = index;
    gpu.uuid = Some(dev.uuid().map_err(q("UUID"))?);
    gpu.minor = dev.minor_number().ok().or(gpu.minor);
    gpu.name = dev.name().ok().or(gpu.name);
    gpu.mig_enabled = dev.mig_mode().ok().map(|m| m.current != 0);
    gpu.mig_devices = if gpu.mig_enabled == Some(true) {
        mig_devices(dev)
    } else {
        Vec::new()
    };
    if gpu.numa_node.is_none() {
        // No PCI locality: fall back on the node NVML says the GPU's memory traffic uses.
        gpu.numa_node = dev
            .memory_affinity(1, SCOPE_NODE)
            .ok()
            .and_then(|w| w.first().copied())
            .filter(|&w| w != 0)
            .map(|w| w.trailing_zeros());
    }
    Ok(gpu)
}

/// NVLink counts between the GPUs of `devices` (in `gpus`' order) and whether they reach
/// each other through NVSwitch.
fn nvlinks(devices: &[Device], gpus: &[Gpu]) -> (Vec<Vec<u32>>, bool) {
    let n = gpus.len();
    let mut nvlink = vec![vec![0u32; n]; n];
    let mut fabric = vec![0u32; n];
    for (i, dev) in devices.iter().enumerate() {
        for link in 0..MAX_LINKS {
            let l = dev.link_wrapper_for(link);
            match l.is_active() {
                Ok(true) => {}
                Ok(false) => continue,
                // Past the GPU's last link, or no NVLink at all.
                Err(_) => break,
            }
            let Ok(remote) = l.remote_pci_info() else {
                continue;
            };
            let Some(remote_id) = sysfs_bus_id(&remote.bus_id) else {
                continue;
            };
            match gpus.iter().position(|g| g.pci_bus_id == remote_id) {
                Some(j) if j != i => nvlink[i][j] += 1,
                Some(_) => {}
                // The far end is not a GPU: an NVSwitch port.
                None => fabric[i] += 1,
            }
        }
    }
    let nvswitch = fabric.iter().any(|&f| f > 0);
    // Direct links counted from both ends must agree; take the larger if one end under-reports.
    // A pair on NVSwitch gets the smaller of the two GPUs' fabric links (NV18 on DGX H100).
    let direct = nvlink.clone();
    for i in 0..n {
        for j in 0..n {
            if i != j {
                nvlink[i][j] = direct[i][j].max(direct[j][i]) + fabric[i].min(fabric[j]);
            }
        }
    }
    (nvlink, nvswitch)
}

/// The MIG devices of a GPU with MIG mode on, the way the device plugin enumerates them: every
/// slot below `nvmlDeviceGetMaxMigDeviceCount`, an empty slot answering `NOT_FOUND`. A device
/// whose UUID cannot be read, or whose parent NVML names is another GPU, is left out: a
/// container given it then runs on the shared pool (fail open), never on a wrong node.
fn mig_devices(dev: &Device) -> Vec<MigDevice> {
    let Ok(max) = dev.mig_device_count() else {
        return Vec::new();
    };
    let Ok(parent_uuid) = dev.uuid() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for slot in 0..max.min(MAX_MIG_SLOTS) {
        let Ok(mig) = dev.mig_device_by_index(slot) else {
            continue;
        };
        if mig.mig_is_mig_device_handle().ok() == Some(false) {
            continue;
        }
        // The parent as NVML names it: the handle walk above says so too, this is the
        // authority a MIG handle obtained elsewhere would use.
        let parent_agrees = match mig.mig_parent_device() {
            Ok(p) => p.uuid().ok().as_deref() == Some(parent_uuid.as_str()),
            Err(_) => true,
        };
        let Ok(uuid) = mig.uuid() else {
            continue;
        };
        if !parent_agrees || !uuid.starts_with("MIG-") {
            continue;
        }
        out.push(MigDevice {
            index: slot,
            uuid,
            profile: mig.name().ok().as_deref().and_then(mig_profile),
        });
    }
    out
}

/// `NVIDIA A100-SXM4-40GB MIG 1g.5gb` -> `1g.5gb`: NVML names a MIG device after its parent
/// and profile.
pub fn mig_profile(name: &str) -> Option<String> {
    let (_, p) = name.rsplit_once(" MIG ")?;
    let p = p.trim();
    (!p.is_empty() && !p.contains(' ')).then(|| p.to_string())
}

#[cfg(test)]
#[path = "nvml_tests.rs"]
mod tests;
