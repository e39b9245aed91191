//! NUMA nodes from `sys/devices/system/node`: CPUs, memory, huge pages, distances; memory-only
//! nodes; one synthetic node 0 when the kernel exposes no nodes (non-NUMA builds, containers).
//!
//! What firmware and snapshots get wrong, and what is done about it (each with a warning):
//! - a node whose CPUs overlap an earlier node's (buggy SRAT): each CPU stays on the first
//!   node (in id order) that lists it, so every CPU has exactly one node; a node left with none
//!   of its own (hwloc's `8em64t-2s2ca2c-buggynuma` tree, where all eight nodes claim CPUs
//!   0-7) is ignored, as hwloc ignores it;
//! - a node whose `cpulist` and `cpumap` are both unreadable: ignored, as hwloc ignores it;
//! - online CPUs no node claims (hwloc's `offline-cpu0-node0` tree, node directories missing):
//!   on the node their `cpuN/nodeM` link names, made without memory when it has no directory;
//!   without a link, given the node of the other CPUs of their package, or the only node with
//!   CPUs; when neither says where they are, the tree is refused
//!   ([`TopologyError::Inconsistent`]);
//! - a distance row the kernel would never print (short, garbage, not 10 on the diagonal):
//!   refused, see `distance.rs`;
//! - a node with CPUs and no memory (memory-side initiators, CXL and HBM systems): kept, and
//!   `Topology::memory_nodes_for` binds it to the nearest node with memory.

use std::path::{Path, PathBuf};

use super::{distance, numbered_entries, parse_mask, read_list, read_str, read_u64, shown};
use super::{SysFs, TopologyError, MAX_NODE_ID};
use crate::topology::idset::CpuSet;
use crate::topology::model::{Cpu, HugePages, NumaNode, Topology};

pub(super) fn read_nodes(
    fs: &SysFs,
    online: &CpuSet,
    cpu_list: &[Cpu],
) -> Result<Vec<NumaNode>, TopologyError> {
    let dir = fs.sys("devices/system/node");
    let mut entries = numbered_entries(&dir, "node").unwrap_or_default();
    drop_impossible_ids(fs, &mut entries);
    if entries.is_empty() {
        return Ok(vec![single_node(fs, online)]);
    }
    // `distance` has one column per online node in id order, which is the order of `entries`.
    let ids: Vec<u32> = entries.iter().map(|(id, _)| *id).collect();
    let paths: Vec<&Path> = entries.iter().map(|(_, p)| p.as_path()).collect();
    let matrix = distance::read_matrix(fs, &ids, &paths);
    // Which node holds each CPU so far, in id order: a later node claiming a CPU an earlier
    // one holds is the firmware's mistake.
    let mut claimed = CpuSet::new();
    let mut keep = Vec::with_capacity(entries.len());
    let mut nodes = Vec::with_capacity(entries.len());
    for ((id, path), distances) in entries.iter().zip(matrix) {
        let memory_bytes = node_memory(&path.join("meminfo")).unwrap_or(0);
        let Some(cpus) = node_cpus(fs, *id, path) else {
            keep.push(false);
            continue;
        };
        let Some(cpus) = unclaimed(fs, *id, cpus.intersection(online), &claimed, &nodes) else {
            keep.push(false);
            continue;
        };
        claimed.extend_from(&cpus);
        // Nodes with neither CPUs nor memory (GH200 reserves several for MIG, generic
        // initiators) are not places anything can go.
        let placeable = !cpus.is_empty() || memory_bytes > 0;
        keep.push(placeable);
        if !placeable {
            continue;
        }
        let memory_only = cpus.is_empty();
        nodes.push(NumaNode {
            id: *id,
            cpus,
            memory_bytes,
            hugepages: hugepages(&path.join("hugepages")),
            distances,
            memory_kind: memory_only.then(|| "unknown".to_string()),
        });
    }
    // Every distance row loses the columns of the nodes that were left out.
    drop_columns(&mut nodes, &keep);
    if nodes.is_empty() {
        return Err(TopologyError::Inconsistent {
            path: dir,
            why: "no node directory has usable CPUs or memory".into(),
        });
    }
    // CXL memory onlined through dax/kmem: the dax device of a CXL region names its node.
    for node in cxl_nodes(fs) {
        if let Some(n) = nodes.iter_mut().find(|n| n.id == node && n.cpus.is_empty()) {
            n.memory_kind = Some("cxl".to_string());
        }
    }
    place_orphans(fs, &dir, online, cpu_list, &mut nodes)?;
    Ok(nodes)
}

