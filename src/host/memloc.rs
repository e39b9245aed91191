//! Where a container's memory lives and where its threads last ran, read from the host under
//! a root: the memory cgroup's `memory.numa_stat` (cgroup v1: pages; v2: bytes), each
//! process's `/proc/PID/numa_maps` where the cgroup file is missing, each thread's last CPU
//! (`/proc/PID/task/TID/stat`), and a NUMA node's free memory
//! (`/sys/devices/system/node/nodeN/meminfo`).
//!
//! Formats, from the kernel's Documentation/admin-guide/cgroup-v1/memory.rst (`total=PAGES
//! N0=PAGES ...`, then `file=`, `anon=`, `unevictable=` and, on newer kernels, the same four
//! `hierarchical_` lines), Documentation/admin-guide/cgroup-v2.rst (`anon N0=BYTES N1=BYTES`,
//! `file ...`, then kernel and LRU breakdowns) and Documentation/filesystems/proc.rst
//! (`numa_maps`: `ADDRESS POLICY key=value ... N0=PAGES ... kernelpagesize_kB=4`, pages of the
//! mapping's page size). Every read is bounded, of a regular file only.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::topology::IdSet;

/// Largest `memory.numa_stat` read (v2: ~40 lines of one number per node).
const MAX_NUMA_STAT: u64 = 256 << 10;
/// Largest `numa_maps` read: ~25,000 mappings; a process with more is counted in part.
const MAX_NUMA_MAPS: u64 = 4 << 20;
/// Largest thread `stat` or node `meminfo` read.
const MAX_SMALL: u64 = 16 << 10;
/// Threads read per container: enough to say where it runs, bounded for a container with a
/// runaway thread count.
pub const MAX_THREADS: usize = 4096;

/// Why a file could not be read or parsed.
#[derive(Debug, thiserror::Error)]
pub enum MemlocError {
    /// The file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Something other than a regular file has the name.
    #[error("{}: not a regular file", .0.display())]
    NotAFile(PathBuf),
    /// The text does not have the kernel's form.
    #[error("{}: {why}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        why: String,
    },
}

/// Where the numbers came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemorySource {
    /// cgroup v1 `memory.numa_stat` (pages on the LRU lists).
    CgroupV1,
    /// cgroup v2 `memory.numa_stat` (`anon` + `file`).
    CgroupV2,
    /// The processes' `/proc/PID/numa_maps` (pages mapped; shared pages count in each).
    NumaMaps,
}

/// Bytes per NUMA node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeMemory {
    /// Node id -> bytes.
    pub bytes: BTreeMap<u32, u64>,
}

impl NodeMemory {
    /// Adds `bytes` on `node`.
    pub fn add(&mut self, node: u32, bytes: u64) {
        let b = self.bytes.entry(node).or_insert(0);
        *b = b.saturating_add(bytes);
    }

    /// Adds every node of `other`.
    pub fn merge(&mut self, other: &NodeMemory) {
        for (&n, &b) in &other.bytes {
            self.add(n, b);
        }
    }

    /// Bytes on all nodes.
    pub fn total(&self) -> u64 {
        self.bytes.values().fold(0, |a, b| a.saturating_add(*b))
    }

    /// Bytes on the nodes of `nodes`.
    pub fn on(&self, nodes: &IdSet) -> u64 {
        self.bytes
            .iter()
            .filter(|(n, _)| nodes.contains(**n))
            .fold(0, |a, (_, b)| a.saturating_add(*b))
    }
}

/// `N<node>=<count>` of a numa_stat or numa_maps token.
fn node_count(token: &str) -> Option<(u32, u64)> {
    let (node, count) = token.strip_prefix('N')?.split_once('=')?;
    Some((node.parse().ok()?, count.parse().ok()?))
}

/// cgroup v1 `memory.numa_stat`: the `hierarchical_total=` line where the kernel has it (the
/// container's processes may sit in child cgroups), else `total=`; counts are pages of
/// `page_size` bytes.
pub fn parse_numa_stat_v1(text: &str, page_size: u64) -> Result<NodeMemory, String> {
    let line = |key: &str| {
        text.lines().find(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|t| t.starts_with(key))
        })
    };
    let line = line("hierarchical_total=")
        .or_else(|| line("total="))
        .ok_or("no total= line")?;
    let mut mem = NodeMemory::default();
    for token in line.split_whitespace().skip(1) {
        let (node, pages) = node_count(token).ok_or_else(|| format!("bad entry {token:?}"))?;
        mem.add(node, pages.saturating_mul(page_size));
    }
    Ok(mem)
}

/// cgroup v2 `memory.numa_stat`: `anon` plus `file` (page cache, shmem included), in bytes.
pub fn parse_numa_stat_v2(text: &str) -> Result<NodeMemory, String> {
    let mut mem = NodeMemory::default();
    let mut seen = 0;
    for line in text.lines() {
        let mut tokens = line.split_whitespace();
        if !matches!(tokens.next(), Some("anon" | "file")) {
            continue;
        }
        seen += 1;
        for token in tokens {
            let (node, bytes) = node_count(token).ok_or_else(|| format!("bad entry {token:?}"))?;
            mem.add(node, bytes);
        }
    }
    if seen == 0 {
        return Err("no anon or file line".into());
    }
    Ok(mem)
}

/// What one process's `numa_maps` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaMaps {
    /// Pages mapped, per node, in bytes.
    pub memory: NodeMemory,
    /// Bytes in mappings whose policy interleaves (`interleave`, `weighted interleave`).
    pub interleaved: u64,
    /// The text was cut at the read limit: the numbers cover the mappings before it.
    pub truncated: bool,
}

