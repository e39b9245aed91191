//! The sysfs/procfs reader: builds a [`Topology`] from `ROOT/sys` and `ROOT/proc`, so the real
//! host (`/`), a copied tree of another machine, or an emulated tree all read the same way.
//!
//! Real trees are messy (offline CPUs without `topology/`, sparse ids, `numa_node` of -1, no
//! cache information, class links that point at a child of the PCI function), so every missing
//! or malformed file degrades to a default; only a tree without any usable CPU is an error.

mod cpu;
mod numa;
mod pci;

pub(crate) use pci::root_bus;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::idset::CpuSet;
use super::model::Topology;

/// Why a host tree could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The tree has no CPU information at all.
    #[error("no online CPUs found under {path} (is this a sysfs tree?)")]
    NoCpus {
        /// The CPU directory that was searched.
        path: PathBuf,
    },
}

/// Reads the topology of the machine whose sysfs and procfs live under `root/sys` and
/// `root/proc` (`/` for this host).
pub fn read_host(root: &Path) -> Result<Topology, TopologyError> {
    let fs = SysFs::new(root);
    let cpus = cpu::read_cpus(&fs)?;
    let numa_nodes = numa::read_nodes(&fs, &cpus.online);
    let mut cpu_list = cpus.cpus;
    numa::assign_cpu_nodes(&mut cpu_list, &numa_nodes);
    let mut topo = Topology {
        source: root.display().to_string(),
        cpus: cpu_list,
        offline_cpus: cpus.offline,
        isolated_cpus: cpus.isolated,
        numa_nodes,
        ..Topology::default()
    };
    pci::read_devices(&fs, &mut topo);
    Ok(topo)
}

/// The huge pages of NUMA node `node` of the machine under `root` right now (`free` changes
/// as processes map pages; the rest of the topology does not).
pub fn read_node_hugepages(root: &Path, node: u32) -> Vec<super::model::HugePages> {
    numa::node_hugepages(&SysFs::new(root), node)
}

/// Paths and small-file helpers relative to the tree root. Every read is tolerant: `None` means
/// missing or unreadable, which callers turn into a default.
pub(crate) struct SysFs {
    root: PathBuf,
}

impl SysFs {
    pub(crate) fn new(root: &Path) -> Self {
        SysFs {
            root: root.to_path_buf(),
        }
    }

    /// `root/sys/<rel>`.
    pub(crate) fn sys(&self, rel: &str) -> PathBuf {
        self.root.join("sys").join(rel)
    }

    /// `root/proc/<rel>`.
    pub(crate) fn proc(&self, rel: &str) -> PathBuf {
        self.root.join("proc").join(rel)
    }

    /// Where the tree's `sys/devices` really is, with symlinks resolved, so resolved class and bus
    /// links can be related to it.
    pub(crate) fn devices_dir(&self) -> Option<PathBuf> {
        fs::canonicalize(self.sys("devices")).ok()
    }
}

/// The trimmed content of a small file.
pub(crate) fn read_str(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// A decimal number file (`core_id`, `nr_hugepages`); `-1` and garbage are `None`.
pub(crate) fn read_u64(path: &Path) -> Option<u64> {
    read_str(path)?.parse().ok()
}

/// A decimal id file as u32.
pub(crate) fn read_u32(path: &Path) -> Option<u32> {
    read_str(path)?.parse().ok()
}

/// A hexadecimal file such as `vendor` (`0x10de`).
pub(crate) fn read_hex(path: &Path) -> Option<u32> {
    let s = read_str(path)?;
    u32::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// A Linux list file (`0-3,8`); malformed or missing files are `None`.
pub(crate) fn read_list(path: &Path) -> Option<CpuSet> {
    CpuSet::parse_list(&read_str(path)?).ok()
}

/// A hex mask file (`cpumap`: `00000000,0000000f`), used when a `*_list` twin is missing.
pub(crate) fn read_mask(path: &Path) -> Option<CpuSet> {
    parse_mask(&read_str(path)?)
}

/// Parses the kernel's `%*pb` mask format: hex digits in comma-separated 32-bit groups, most
/// significant first.
pub(crate) fn parse_mask(s: &str) -> Option<CpuSet> {
    let hex: String = s.trim().split(',').collect();
    let hex = hex.trim_start_matches("0x");
    let mut set = CpuSet::new();
    for (i, ch) in hex.chars().rev().enumerate() {
        let nibble = ch.to_digit(16)?;
        for bit in 0..4 {
            if nibble & (1 << bit) != 0 {
                set.insert(u32::try_from(i * 4 + bit).ok()?);
            }
        }
    }
    Some(set)
}

/// A list file, or its hex-mask twin when the list is missing.
pub(crate) fn read_list_or_mask(dir: &Path, list: &str, mask: &str) -> Option<CpuSet> {
    read_list(&dir.join(list)).or_else(|| read_mask(&dir.join(mask)))
}

/// Entries of `dir` whose name is `prefix` followed by a number, with that number, sorted by it.
pub(crate) fn numbered_entries(dir: &Path, prefix: &str) -> io::Result<Vec<(u32, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(id) = name.strip_prefix(prefix).and_then(|n| n.parse().ok()) {
            out.push((id, entry.path()));
        }
    }
    out.sort_by_key(|(id, _)| *id);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_parse_in_kernel_format() {
        assert_eq!(parse_mask("3").map(|s| s.to_string()), Some("0-1".into()));
        assert_eq!(
            parse_mask("00000001,00000000,0000000f").map(|s| s.to_string()),
            Some("0-3,64".into())
        );
        assert!(parse_mask("zz").is_none());
    }
}
