//! The sysfs/procfs reader: builds a [`Topology`] from `ROOT/sys` and `ROOT/proc`, so the real
//! host (`/`), a copied tree of another machine, or an emulated tree all read the same way.
//!
//! Real trees are messy (offline CPUs without `topology/`, sparse ids, `numa_node` of -1, no
//! cache information, class links that point at a child of the PCI function, trailing NUL
//! bytes, firmware that gives two nodes the same CPUs), so the reader trims what the kernel
//! pads, validates and cross-checks what it reads, repairs what hwloc repairs (saying so in a
//! warning: [`read_host_checked`] returns them, [`read_host`] logs them) and refuses what it
//! cannot repair ([`TopologyError::Inconsistent`]). Every read is bounded: files to
//! [`MAX_FILE`] bytes, ids to [`MAX_ID`], so a hostile tree cannot allocate gigabytes.

mod cpu;
mod cpuset;
mod distance;
mod numa;
mod online;
mod pci;

pub use online::{read_online, Online, OnlineError};

pub(crate) use pci::root_bus;

use std::cell::RefCell;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::idset::{CpuSet, MAX_ID};
use super::model::Topology;

/// Largest sysfs/procfs file read (a cpulist of 8192 sparse CPUs is ~40 KiB).
pub const MAX_FILE: u64 = 1 << 20;

/// CPU ids must be below this: the kernel's NR_CPUS is at most 8192 (x86 MAXSMP, powerpc),
/// so a larger id is garbage, and one CPU set per CPU stays small.
pub const MAX_CPU_ID: u32 = 16384;

/// Node ids must be below this: the kernel's MAX_NUMNODES is at most 1 << 10.
pub const MAX_NODE_ID: u32 = 1024;

/// Why a host tree could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The tree has no CPU information at all.
    #[error("no online CPUs found under {path} (is this a sysfs tree?)")]
    NoCpus {
        /// The CPU directory that was searched.
        path: PathBuf,
    },
    /// What the tree says contradicts itself beyond what can be repaired.
    #[error("inconsistent NUMA description under {path}: {why}")]
    Inconsistent {
        /// The node directory.
        path: PathBuf,
        /// What contradicts what, and what to do.
        why: String,
    },
}

/// Reads the topology of the machine whose sysfs and procfs live under `root/sys` and
/// `root/proc` (`/` for this host). What had to be repaired is logged as warnings.
pub fn read_host(root: &Path) -> Result<Topology, TopologyError> {
    let (topo, warnings) = read_host_checked(root)?;
    for w in &warnings {
        tracing::warn!(root = %root.display(), "topology: {w}");
    }
    Ok(topo)
}

/// [`read_host`], returning the warnings (what was repaired and how) instead of logging them.
pub fn read_host_checked(root: &Path) -> Result<(Topology, Vec<String>), TopologyError> {
    let fs = SysFs::new(root);
    let cpus = cpu::read_cpus(&fs)?;
    let mut cpu_list = cpus.cpus;
    let numa_nodes = numa::read_nodes(&fs, &cpus.online, &cpu_list)?;
    numa::assign_cpu_nodes(&mut cpu_list, &numa_nodes);
    numa::cross_check(&fs, &cpu_list, &numa_nodes)?;
    let mut topo = Topology {
        source: root.display().to_string(),
        cpus: cpu_list,
        offline_cpus: cpus.offline,
        isolated_cpus: cpus.isolated,
        numa_nodes,
        ..Topology::default()
    };
    topo.outside_cpuset = cpuset::outside_cpuset(&fs, &topo.online_cpus());
    pci::read_devices(&fs, &mut topo);
    numa::warn_memoryless(&fs, &topo);
    Ok((topo, fs.warnings.into_inner()))
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
    warnings: RefCell<Vec<String>>,
}

impl SysFs {
    pub(crate) fn new(root: &Path) -> Self {
        SysFs {
            root: root.to_path_buf(),
            warnings: RefCell::new(Vec::new()),
        }
    }

    /// Notes something that was repaired or ignored.
    pub(crate) fn warn(&self, msg: String) {
        self.warnings.borrow_mut().push(msg);
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

/// The content of a small file, at most [`MAX_FILE`] bytes, without the whitespace and NUL
/// bytes around it (some kernels and sysfs snapshots pad attributes with NULs: `0-3\0\0`).
/// `None` when missing, unreadable, too long, not text or not a regular file (sysfs
/// attributes are regular files: a FIFO put in place of one is never waited on).
pub(crate) fn read_str(path: &Path) -> Option<String> {
    let mut buf = Vec::new();
    crate::untrusted::open_regular(path, false)
        .ok()?
        .take(MAX_FILE + 1)
        .read_to_end(&mut buf)
        .ok()?;
    if buf.len() as u64 > MAX_FILE {
        return None;
    }
    let text = String::from_utf8(buf).ok()?;
    Some(
        text.trim_matches(|c: char| c.is_whitespace() || c == '\0')
            .to_string(),
    )
}

/// A file's text in a message: at most 80 characters of it.
pub(crate) fn shown(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
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
                // Ids are bounded like every list: a mask with a bit past MAX_ID is garbage.
                let id = u32::try_from(i * 4 + bit).ok().filter(|id| *id < MAX_ID)?;
                set.insert(id);
            }
        }
    }
    Some(set)
}

/// A list file, or its hex-mask twin when the list is missing.
pub(crate) fn read_list_or_mask(dir: &Path, list: &str, mask: &str) -> Option<CpuSet> {
    read_list(&dir.join(list)).or_else(|| read_mask(&dir.join(mask)))
}

/// Entries of `dir` whose name is `prefix` followed by a number below [`MAX_ID`], with that
/// number, sorted by it (a `cpu4294967295` directory is not a CPU anyone can have).
pub(crate) fn numbered_entries(dir: &Path, prefix: &str) -> io::Result<Vec<(u32, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(id) = name
            .strip_prefix(prefix)
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|id| *id < MAX_ID)
        {
            out.push((id, entry.path()));
        }
    }
    out.sort_by_key(|(id, _)| *id);
    Ok(out)
}

#[cfg(test)]
mod tests;