/// `/proc/PID/numa_maps` text: each mapping's `N<node>=<pages>` times its
/// `kernelpagesize_kB` (4 when absent). A mapping without a policy of its own shows the
/// task's, so an interleave set on the whole process shows on every mapping.
pub fn parse_numa_maps(text: &str) -> NumaMaps {
    let mut out = NumaMaps::default();
    for line in text.lines() {
        let mut tokens = line.split_whitespace();
        let (Some(_addr), Some(policy)) = (tokens.next(), tokens.next()) else {
            continue;
        };
        let rest: Vec<&str> = tokens.collect();
        // `weighted interleave:0-1` is the one policy name with a space in it.
        let interleave = policy.starts_with("interleave")
            || (policy == "weighted" && rest.first().is_some_and(|t| t.starts_with("interleave")));
        let page = rest
            .iter()
            .find_map(|t| t.strip_prefix("kernelpagesize_kB="))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(4096, |kb| kb.saturating_mul(1024));
        let mut mapping = NodeMemory::default();
        for (node, pages) in rest.iter().filter_map(|t| node_count(t)) {
            mapping.add(node, pages.saturating_mul(page));
        }
        if interleave {
            out.interleaved = out.interleaved.saturating_add(mapping.total());
        }
        out.memory.merge(&mapping);
    }
    out
}

/// Field 39 (`processor`, the CPU the thread last ran on) of a `/proc/PID/task/TID/stat`
/// text. The command name (field 2) is in parentheses and may hold spaces and parentheses:
/// the fields are counted after its last `)`.
pub fn parse_stat_processor(text: &str) -> Option<u32> {
    let (_, rest) = text.rsplit_once(')')?;
    // `rest` starts at field 3 (state): field 39 is the 37th.
    rest.split_whitespace().nth(36)?.parse().ok()
}

/// A node's `meminfo`: (MemTotal, MemFree) in bytes (`Node 0 MemFree:   123 kB`).
pub fn parse_node_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let mut t = l.split_whitespace().skip(2);
            (t.next() == Some(name))
                .then(|| t.next()?.parse::<u64>().ok())
                .flatten()
        })
    };
    Some((
        field("MemTotal:")?.saturating_mul(1024),
        field("MemFree:")?.saturating_mul(1024),
    ))
}

/// Reads at most `limit` bytes of the regular file `path`; the flag says whether it was cut.
pub fn read_bounded(path: &Path, limit: u64) -> Result<(String, bool), MemlocError> {
    let io = |source| MemlocError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // On the opened file: no window between the check and the read.
    if !file.metadata().map_err(io)?.file_type().is_file() {
        return Err(MemlocError::NotAFile(path.to_path_buf()));
    }
    let mut buf = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(io)?;
    let cut = buf.len() as u64 > limit;
    if cut {
        // Only whole lines: a cut line would count part of a mapping.
        let keep = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        buf.truncate(keep);
    }
    Ok((String::from_utf8_lossy(&buf).into_owned(), cut))
}

/// The `memory.numa_stat` of the memory cgroup directory `dir` (v2 when `v2`); `Ok(None)`
/// when the file is not there (a kernel without it, a controller not enabled).
pub fn read_cgroup_numa_stat(
    dir: &Path,
    v2: bool,
    page_size: u64,
) -> Result<Option<NodeMemory>, MemlocError> {
    let path = dir.join("memory.numa_stat");
    let text = match read_bounded(&path, MAX_NUMA_STAT) {
        Ok((text, _)) => text,
        Err(MemlocError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let parsed = if v2 {
        parse_numa_stat_v2(&text)
    } else {
        parse_numa_stat_v1(&text, page_size)
    };
    parsed
        .map(Some)
        .map_err(|why| MemlocError::Format { path, why })
}

/// `/proc/PID/numa_maps` of `pid` under `root`.
pub fn read_numa_maps(root: &Path, pid: u32) -> Result<NumaMaps, MemlocError> {
    let (text, cut) = read_bounded(&root.join(format!("proc/{pid}/numa_maps")), MAX_NUMA_MAPS)?;
    let mut maps = parse_numa_maps(&text);
    maps.truncated = cut;
    Ok(maps)
}

/// The CPU each thread of `pids` last ran on, at most [`MAX_THREADS`] threads in all; threads
/// gone between the listing and the read are skipped.
pub fn thread_cpus(root: &Path, pids: &[u32]) -> Vec<u32> {
    let mut out = Vec::new();
    for pid in pids {
        let Ok(dir) = std::fs::read_dir(root.join(format!("proc/{pid}/task"))) else {
            continue;
        };
        for entry in dir.filter_map(Result::ok) {
            if out.len() >= MAX_THREADS {
                return out;
            }
            let Some(tid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let path = root.join(format!("proc/{pid}/task/{tid}/stat"));
            if let Some(cpu) = read_bounded(&path, MAX_SMALL)
                .ok()
                .and_then(|(t, _)| parse_stat_processor(&t))
            {
                out.push(cpu);
            }
        }
    }
    out
}

/// (MemTotal, MemFree) of NUMA node `node` under `root`, when readable.
pub fn node_meminfo(root: &Path, node: u32) -> Option<(u64, u64)> {
    let path = root.join(format!("sys/devices/system/node/node{node}/meminfo"));
    read_bounded(&path, MAX_SMALL)
        .ok()
        .and_then(|(t, _)| parse_node_meminfo(&t))
}

/// This host's page size (cgroup v1 counts pages); 4 KiB where it cannot be asked.
pub fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|p| u64::try_from(p).ok())
        .filter(|p| *p > 0)
        .unwrap_or(4096)
}

#[cfg(test)]
#[path = "memloc_tests.rs"]
mod tests;
