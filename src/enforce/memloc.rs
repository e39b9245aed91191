//! Did the alignment help: where a recorded container's memory actually lives (pages per NUMA
//! node, the share on the nodes it was given) and which CPUs its threads last ran on, against
//! its cpuset. `verify` reports both and flags a container whose resident memory is mostly off
//! its nodes, with the cause where the host shows one; the daemon exports the share as a
//! metric (`cli/run/memloc.rs`). What it reads comes from `host::memloc`; this file only
//! compares.
//!
//! The numbers come from the container's memory cgroup (`memory.numa_stat`, v1 or v2: what
//! the kernel charged to it, page cache included), else from its processes' `numa_maps`
//! (pages they map: a page shared with another container counts here too).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::enforce::state::{Record, Records};
use crate::host::cgroup::CgroupMounts;
use crate::host::memloc::{
    node_meminfo, read_cgroup_numa_stat, read_numa_maps, thread_cpus, MemorySource, NodeMemory,
};
use crate::host::procfs::{ContainerKey, ProcIndex};
use crate::metrics::ContainerLabels;
use crate::topology::{CpuSet, IdSet, NodeSet};

/// Processes whose `numa_maps` are read for one container (each read walks the process's page
/// tables): the main process and its first helpers hold nearly all of a container's memory.
pub const MAX_MAPS_PIDS: usize = 16;

/// A node with less free memory than this share of its total (1/50: 2 %) counts as out of
/// memory when a container's memory is elsewhere.
const LOW_FREE_DIVISOR: u64 = 50;

/// Where one container's memory lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryLocality {
    /// Where the numbers come from.
    pub source: MemorySource,
    /// Bytes per NUMA node.
    pub bytes_per_node: BTreeMap<u32, u64>,
    /// Bytes on all nodes.
    pub resident_bytes: u64,
    /// The nodes it was given (`cpuset.mems` of its record).
    #[serde(serialize_with = "crate::topology::idset::serialize_as_list")]
    pub nodes: NodeSet,
    /// Bytes on those nodes.
    pub local_bytes: u64,
    /// The share on its nodes, in percent rounded down (100 when nothing is resident).
    pub local_percent: u32,
    /// What the numbers leave out (a process whose maps were cut at the read limit).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl MemoryLocality {
    /// The numbers of `mem`, against `nodes`.
    pub fn of(mem: &NodeMemory, source: MemorySource, nodes: &NodeSet) -> Self {
        let (resident, local) = (mem.total(), mem.on(nodes));
        // Bounded by 100: local <= resident.
        let percent = match resident {
            0 => 100,
            r => (u128::from(local) * 100 / u128::from(r)) as u32,
        };
        MemoryLocality {
            source,
            bytes_per_node: mem.bytes.clone(),
            resident_bytes: resident,
            nodes: nodes.clone(),
            local_bytes: local,
            local_percent: percent,
            notes: Vec::new(),
        }
    }

    /// The share on its nodes, 0 to 1 (the metric's value; 1 when nothing is resident).
    pub fn local_ratio(&self) -> f64 {
        match self.resident_bytes {
            0 => 1.0,
            r => self.local_bytes as f64 / r as f64,
        }
    }
}

/// Where a container's threads last ran, against one set of CPUs they should run on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadPlacement {
    /// What the CPUs are (`cpuset`).
    pub against: String,
    /// Those CPUs.
    #[serde(serialize_with = "crate::topology::idset::serialize_as_list")]
    pub cpus: CpuSet,
    /// Threads whose last CPU is one of them.
    pub inside: u32,
    /// Threads whose last CPU is not.
    pub outside: u32,
    /// The CPUs outside that threads last ran on.
    #[serde(serialize_with = "crate::topology::idset::serialize_as_list")]
    pub outside_cpus: CpuSet,
}

/// A container whose resident memory is mostly off its nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoteMemory {
    /// The share off its nodes, in percent.
    pub remote_percent: u32,
    /// The threshold it passed (`verify_remote_memory_threshold`).
    pub threshold_percent: u8,
    /// What the host shows of why; empty when it shows nothing.
    pub reasons: Vec<String>,
}

/// The memory of the container `key` (processes `pids`): its memory cgroup's numbers, else
/// its processes' `numa_maps` (the first [`MAX_MAPS_PIDS`]); `Ok(None)` when neither is there.
pub fn memory_of(
    root: &Path,
    mounts: &CgroupMounts,
    key: &ContainerKey,
    pids: &[u32],
    page_size: u64,
) -> Result<Option<FoundMemory>, String> {
    if let Some((memory, source)) = cgroup_memory(mounts, key, page_size)? {
        return Ok(Some(FoundMemory {
            memory,
            source,
            notes: Vec::new(),
        }));
    }
    Ok(maps_memory(root, pids))
}