/// The kernel has at most 1 << NODES_SHIFT (10) nodes: a larger id is not a node, and a
/// matrix over it would be quadratic in garbage.
fn drop_impossible_ids(fs: &SysFs, entries: &mut Vec<(u32, PathBuf)>) {
    if let Some(pos) = entries.iter().position(|(id, _)| *id >= MAX_NODE_ID) {
        let skipped: Vec<String> = entries[pos..]
            .iter()
            .map(|(id, _)| format!("node{id}"))
            .take(4)
            .collect();
        fs.warn(format!(
            "ignoring {} node director(ies) with ids at or above the kernel's limit {MAX_NODE_ID} ({}...)",
            entries.len() - pos,
            skipped.join(" ")
        ));
        entries.truncate(pos);
    }
}

/// The CPUs of node `id` that no earlier node in `nodes` (holding `claimed`) has: a later node
/// claiming a CPU an earlier one holds is the firmware's mistake, and the first one keeps it.
/// `None` where the node claims nothing else (hwloc ignores it).
fn unclaimed(
    fs: &SysFs,
    id: u32,
    mut cpus: CpuSet,
    claimed: &CpuSet,
    nodes: &[NumaNode],
) -> Option<CpuSet> {
    let overlap = cpus.intersection(claimed);
    if !overlap.is_empty() {
        let holders: Vec<String> = nodes
            .iter()
            .filter(|n: &&NumaNode| !n.cpus.is_disjoint(&overlap))
            .map(|n| n.id.to_string())
            .collect();
        if overlap == cpus {
            fs.warn(format!(
                "node{id} claims only CPUs {overlap}, which node {} already holds (a \
                 firmware bug): ignoring node{id} as hwloc does",
                holders.join(",")
            ));
            return None;
        }
        cpus = cpus.difference(&overlap);
        fs.warn(format!(
            "node{id} also claims CPUs {overlap}, which node {} already holds (a firmware \
             bug): they stay on the first node that lists them, node{id} keeps {cpus}",
            holders.join(",")
        ));
    }
    Some(cpus)
}

/// Removes from every node's distance row the columns of nodes not kept.
fn drop_columns(nodes: &mut [NumaNode], keep: &[bool]) {
    if keep.iter().all(|k| *k) {
        return;
    }
    for n in nodes {
        n.distances = n
            .distances
            .iter()
            .zip(keep)
            .filter(|(_, k)| **k)
            .map(|(d, _)| *d)
            .collect();
    }
}

/// A node's CPUs from `cpulist`, else its `cpumap` twin; `None` (with a warning) when neither
/// can be read, as hwloc ignores a node whose cpumap it cannot read.
fn node_cpus(fs: &SysFs, id: u32, path: &Path) -> Option<CpuSet> {
    if let Some(set) = read_list(&path.join("cpulist")) {
        return Some(set);
    }
    let list = read_str(&path.join("cpulist"));
    let map = read_str(&path.join("cpumap"));
    if let Some(set) = map.as_deref().and_then(parse_mask) {
        if let Some(text) = list {
            fs.warn(format!(
                "node{id}/cpulist {:?} is not a CPU list: using node{id}/cpumap",
                shown(&text)
            ));
        }
        return Some(set);
    }
    fs.warn(format!(
        "node{id} has no readable cpulist ({}) or cpumap ({}): ignoring node{id} as hwloc does",
        list.map_or("missing".to_string(), |t| format!("{:?}", shown(&t))),
        map.map_or("missing".to_string(), |t| format!("{:?}", shown(&t))),
    ));
    None
}

