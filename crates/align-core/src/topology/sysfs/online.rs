//! What is online right now: the CPUs (`sys/devices/system/cpu/online`) and the NUMA nodes
//! with memory (`sys/devices/system/node/has_memory`, or `online` on kernels without it). The
//! daemon reads these two small files at every container event and every few seconds to follow
//! CPU and memory hot-plug, so this reads nothing else and says precisely what went wrong: a
//! file that vanishes mid hot-plug or a half-written list must leave the topology in force, not
//! replace it with a guess.
//!
//! Formats: the kernel's `Documentation/ABI/testing/sysfs-devices-system-cpu` (`online`: "CPUs
//! that are online and being scheduled", a cpulist) and `Documentation/ABI/stable/sysfs-devices-node`
//! (`has_memory`, `online`: node lists, Linux list format).

use std::path::{Path, PathBuf};

use super::{MAX_CPU_ID, MAX_FILE, MAX_NODE_ID};
use crate::topology::idset::{CpuSet, IdSet, NodeSet};
use crate::untrusted;

/// The online CPUs and memory nodes at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Online {
    /// Online CPUs.
    pub cpus: CpuSet,
    /// Nodes with memory online; `None` where the tree has no node directory (a host without
    /// NUMA, where memory hot-plug is not followed).
    pub mem_nodes: Option<NodeSet>,
}

/// Why the online sets could not be read. The caller keeps the sets it had.
#[derive(Debug, thiserror::Error)]
pub enum OnlineError {
    /// The file is not there (removed while a CPU or node goes away, or not a sysfs tree).
    #[error("{} is missing", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The file could not be read (permissions, I/O, over the size limit).
    #[error("{} cannot be read: {why}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The cause.
        why: String,
    },
    /// The file holds no valid list (a half-written one: `0-`, `0-3,`).
    #[error("{} is not a valid list ({text}): {why}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// Its text, bounded.
        text: String,
        /// What is wrong.
        why: String,
    },
    /// The CPU list is empty: no running kernel has no online CPU.
    #[error("{} names no CPU", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

impl OnlineError {
    /// A short label of the kind of failure, for metrics and for logging each kind once.
    pub fn kind(&self) -> &'static str {
        match self {
            OnlineError::Missing { .. } => "missing",
            OnlineError::Unreadable { .. } => "unreadable",
            OnlineError::Malformed { .. } => "malformed",
            OnlineError::Empty { .. } => "empty",
        }
    }
}

/// Reads the online CPUs and memory nodes of the host whose sysfs is under `root/sys`.
pub fn read_online(root: &Path) -> Result<Online, OnlineError> {
    let cpu_path = root.join("sys/devices/system/cpu/online");
    let cpus = read_list(&cpu_path, MAX_CPU_ID)?.ok_or(OnlineError::Missing {
        path: cpu_path.clone(),
    })?;
    if cpus.is_empty() {
        return Err(OnlineError::Empty { path: cpu_path });
    }
    let node_dir = root.join("sys/devices/system/node");
    let mem_nodes = if node_dir.is_dir() {
        let has_memory = node_dir.join("has_memory");
        match read_list(&has_memory, MAX_NODE_ID)? {
            Some(nodes) => Some(nodes),
            // Kernels before 2.6.37 have no `has_memory`: every online node had memory.
            None => {
                let online = node_dir.join("online");
                Some(
                    read_list(&online, MAX_NODE_ID)?
                        .ok_or(OnlineError::Missing { path: has_memory })?,
                )
            }
        }
    } else {
        None
    };
    Ok(Online { cpus, mem_nodes })
}

/// The list in `path` with ids below `limit`; `None` when the file does not exist.
fn read_list(path: &Path, limit: u32) -> Result<Option<IdSet>, OnlineError> {
    // A regular file only: a FIFO in place of `online` must not block the engine.
    let text = match untrusted::read_regular(path, MAX_FILE) {
        Ok(t) => t,
        Err(untrusted::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => {
            return Err(OnlineError::Unreadable {
                path: path.to_path_buf(),
                why: e.to_string(),
            })
        }
    };
    // sysfs ends its lists with a newline; some trees copied from other tools pad with NULs.
    let list = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    IdSet::parse_list_below(list, limit)
        .map(Some)
        .map_err(|e| OnlineError::Malformed {
            path: path.to_path_buf(),
            text: untrusted::quoted(list),
            why: e.reason,
        })
}

#[cfg(test)]
#[path = "online_tests.rs"]
mod tests;
