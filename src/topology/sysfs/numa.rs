//! NUMA nodes from `sys/devices/system/node`: CPUs, memory, huge pages, distances; memory-only
//! nodes; one synthetic node 0 when the kernel exposes no nodes (non-NUMA builds, containers).

use std::path::Path;

use super::{numbered_entries, read_list_or_mask, read_str, read_u64, SysFs};
use crate::topology::idset::CpuSet;
use crate::topology::model::{Cpu, HugePages, NumaNode};

pub(super) fn read_nodes(fs: &SysFs, online: &CpuSet) -> Vec<NumaNode> {
    let dir = fs.sys("devices/system/node");
    let entries = numbered_entries(&dir, "node").unwrap_or_default();
    if entries.is_empty() {
        return vec![single_node(fs, online)];
    }
    // `distance` has one column per online node in id order, which is the order of `entries`.
    let ids: Vec<u32> = entries.iter().map(|(id, _)| *id).collect();
    let mut nodes: Vec<NumaNode> = entries
        .iter()
        .map(|(id, path)| {
            let cpus = read_list_or_mask(path, "cpulist", "cpumap")
                .unwrap_or_default()
                .intersection(online);
            let memory_only = cpus.is_empty();
            NumaNode {
                id: *id,
                cpus,
                memory_bytes: node_memory(&path.join("meminfo")).unwrap_or(0),
                hugepages: hugepages(&path.join("hugepages")),
                distances: distance_row(&path.join("distance"), &ids, *id),
                memory_kind: memory_only.then(|| "unknown".to_string()),
            }
        })
        .collect();
    // Nodes with neither CPUs nor memory (GH200 reserves several for MIG) are not places
    // anything can go; drop them and their distance columns.
    let keep: Vec<bool> = nodes
        .iter()
        .map(|n| !n.cpus.is_empty() || n.memory_bytes > 0)
        .collect();
    if keep.iter().any(|k| !k) {
        nodes.retain(|n| !n.cpus.is_empty() || n.memory_bytes > 0);
        for n in &mut nodes {
            n.distances = n
                .distances
                .iter()
                .zip(&keep)
                .filter(|(_, k)| **k)
                .map(|(d, _)| *d)
                .collect();
        }
    }
    // CXL memory onlined through dax/kmem: the dax device of a CXL region names its node.
    for node in cxl_nodes(fs) {
        if let Some(n) = nodes.iter_mut().find(|n| n.id == node && n.cpus.is_empty()) {
            n.memory_kind = Some("cxl".to_string());
        }
    }
    // CPUs that no node claims (broken trees) go to the first CPU node so every CPU has one.
    let claimed = nodes
        .iter()
        .fold(CpuSet::new(), |acc, n| acc.union(&n.cpus));
    let orphans = online.difference(&claimed);
    if !orphans.is_empty() {
        if let Some(first) = nodes.iter_mut().find(|n| !n.cpus.is_empty()) {
            first.cpus.extend_from(&orphans);
        } else if let Some(first) = nodes.first_mut() {
            first.cpus.extend_from(&orphans);
            first.memory_kind = None;
        }
    }
    nodes
}

/// Nodes backed by CXL memory: `bus/dax/devices/daxX.Y` links into a CXL region
/// (`.../ACPI0017:00/root0/decoder0.0/region0/dax_region0/dax0.0`) and names its `target_node`.
fn cxl_nodes(fs: &SysFs) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(fs.sys("bus/dax/devices")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let dir = std::fs::canonicalize(e.path()).ok()?;
            let in_cxl_region = dir.iter().filter_map(|c| c.to_str()).any(|c| {
                c.starts_with("ACPI0017")
                    || c.strip_prefix("region")
                        .is_some_and(|n| n.parse::<u32>().is_ok())
            });
            if !in_cxl_region {
                return None;
            }
            read_str(&dir.join("target_node"))?.parse().ok()
        })
        .collect()
}

/// Sets `Cpu::numa_node` from the nodes' CPU lists, in one pass over each list.
pub(super) fn assign_cpu_nodes(cpus: &mut [Cpu], nodes: &[NumaNode]) {
    let max = cpus.iter().map(|c| c.id).max().unwrap_or(0) as usize;
    let mut node_of = vec![None; max + 1];
    for node in nodes {
        for cpu in node.cpus.iter() {
            if let Some(slot) = node_of.get_mut(cpu as usize) {
                *slot = Some(node.id);
            }
        }
    }
    for cpu in cpus {
        cpu.numa_node = node_of.get(cpu.id as usize).copied().flatten().unwrap_or(0);
    }
}

fn single_node(fs: &SysFs, online: &CpuSet) -> NumaNode {
    NumaNode {
        id: 0,
        cpus: online.clone(),
        memory_bytes: meminfo_total(&fs.proc("meminfo"), "MemTotal:").unwrap_or(0),
        hugepages: hugepages(&fs.sys("kernel/mm/hugepages")),
        distances: vec![10],
        memory_kind: None,
    }
}

/// The huge pages of NUMA node `node` as they are now (free counts change as processes map
/// them), read under the tree `fs`; the system-wide pools when the kernel exposes no nodes.
pub(super) fn node_hugepages(fs: &SysFs, node: u32) -> Vec<HugePages> {
    let dir = fs.sys(&format!("devices/system/node/node{node}/hugepages"));
    if dir.is_dir() {
        return hugepages(&dir);
    }
    if node == 0 && !fs.sys("devices/system/node").is_dir() {
        return hugepages(&fs.sys("kernel/mm/hugepages"));
    }
    Vec::new()
}

/// `Node 0 MemTotal:  123 kB` from a node's meminfo.
fn node_memory(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let (_, rest) = line.split_once("MemTotal:")?;
        kb_value(rest)
    })
}

/// `MemTotal:  123 kB` from /proc/meminfo.
fn meminfo_total(path: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|line| kb_value(line.strip_prefix(key)?))
}

fn kb_value(rest: &str) -> Option<u64> {
    let mut parts = rest.split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => n.checked_mul(1024),
        Some(_) => None,
    }
}

/// `hugepages/hugepages-<size>kB/{nr,free}_hugepages`, sorted by size.
fn hugepages(dir: &Path) -> Vec<HugePages> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<HugePages> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let size_kb = name
                .to_str()?
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let path = e.path();
            Some(HugePages {
                size_kb,
                total: read_u64(&path.join("nr_hugepages")).unwrap_or(0),
                free: read_u64(&path.join("free_hugepages")).unwrap_or(0),
            })
        })
        .collect();
    out.sort_by_key(|h| h.size_kb);
    out
}

/// One row of the distance matrix; a missing or short row falls back to 10 local / 20 remote.
fn distance_row(path: &Path, ids: &[u32], me: u32) -> Vec<u32> {
    let parsed: Vec<u32> = read_str(path)
        .map(|s| {
            s.split_whitespace()
                .filter_map(|d| d.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    if parsed.len() == ids.len() {
        return parsed;
    }
    ids.iter()
        .map(|&other| if other == me { 10 } else { 20 })
        .collect()
}