/// Online CPUs that no node claims: those whose `cpuN/nodeM` link names a node without a
/// directory (an offline node) make that node, without memory ([`adopt_offline_nodes`]); the
/// others get the node of their package's other CPUs, else the only node with CPUs; anything
/// else is refused, since a wrong guess would bind memory badly.
fn place_orphans(
    fs: &SysFs,
    dir: &Path,
    online: &CpuSet,
    cpu_list: &[Cpu],
    nodes: &mut Vec<NumaNode>,
) -> Result<(), TopologyError> {
    let claimed = nodes
        .iter()
        .fold(CpuSet::new(), |acc, n| acc.union(&n.cpus));
    let mut orphans = online.difference(&claimed);
    if orphans.is_empty() {
        return Ok(());
    }
    adopt_offline_nodes(fs, &mut orphans, nodes);
    if orphans.is_empty() {
        return Ok(());
    }
    let (placed, lost) = orphan_nodes(&orphans, cpu_list, nodes);
    if !lost.is_empty() {
        return Err(TopologyError::Inconsistent {
            path: dir.to_path_buf(),
            why: format!(
                "online CPUs {lost} belong to no NUMA node and neither their package nor a \
                single CPU node says which they are on; fix the firmware's NUMA tables, or \
                describe the host with --host FILE"
            ),
        });
    }
    for (cpu, node) in &placed {
        if let Some(n) = nodes.iter_mut().find(|n| n.id == *node) {
            n.cpus.insert(*cpu);
            n.memory_kind = None;
        }
    }
    warn_placed(fs, placed);
    Ok(())
}

/// The kernel links each CPU's directory to its node (`cpuN/nodeM`). Where online CPUs link to
/// a node that has no directory (its memory offline: hwloc's `offline-cpu0-node0`, package 0's
/// CPUs on node 0), that node is what they are on: it is made, with those CPUs and no memory,
/// so their containers' memory comes from the nearest node with memory
/// (`Topology::memory_nodes_for`) and they never count as local to another node's memory, as
/// counting them on a node with memory would. The new node's distances are the kernel's
/// defaults (the other rows' columns for it cannot be trusted, see `distance.rs`). The CPUs
/// adopted leave `orphans`.
fn adopt_offline_nodes(fs: &SysFs, orphans: &mut CpuSet, nodes: &mut Vec<NumaNode>) {
    let mut linked: std::collections::BTreeMap<u32, CpuSet> = std::collections::BTreeMap::new();
    for cpu in orphans.iter() {
        let dir = fs.sys(&format!("devices/system/cpu/cpu{cpu}"));
        let Ok(links) = numbered_entries(&dir, "node") else {
            continue;
        };
        // One link is what the kernel makes; anything else says nothing trustworthy.
        if let [(node, _)] = links.as_slice() {
            if *node < MAX_NODE_ID && !nodes.iter().any(|n| n.id == *node) {
                linked.entry(*node).or_default().insert(cpu);
            }
        }
    }
    for (id, cpus) in linked {
        *orphans = orphans.difference(&cpus);
        let at = nodes.partition_point(|n| n.id < id);
        for n in nodes.iter_mut() {
            n.distances
                .insert(at.min(n.distances.len()), distance::REMOTE);
        }
        let count = nodes.len() + 1;
        let distances = (0..count)
            .map(|i| {
                if i == at {
                    distance::LOCAL
                } else {
                    distance::REMOTE
                }
            })
            .collect();
        fs.warn(format!(
            "online CPUs {cpus} are on node {id}, which has no node directory (its memory is \
             offline): node {id} is kept with these CPUs and no memory, at the kernel's default \
             distance from the others (hwloc leaves them outside any node)"
        ));
        nodes.insert(
            at,
            NumaNode {
                id,
                cpus,
                memory_bytes: 0,
                hugepages: Vec::new(),
                distances,
                memory_kind: None,
            },
        );
    }
}

/// Every CPU on exactly the node that lists it: `numa_nodes[].cpus` and `cpus[].numa_node`
/// must agree, or placement would bind a container's memory to one node and its CPUs to
/// another.
pub(super) fn cross_check(
    fs: &SysFs,
    cpus: &[Cpu],
    nodes: &[NumaNode],
) -> Result<(), TopologyError> {
    for cpu in cpus {
        let holders: Vec<u32> = nodes
            .iter()
            .filter(|n| n.cpus.contains(cpu.id))
            .map(|n| n.id)
            .collect();
        if holders != [cpu.numa_node] {
            return Err(TopologyError::Inconsistent {
                path: fs.sys("devices/system/node"),
                why: format!(
                    "CPU {} is on node {} but listed by node(s) {holders:?}",
                    cpu.id, cpu.numa_node
                ),
            });
        }
    }
    Ok(())
}

