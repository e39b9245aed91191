//! Consistency checks on a parsed host description, so the layout, the tree writer and the
//! fake NVML can index freely afterwards.

use std::collections::HashSet;

use super::pcitree::parse_bus_id;
use super::{parse_size, Attachment, DescError, HostDesc, NvlinkDesc};
use crate::topology::idset::IdSet;

/// Most NVLink links one GPU can have (`NVML_NVLINK_MAX_LINKS`).
pub const MAX_NVLINKS: u32 = 18;

/// Largest machine accepted: the tree writer makes one directory per CPU.
const MAX_CPUS: u32 = 8192;

impl HostDesc {
    /// Checks the description; every later step relies on it.
    pub fn validate(&self) -> Result<(), DescError> {
        self.check().map_err(|reason| DescError::Invalid {
            name: self.name.clone(),
            reason,
        })
    }

    fn check(&self) -> Result<(), String> {
        if self.name.is_empty() || self.name.contains('/') {
            return Err("name must be non-empty and contain no '/'".into());
        }
        for (what, v) in [
            ("sockets", self.sockets),
            ("numa_per_socket", self.numa_per_socket),
            ("cores_per_numa", self.cores_per_numa),
            ("threads_per_core", self.threads_per_core),
            ("l3_per_numa", self.l3_per_numa),
        ] {
            if v == 0 {
                return Err(format!("{what} must be at least 1"));
            }
        }
        let total = u64::from(self.sockets)
            * u64::from(self.numa_per_socket)
            * u64::from(self.cores_per_numa)
            * u64::from(self.threads_per_core);
        if total > u64::from(MAX_CPUS) {
            return Err(format!(
                "{total} CPUs is more than the {MAX_CPUS} supported"
            ));
        }
        if self.cores_per_numa % self.l3_per_numa != 0 {
            return Err(format!(
                "cores_per_numa ({}) must be a multiple of l3_per_numa ({})",
                self.cores_per_numa, self.l3_per_numa
            ));
        }
        check_memory(&self.memory_per_numa)?;
        let cpu_nodes = self.cpu_node_count();
        for (i, m) in self.memory_only_nodes.iter().enumerate() {
            // Zero is real: the placeholder nodes the NVIDIA driver reserves for MIG memory
            // partitions on GB200 in NUMA mode are online and empty.
            if parse_size(&m.memory)? != 0 {
                check_memory(&m.memory)?;
            }
            if m.attached_to >= cpu_nodes {
                return Err(format!(
                    "memory_only_nodes[{i}].attached_to {} is not a CPU node (0-{})",
                    m.attached_to,
                    cpu_nodes - 1
                ));
            }
            if !["hbm", "cxl", "gpu", "unknown"].contains(&m.kind.as_str()) {
                return Err(format!(
                    "memory_only_nodes[{i}].kind {:?}: expected hbm, cxl, gpu or unknown",
                    m.kind
                ));
            }
        }
        self.check_distances()?;
        let all_cpus = self.total_cpus();
        let offline = IdSet::parse_list(&self.offline_cpus).map_err(|e| e.to_string())?;
        let isolated = IdSet::parse_list(&self.isolated_cpus).map_err(|e| e.to_string())?;
        for (what, set) in [("offline_cpus", &offline), ("isolated_cpus", &isolated)] {
            if let Some(bad) = set.iter().find(|&c| c >= all_cpus) {
                return Err(format!(
                    "{what}: CPU {bad} does not exist (0-{})",
                    all_cpus - 1
                ));
            }
        }
        if offline.len() as u32 >= all_cpus {
            return Err("offline_cpus leaves no CPU online".into());
        }
        self.check_pci()?;
        self.check_nvlink()?;
        super::Layout::new(self).map(|_| ())
    }

