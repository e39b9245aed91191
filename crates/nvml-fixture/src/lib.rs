//! The NVML fixture (`nvml.json`): what `nri-align emulate` writes for an emulated host and
//! `fake-nvml` serves through the NVML C ABI. One schema for both ends, so the field names
//! cannot drift apart; `crates/align-core/tests/topology/emulate_roundtrip.rs` checks the whole path through nvml-wrapper.

use serde::{Deserialize, Serialize};

/// The whole fixture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fixture {
    /// Description the fixture was made from.
    pub host: String,
    /// `nvmlSystemGetDriverVersion`.
    pub driver_version: String,
    /// `nvmlSystemGetNVMLVersion`.
    pub nvml_version: String,
    /// `nvmlSystemGetCudaDriverVersion(_v2)` (12040 = 12.4).
    pub cuda_driver_version: i32,
    /// GPUs in NVML index order.
    pub gpus: Vec<FixtureGpu>,
}

/// One GPU as NVML reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FixtureGpu {
    /// NVML index.
    pub index: u32,
    /// Product name.
    pub name: String,
    /// UUID.
    pub uuid: String,
    /// Bus id in NVML form (`00000000:1B:00.0`).
    pub pci_bus_id: String,
    /// `(device << 16) | vendor`, as `nvmlPciInfo_t.pciDeviceId`.
    pub pci_device_id: u32,
    /// `nvmlPciInfo_t.pciSubSystemId`.
    pub pci_subsystem_id: u32,
    /// `/dev/nvidia<minor>`.
    pub minor: u32,
    /// `nvmlDeviceGetNumaNodeId`: only on hosts where GPU memory is a NUMA node; else
    /// `NOT_SUPPORTED`.
    pub numa_node_id: Option<u32>,
    /// CPUs near the GPU, list form.
    pub cpu_affinity: String,
    /// NUMA nodes near the GPU, list form.
    pub memory_affinity: String,
    /// MIG mode (current and pending).
    pub mig_enabled: bool,
    /// `nvmlDeviceGetMaxMigDeviceCount` while MIG is on (A100/H100: 7); 0 = `NOT_SUPPORTED`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_mig_devices: u32,
    /// The MIG devices configured on this GPU (GPU instance + compute instance pairs), each at
    /// its slot of `nvmlDeviceGetMigDeviceHandleByIndex`; only served while `mig_enabled`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_devices: Vec<FixtureMig>,
    /// Link slots: links `0..nvlink_slots` are valid arguments, others `INVALID_ARGUMENT`.
    pub nvlink_slots: u32,
    /// Active links in link order; slots after them are inactive.
    pub nvlinks: Vec<FixtureLink>,
    /// `nvmlDeviceGetTopologyCommonAncestor` level towards each GPU (0/10/20/30/40/50).
    pub common_ancestor: Vec<u32>,
    /// `nvmlDeviceGetP2PStatus` for the PCI-based indexes (read, write, atomics, prop) per GPU.
    pub p2p_pci: Vec<u32>,
    /// `nvmlDeviceGetP2PStatus` for `NVML_P2P_CAPS_INDEX_NVLINK` per GPU.
    pub p2p_nvlink: Vec<u32>,
}

/// One MIG device: what NVML answers on its handle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixtureMig {
    /// Slot on the parent (`nvmlDeviceGetMigDeviceHandleByIndex` index, below
    /// `max_mig_devices`); empty slots answer `NOT_FOUND`.
    pub index: u32,
    /// `nvmlDeviceGetUUID` on the MIG handle (`MIG-<uuid>`, drivers R470 and later).
    pub uuid: String,
    /// `nvmlDeviceGetGpuInstanceId`.
    pub gpu_instance_id: u32,
    /// `nvmlDeviceGetComputeInstanceId`.
    pub compute_instance_id: u32,
    /// Profile (`1g.10gb`); the handle's name is the parent's name + ` MIG ` + profile, as
    /// `nvidia-smi -L` shows it.
    pub profile: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One active NVLink link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixtureLink {
    /// The far end's bus id in NVML form (a GPU or an NVSwitch).
    pub remote_pci_bus_id: String,
    /// The far end's `(device << 16) | vendor`.
    pub remote_pci_device_id: u32,
}

/// `0000:1b:00.0` -> `00000000:1B:00.0`.
pub fn nvml_bus_id(sysfs: &str) -> String {
    let upper = sysfs.to_ascii_uppercase();
    match upper.split_once(':') {
        Some((dom, rest)) => format!("{:0>8}:{rest}", dom),
        None => upper,
    }
}

impl Fixture {
    /// Reads a fixture file.
    pub fn load(path: &std::path::Path) -> Result<Fixture, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The GPU with bus id `id` in any case and either form (`0000:1b:00.0`, `00000000:1B:00.0`).
    pub fn by_bus_id(&self, id: &str) -> Option<usize> {
        let want = parse_bus_id(id)?;
        self.gpus
            .iter()
            .position(|g| parse_bus_id(&g.pci_bus_id) == Some(want))
    }
}

/// `domain:bus:dev.fn` in hex, any case, any domain width, into numbers.
pub fn parse_bus_id(s: &str) -> Option<(u32, u32, u32, u32)> {
    let mut parts = s.trim().rsplitn(3, ':');
    let devfn = parts.next()?;
    let bus = parts.next()?;
    let domain = parts.next().unwrap_or("0");
    let (dev, func) = devfn.split_once('.')?;
    Some((
        u32::from_str_radix(domain, 16).ok()?,
        u32::from_str_radix(bus, 16).ok()?,
        u32::from_str_radix(dev, 16).ok()?,
        u32::from_str_radix(func, 16).ok()?,
    ))
}

#[cfg(test)]
mod tests;