/// The numbers of the memory cgroup of `key`; `Ok(None)` without a cgroup path, a memory
/// hierarchy, the cgroup or its `memory.numa_stat`.
fn cgroup_memory(
    mounts: &CgroupMounts,
    key: &ContainerKey,
    page_size: u64,
) -> Result<Option<(NodeMemory, MemorySource)>, String> {
    let ContainerKey::Cgroup(cg) = key else {
        return Ok(None);
    };
    let Some((dir, v2)) = mounts.memory_dir(cg).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let source = if v2 {
        MemorySource::CgroupV2
    } else {
        MemorySource::CgroupV1
    };
    read_cgroup_numa_stat(&dir, v2, page_size)
        .map(|m| m.map(|m| (m, source)))
        .map_err(|e| e.to_string())
}

/// The sum of the `numa_maps` of the first [`MAX_MAPS_PIDS`] of `pids`; `None` when none
/// could be read.
fn maps_memory(root: &Path, pids: &[u32]) -> Option<FoundMemory> {
    let mut mem = NodeMemory::default();
    let (mut read, mut notes) = (0, Vec::new());
    for pid in pids.iter().take(MAX_MAPS_PIDS) {
        // A process that ended since it was listed holds nothing any more.
        let Ok(maps) = read_numa_maps(root, *pid) else {
            continue;
        };
        if maps.truncated {
            notes.push(format!("pid {pid}: numa_maps cut at the read limit"));
        }
        mem.merge(&maps.memory);
        read += 1;
    }
    if pids.len() > MAX_MAPS_PIDS {
        notes.push(format!(
            "numa_maps of the first {MAX_MAPS_PIDS} of {} processes",
            pids.len()
        ));
    }
    (read > 0).then_some(FoundMemory {
        memory: mem,
        source: MemorySource::NumaMaps,
        notes,
    })
}

/// What [`memory_of`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundMemory {
    /// Bytes per node.
    pub memory: NodeMemory,
    /// Where from.
    pub source: MemorySource,
    /// What the numbers leave out.
    pub notes: Vec<String>,
}

/// The locality of `rec` from what [`memory_of`] found; `None` when the record names no
/// memory nodes (a container whose `cpuset.mems` another plugin owns and never said).
pub fn locality(rec: &Record, found: FoundMemory) -> Option<MemoryLocality> {
    let nodes = chosen_nodes(rec)?;
    let mut loc = MemoryLocality::of(&found.memory, found.source, nodes);
    loc.notes = found.notes;
    Some(loc)
}

/// The nodes a record's memory belongs on: its `cpuset.mems`.
fn chosen_nodes(rec: &Record) -> Option<&NodeSet> {
    Some(&rec.assignment.mems).filter(|m| !m.is_empty())
}

/// The CPU sets a container's threads are compared with. The cpuset now; where the record
/// carries a per-GPU CPU map, each GPU's set belongs here too, so that a process driving GPU
/// N is seen on GPU N's CPUs.
fn thread_targets(rec: &Record) -> Vec<(String, CpuSet)> {
    vec![("cpuset".to_string(), rec.applied_cpus.clone())]
}

/// Where the threads of `pids` last ran, against each set they should run on (the cpuset);
/// empty when no thread could be read (processes of another PID namespace).
pub fn threads(root: &Path, pids: &[u32], rec: &Record) -> Vec<ThreadPlacement> {
    let cpus = thread_cpus(root, pids);
    if cpus.is_empty() {
        return Vec::new();
    }
    thread_targets(rec)
        .into_iter()
        .filter(|(_, set)| !set.is_empty())
        .map(|(against, set)| {
            let mut p = ThreadPlacement {
                against,
                cpus: set,
                inside: 0,
                outside: 0,
                outside_cpus: IdSet::new(),
            };
            for cpu in &cpus {
                if p.cpus.contains(*cpu) {
                    p.inside += 1;
                } else {
                    p.outside += 1;
                    p.outside_cpus.insert(*cpu);
                }
            }
            p
        })
        .collect()
}