    fn check_distances(&self) -> Result<(), String> {
        let Some(d) = &self.distances else {
            return Ok(());
        };
        let n = self.node_count() as usize;
        if d.len() != n || d.iter().any(|row| row.len() != n) {
            return Err(format!("distances must be a {n}x{n} matrix"));
        }
        for (i, row) in d.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                if i == j && v != 10 {
                    return Err(format!("distances[{i}][{i}] must be 10"));
                }
                if i != j && v <= 10 {
                    return Err(format!("distances[{i}][{j}] must be above 10"));
                }
            }
        }
        Ok(())
    }

    fn check_pci(&self) -> Result<(), String> {
        let cpu_nodes = self.cpu_node_count();
        let mut switch_ids = HashSet::new();
        for (i, sw) in self.pcie_switches.iter().enumerate() {
            if sw.numa_node >= cpu_nodes {
                return Err(format!(
                    "pcie_switches[{i}]: numa_node {} has no CPUs",
                    sw.numa_node
                ));
            }
            if let Some(parent) = &sw.parent {
                // Parents must come first: that also rules out cycles.
                let Some(p) = self.pcie_switches[..i].iter().find(|s| &s.id == parent) else {
                    return Err(format!(
                        "pcie_switches[{i}]: parent {parent:?} is not a switch declared before it"
                    ));
                };
                if p.numa_node != sw.numa_node {
                    return Err(format!(
                        "pcie_switches[{i}]: numa_node {} differs from its parent's {}",
                        sw.numa_node, p.numa_node
                    ));
                }
            }
            if sw.parent.is_some() && sw.host_bridge.is_some() {
                return Err(format!(
                    "pcie_switches[{i}]: host_bridge is for top-level switches, not nested ones"
                ));
            }
            if !switch_ids.insert(sw.id.as_str()) {
                return Err(format!("pcie_switches: duplicate id {:?}", sw.id));
            }
        }
        let mut buses = HashSet::new();
        let gpus = self.gpus.iter().map(|g| (&g.at, "gpus"));
        let nics = self.nics.iter().map(|n| (&n.at, "nics"));
        for (i, (at, what)) in gpus.chain(nics).enumerate() {
            self.check_attachment(at)
                .map_err(|e| format!("{what} (device {i}): {e}"))?;
            if let Some(b) = &at.pci_bus_id {
                if !buses.insert(b.clone()) {
                    return Err(format!("{what}: bus id {b} used twice"));
                }
            }
        }
        let mut names = HashSet::new();
        let mut rdma = HashSet::new();
        for nic in &self.nics {
            if nic.name.is_empty() || nic.name.contains('/') || !names.insert(&nic.name) {
                return Err(format!(
                    "nics: bad or duplicate interface name {:?}",
                    nic.name
                ));
            }
            if let Some(r) = &nic.rdma {
                if r.is_empty() || r.contains('/') || !rdma.insert(r) {
                    return Err(format!("nics: bad or duplicate rdma device {r:?}"));
                }
            }
        }
        for (i, g) in self.gpus.iter().enumerate() {
            if let Some(m) = g.memory_node {
                if m < cpu_nodes || m >= self.node_count() {
                    return Err(format!(
                        "gpus[{i}].memory_node {m} is not a memory-only node"
                    ));
                }
            }
            super::mig::check(i, g.mig, &g.mig_devices)?;
            if g.nvlink_slots.is_some_and(|s| s == 0 || s > MAX_NVLINKS) {
                return Err(format!("gpus[{i}].nvlink_slots must be 1-{MAX_NVLINKS}"));
            }
            if let Some(u) = &g.uuid {
                if !u.starts_with("GPU-") || u.len() > 80 {
                    return Err(format!(
                        "gpus[{i}].uuid {u:?} must look like GPU-xxxxxxxx-..."
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_attachment(&self, at: &Attachment) -> Result<(), String> {
        let node = match (&at.switch, at.numa_node) {
            (None, None) => return Err("needs a numa_node or a switch".into()),
            (Some(s), n) => {
                let sw = self
                    .pcie_switches
                    .iter()
                    .find(|x| &x.id == s)
                    .ok_or_else(|| format!("unknown switch {s:?}"))?;
                if n.is_some_and(|n| n != sw.numa_node) {
                    return Err(format!("numa_node differs from switch {s:?}'s"));
                }
                sw.numa_node
            }
            (None, Some(n)) => n,
        };
        if node >= self.cpu_node_count() {
            return Err(format!("numa_node {node} has no CPUs"));
        }
        if let Some(shown) = at.sysfs_numa_node {
            if at.hide_numa_node {
                return Err(
                    "sysfs_numa_node and hide_numa_node both set what numa_node says".into(),
                );
            }
            if shown >= self.cpu_node_count() {
                return Err(format!("sysfs_numa_node {shown} has no CPUs"));
            }
        }
        if at.switch.is_some() && at.host_bridge.is_some() {
            return Err("host_bridge is for devices on a node, not below a switch".into());
        }
        if let Some(b) = &at.pci_bus_id {
            let (domain, ..) = parse_bus_id(b)
                .ok_or_else(|| format!("pci_bus_id {b:?}: expected 0000:1b:00.0"))?;
            if domain != 0 {
                return Err(format!(
                    "pci_bus_id {b:?}: only PCI domain 0000 is emulated"
                ));
            }
        }
        Ok(())
    }

    fn check_nvlink(&self) -> Result<(), String> {
        let n = self.gpus.len();
        match &self.nvlink {
            NvlinkDesc::None => Ok(()),
            NvlinkDesc::Nvswitch { links, chips } => {
                if *links == 0 || *links > MAX_NVLINKS {
                    return Err(format!("nvlink.links must be 1-{MAX_NVLINKS}"));
                }
                // More chips than links per GPU is real: a DGX-2's V100s have 6 links each, one
                // to each of the 6 NVSwitch chips of their baseboard, 12 chips in all.
                if *chips == 0 || *chips > MAX_NVSWITCH_CHIPS {
                    return Err(format!("nvlink.chips must be 1-{MAX_NVSWITCH_CHIPS}"));
                }
                if n < 2 {
                    return Err("nvswitch needs at least 2 GPUs".into());
                }
                Ok(())
            }
            NvlinkDesc::Matrix { links } => {
                if links.len() != n || links.iter().any(|r| r.len() != n) {
                    return Err(format!("nvlink.links must be a {n}x{n} matrix"));
                }
                for (i, row) in links.iter().enumerate() {
                    if row[i] != 0 {
                        return Err(format!("nvlink.links[{i}][{i}] must be 0"));
                    }
                    for (j, &v) in row.iter().enumerate() {
                        if v != links[j][i] {
                            return Err(format!("nvlink.links is not symmetric at [{i}][{j}]"));
                        }
                    }
                    let total: u32 = row.iter().sum();
                    if total > MAX_NVLINKS {
                        return Err(format!("GPU {i} has {total} NVLinks (max {MAX_NVLINKS})"));
                    }
                }
                Ok(())
            }
        }
    }
}

fn check_memory(s: &str) -> Result<(), String> {
    let bytes = parse_size(s)?;
    if bytes == 0 || bytes % 1024 != 0 {
        // sysfs reports node memory in kB: anything else cannot round-trip.
        return Err(format!("memory {s:?} must be a non-zero multiple of 1 KiB"));
    }
    Ok(())
}

/// Most NVSwitch chips a description may have (each is a PCI function on its own host bridge).
const MAX_NVSWITCH_CHIPS: u32 = 64;

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