/// Warns about nodes with CPUs and no memory, naming the node their containers' memory will
/// come from (`Topology::memory_nodes_for`).
pub(super) fn warn_memoryless(fs: &SysFs, topo: &Topology) {
    if topo.numa_nodes.iter().all(|n| n.memory_bytes == 0) {
        if topo.numa_nodes.len() > 1 {
            fs.warn(
                "no NUMA node reports its memory (node meminfo missing): memory nodes are \
                     taken as the CPU nodes"
                    .into(),
            );
        }
        return;
    }
    for n in topo
        .numa_nodes
        .iter()
        .filter(|n| !n.cpus.is_empty() && n.memory_bytes == 0)
    {
        let one = [n.id].into_iter().collect();
        let to = topo.memory_nodes_for(&one);
        fs.warn(format!(
            "node{} has CPUs {} but no memory (a memory-side initiator, CXL or HBM system): \
             containers placed on it get cpuset.mems {to}, the nearest node with memory",
            n.id, n.cpus
        ));
    }
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
    let text = crate::untrusted::read_regular(path, super::MAX_FILE).ok()?;
    text.lines().find_map(|line| {
        let (_, rest) = line.split_once("MemTotal:")?;
        kb_value(rest)
    })
}

/// `MemTotal:  123 kB` from /proc/meminfo.
fn meminfo_total(path: &Path, key: &str) -> Option<u64> {
    let text = crate::untrusted::read_regular(path, super::MAX_FILE).ok()?;
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

/// The node each orphan CPU goes to (that of its package's other CPUs, else the only node with
/// CPUs, else the only node), and the CPUs with none.
fn orphan_nodes(
    orphans: &CpuSet,
    cpu_list: &[Cpu],
    nodes: &[NumaNode],
) -> (Vec<(u32, u32)>, CpuSet) {
    let package_of: std::collections::HashMap<u32, u32> =
        cpu_list.iter().map(|c| (c.id, c.package)).collect();
    let cpu_nodes: Vec<usize> = (0..nodes.len())
        .filter(|i| !nodes[*i].cpus.is_empty())
        .collect();
    // The packages each CPU node's CPUs are in.
    let node_packages: Vec<std::collections::HashSet<u32>> = cpu_nodes
        .iter()
        .map(|i| {
            nodes[*i]
                .cpus
                .iter()
                .filter_map(|c| package_of.get(&c).copied())
                .collect()
        })
        .collect();
    let mut placed: Vec<(u32, u32)> = Vec::new();
    let mut lost = CpuSet::new();
    for cpu in orphans.iter() {
        let by_package: Vec<usize> = match package_of.get(&cpu) {
            Some(pkg) => cpu_nodes
                .iter()
                .zip(&node_packages)
                .filter(|(_, pkgs)| pkgs.contains(pkg))
                .map(|(i, _)| *i)
                .collect(),
            None => Vec::new(),
        };
        let target = match (by_package.as_slice(), cpu_nodes.as_slice()) {
            ([only], _) => Some(*only),
            ([], [only]) => Some(*only),
            // No node has CPUs at all: the first node is all there is to run on.
            ([], []) if nodes.len() == 1 => Some(0),
            _ => None,
        };
        match target {
            Some(i) => placed.push((cpu, nodes[i].id)),
            None => {
                lost.insert(cpu);
            }
        }
    }
    (placed, lost)
}

/// Says which orphan CPUs were counted on which node, one warning per node.
fn warn_placed(fs: &SysFs, placed: Vec<(u32, u32)>) {
    let mut by_node: Vec<(u32, CpuSet)> = Vec::new();
    for (cpu, node) in placed {
        match by_node.iter_mut().find(|(n, _)| *n == node) {
            Some((_, set)) => {
                set.insert(cpu);
            }
            None => by_node.push((node, [cpu].into_iter().collect())),
        }
    }
    for (node, cpus) in by_node {
        fs.warn(format!(
            "online CPUs {cpus} belong to no NUMA node (a node directory is missing): counted \
                on node {node}, the node of their package or the only one with CPUs (hwloc leaves \
                them outside any node; nri-align needs one)"
        ));
    }
}