/// The flag for `loc` when more than `threshold` percent of its resident memory is off its
/// nodes, with what the host shows of why (`pids`' memory policies, the record, the nodes'
/// free memory under `root`).
pub fn remote_flag(
    root: &Path,
    loc: &MemoryLocality,
    rec: &Record,
    pids: &[u32],
    threshold: u8,
) -> Option<RemoteMemory> {
    let remote = loc.resident_bytes.saturating_sub(loc.local_bytes);
    if loc.resident_bytes == 0
        || u128::from(remote) * 100 <= u128::from(threshold) * u128::from(loc.resident_bytes)
    {
        return None;
    }
    Some(RemoteMemory {
        remote_percent: 100 - loc.local_percent,
        threshold_percent: threshold,
        reasons: reasons(root, loc, rec, pids),
    })
}

/// What the host shows of why a container's memory is off its nodes.
fn reasons(root: &Path, loc: &MemoryLocality, rec: &Record, pids: &[u32]) -> Vec<String> {
    let mut out = Vec::new();
    let interleaved: u64 = pids
        .iter()
        .take(MAX_MAPS_PIDS)
        .filter_map(|pid| read_numa_maps(root, *pid).ok())
        .map(|m| m.interleaved)
        .fold(0, u64::saturating_add);
    if interleaved > 0 {
        out.push(format!(
            "an interleave memory policy is set: {} of its mappings interleave across nodes",
            mib(interleaved)
        ));
    }
    if rec.found_running {
        out.push(
            "it was recorded running (found at a restart, or created without nri-align's \
             adjustment): memory allocated before its cpuset was applied stays where it was \
             first touched"
                .into(),
        );
    }
    if rec.memory_nodes_moved {
        out.push(
            "its memory nodes were moved after it started (by the plugin that owns \
             cpuset.mems; nri-align moved its CPUs after them): what it touched before stays \
             where it was unless the kernel migrates it (cgroup v2 moves the processes' own \
             pages, never page cache or tmpfs data no process maps)"
                .into(),
        );
    }
    for node in loc.nodes.iter() {
        if let Some((total, free)) = node_meminfo(root, node) {
            if free.saturating_mul(LOW_FREE_DIVISOR) < total {
                out.push(format!(
                    "node {node} is out of memory ({} free of {}): the kernel allocated on \
                     other nodes",
                    mib(free),
                    mib(total)
                ));
            }
        }
    }
    out
}

/// A running container the daemon samples for `container_local_memory_ratio`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleTarget {
    /// Container id.
    pub id: String,
    /// Its runtime-given cgroups path.
    pub cgroups_path: String,
    /// Its memory nodes.
    pub mems: NodeSet,
    /// The series' labels.
    pub labels: ContainerLabels,
}

/// The records worth a sample: not stopped, with memory nodes. Taken under the engine lock,
/// so only what the sample needs is copied.
pub fn sample_targets(records: &Records) -> Vec<SampleTarget> {
    records
        .iter()
        .filter(|(_, r)| !r.stopped && !r.assignment.mems.is_empty())
        .map(|(id, r)| {
            let a = &r.assignment;
            let (ns, pod) = a.pod_name.split_once('/').unwrap_or(("", &a.pod_name));
            let namespace = if r.namespace.is_empty() {
                ns
            } else {
                &r.namespace
            };
            SampleTarget {
                id: id.clone(),
                cgroups_path: r.cgroups_path.clone(),
                mems: a.mems.clone(),
                labels: ContainerLabels {
                    namespace: namespace.to_string(),
                    pod: pod.to_string(),
                    container: a.container_name.clone(),
                },
            }
        })
        .collect()
}

/// The share of each target's resident memory on its nodes, on the host under `root`. A
/// target whose memory cannot be read now (gone, no process visible) is left out. The host's
/// processes are listed only when a container's cgroup has no `memory.numa_stat`.
pub fn sample(root: &Path, targets: &[SampleTarget]) -> Vec<(ContainerLabels, f64)> {
    let mounts = CgroupMounts::read(root);
    let page_size = crate::host::memloc::page_size();
    let mut procs: Option<ProcIndex> = None;
    let mut out = Vec::with_capacity(targets.len());
    for t in targets {
        let Ok(key) = ContainerKey::new(&t.id, &t.cgroups_path) else {
            continue;
        };
        let found = match cgroup_memory(&mounts, &key, page_size) {
            Ok(Some((mem, source))) => Some((mem, source)),
            _ => {
                let procs = procs.get_or_insert_with(|| ProcIndex::read(root));
                maps_memory(root, procs.pids_of(&key)).map(|f| (f.memory, f.source))
            }
        };
        if let Some((mem, source)) = found {
            let loc = MemoryLocality::of(&mem, source, &t.mems);
            out.push((t.labels.clone(), loc.local_ratio()));
        }
    }
    out
}

/// Bytes in MiB, one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

#[cfg(test)]
#[path = "memloc_tests.rs"]
mod tests;
