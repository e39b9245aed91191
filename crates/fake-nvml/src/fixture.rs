//! The fixture format written by `nri-align emulate` (`src/topology/emulate/nvml_fixture.rs`
//! in the main crate; the field names are the contract).

use serde::Deserialize;

/// The whole fixture.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Fixture {
    /// Description name.
    pub host: String,
    /// Driver version string.
    pub driver_version: String,
    /// NVML version string.
    pub nvml_version: String,
    /// CUDA driver version (12040 = 12.4).
    pub cuda_driver_version: i32,
    /// GPUs in index order.
    pub gpus: Vec<FixtureGpu>,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FixtureGpu {
    /// Index.
    pub index: u32,
    /// Product name.
    pub name: String,
    /// UUID.
    pub uuid: String,
    /// NVML-form bus id.
    pub pci_bus_id: String,
    /// `(device << 16) | vendor`.
    pub pci_device_id: u32,
    /// Subsystem id.
    pub pci_subsystem_id: u32,
    /// Minor number.
    pub minor: u32,
    /// NUMA node id (GPU memory as a NUMA node), else not supported.
    pub numa_node_id: Option<u32>,
    /// CPU list.
    pub cpu_affinity: String,
    /// Node list.
    pub memory_affinity: String,
    /// MIG mode.
    pub mig_enabled: bool,
    /// Valid link numbers.
    pub nvlink_slots: u32,
    /// Active links.
    pub nvlinks: Vec<FixtureLink>,
    /// Common ancestor level per GPU.
    pub common_ancestor: Vec<u32>,
    /// P2P status (PCI indexes) per GPU.
    pub p2p_pci: Vec<u32>,
    /// P2P status (NVLink index) per GPU.
    pub p2p_nvlink: Vec<u32>,
}

/// One active link.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FixtureLink {
    /// Far end, NVML form.
    pub remote_pci_bus_id: String,
    /// Far end's `(device << 16) | vendor`.
    pub remote_pci_device_id: u32,
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

/// Parses a Linux list (`0-3,8`) into ids; bad parts are skipped.
pub fn parse_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
            out.extend(a..=b.min(a.saturating_add(1 << 16)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_parse_in_both_forms() {
        assert_eq!(parse_bus_id("00000000:1B:00.0"), Some((0, 0x1b, 0, 0)));
        assert_eq!(parse_bus_id("0000:1b:00.1"), Some((0, 0x1b, 0, 1)));
        assert_eq!(parse_bus_id("garbage"), None);
    }

    #[test]
    fn lists_expand() {
        assert_eq!(parse_list("0-2,7"), vec![0, 1, 2, 7]);
        assert_eq!(parse_list(""), Vec::<u32>::new());
    }
}
