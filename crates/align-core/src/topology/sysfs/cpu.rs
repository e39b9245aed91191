//! CPUs from `sys/devices/system/cpu`: online/offline/isolated sets, package, die, core, SMT
//! siblings and the L3 group of each online CPU.

use std::path::Path;

use super::{numbered_entries, read_list, read_list_or_mask, read_mask, read_str, read_u32, shown};
use super::{SysFs, TopologyError, MAX_CPU_ID};
use crate::topology::idset::CpuSet;
use crate::topology::model::Cpu;

/// What the CPU directory says.
pub(super) struct CpuInfo {
    pub(super) cpus: Vec<Cpu>,
    pub(super) online: CpuSet,
    pub(super) offline: CpuSet,
    pub(super) isolated: CpuSet,
}

pub(super) fn read_cpus(fs: &SysFs) -> Result<CpuInfo, TopologyError> {
    let dir = fs.sys("devices/system/cpu");
    let online = match read_list(&dir.join("online")) {
        Some(set) => set,
        None => {
            if let Some(text) = read_str(&dir.join("online")) {
                fs.warn(format!(
                    "cpu/online {:?} is not a CPU list: counting the cpuN directories instead",
                    shown(&text)
                ));
            }
            online_from_dirs(&dir)
        }
    };
    if online.is_empty() {
        return Err(TopologyError::NoCpus { path: dir });
    }
    if let Some(max) = online.iter().last().filter(|id| *id >= MAX_CPU_ID) {
        return Err(TopologyError::Inconsistent {
            path: dir,
            why: format!(
                "online CPU {max} is beyond any kernel's CPU ids (below {MAX_CPU_ID}): not a \
                 real tree"
            ),
        });
    }
    let offline = read_list(&dir.join("offline"))
        .or_else(|| read_list(&dir.join("present")).map(|p| p.difference(&online)))
        .unwrap_or_default()
        .difference(&online);
    let isolated = read_list(&dir.join("isolated"))
        .unwrap_or_default()
        .intersection(&online);
    let cpus = online
        .iter()
        .map(|id| read_cpu(&dir, id, &online))
        .collect();
    Ok(CpuInfo {
        cpus,
        online,
        offline,
        isolated,
    })
}

/// Without an `online` file, a `cpuN` directory counts as online unless its `online` file says 0
/// (cpu0 usually has no such file because it cannot be unplugged).
fn online_from_dirs(dir: &Path) -> CpuSet {
    let Ok(entries) = numbered_entries(dir, "cpu") else {
        return CpuSet::new();
    };
    entries
        .into_iter()
        .filter(|(_, path)| read_str(&path.join("online")).as_deref() != Some("0"))
        .map(|(id, _)| id)
        .collect()
}

fn read_cpu(dir: &Path, id: u32, online: &CpuSet) -> Cpu {
    let cpu_dir = dir.join(format!("cpu{id}"));
    let topo = cpu_dir.join("topology");
    let siblings = read_list_or_mask(&topo, "thread_siblings_list", "thread_siblings")
        .or_else(|| read_list_or_mask(&topo, "core_cpus_list", "core_cpus"))
        .map(|s| s.intersection(online))
        .filter(|s| s.contains(id))
        .unwrap_or_else(|| [id].into_iter().collect());
    Cpu {
        id,
        package: read_u32(&topo.join("physical_package_id")).unwrap_or(0),
        die: read_u32(&topo.join("die_id")).unwrap_or(0),
        // Without `core_id` (PS3, some ppc and s390 trees) the threads of one core still
        // share their sibling list: the core is named after its first thread.
        core: read_u32(&topo.join("core_id")).unwrap_or_else(|| siblings.first().unwrap_or(id)),
        numa_node: 0,
        l3_group: l3_group(&cpu_dir.join("cache")),
        thread_siblings: siblings,
    }
}

/// The smallest CPU sharing this CPU's level-3 cache. Lists are sorted, so the first number of
/// `shared_cpu_list` is the answer without building the set (keeps 1024-CPU trees linear).
fn l3_group(cache_dir: &Path) -> Option<u32> {
    let entries = numbered_entries(cache_dir, "index").ok()?;
    for (_, index) in entries {
        if read_u32(&index.join("level")) != Some(3) {
            continue;
        }
        if read_str(&index.join("type")).as_deref() == Some("Instruction") {
            continue;
        }
        if let Some(list) = read_str(&index.join("shared_cpu_list")) {
            let first: String = list.chars().take_while(|c| c.is_ascii_digit()).collect();
            if let Ok(id) = first.parse() {
                return Some(id);
            }
        }
        return read_mask(&index.join("shared_cpu_map")).and_then(|s| s.first());
    }
    None
}
