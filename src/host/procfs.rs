//! `/proc` under a root: which process is in which cgroup, which processes are a container's
//! (matched by its cgroup, component by component), which containers still have a process,
//! and a process's status fields.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::host::cgroup::{container_names, names_container, CgroupPathError, ContainerCgroup};

/// Largest `/proc/PID/cgroup` or `status` read.
const MAX_PROC_FILE: u64 = 256 << 10;

/// How a recorded container is found among the host's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerKey {
    /// By its cgroup, from the cgroups path the runtime gave (both drivers): a process is the
    /// container's when its cgroup is that one or below it, compared component by component.
    Cgroup(ContainerCgroup),
    /// Records without a cgroups path: by its id as a whole cgroup name (`ID`, `crio-ID`,
    /// `PREFIX-ID.scope`), never as a substring and never a monitor's (`crio-conmon-ID`).
    Id(String),
}

impl ContainerKey {
    /// The key of container `id` whose runtime-given cgroups path is `cgroups_path` (may be
    /// empty). A path that would leave the cgroup root is refused.
    pub fn new(id: &str, cgroups_path: &str) -> Result<Self, CgroupPathError> {
        if cgroups_path.is_empty() {
            return Ok(ContainerKey::Id(id.to_string()));
        }
        ContainerCgroup::parse(cgroups_path).map(ContainerKey::Cgroup)
    }

    /// Whether a process whose `/proc/PID/cgroup` is `cgroup_text` belongs to the container.
    pub fn matches(&self, cgroup_text: &str) -> bool {
        let Some(path) = cpuset_line(cgroup_text) else {
            return false;
        };
        match self {
            ContainerKey::Cgroup(cg) => cg.holds(path),
            ContainerKey::Id(id) => path.split('/').any(|c| names_container(c, id)),
        }
    }
}

/// The cgroup path of the hierarchy the cpuset controller is in, from `/proc/PID/cgroup`: the
/// v1 line listing `cpuset` (legacy and hybrid hosts), else the unified `0::` line.
pub fn cpuset_line(cgroup_text: &str) -> Option<&str> {
    let mut unified = None;
    for line in cgroup_text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(hid), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if ctrls.split(',').any(|c| c == "cpuset") {
            return Some(path);
        }
        if hid == "0" && ctrls.is_empty() {
            unified = Some(path);
        }
    }
    unified
}

/// The host's processes indexed by their cpuset cgroup, read once: the processes in or below
/// each cgroup, and those whose cgroup names a container id. A lookup then costs the length of
/// the container's path, so checking N containers against P processes is O(N + P x depth);
/// comparing every pair, as this once did, made a restart on a node with 5,000 containers
/// parse 25 million cgroup files' worth of text.
#[derive(Debug, Default)]
pub struct ProcIndex {
    /// pid -> its cgroup in the cpuset hierarchy, as `/proc/PID/cgroup` lists it.
    paths: HashMap<u32, String>,
    /// Each cgroup (components joined by `/`, `""` the root) -> the pids in or below it.
    under: HashMap<String, Vec<u32>>,
    /// Each container id a component of a process's cgroup names -> those pids.
    named: HashMap<String, Vec<u32>>,
}

impl ProcIndex {
    /// The processes of the host under `root`.
    pub fn read(root: &Path) -> Self {
        Self::new(cgroup_lines_by_pid(root))
    }

    /// The index of `procs` (`(pid, content of /proc/PID/cgroup)`); every list comes out in
    /// ascending pid order.
    pub fn new(mut procs: Vec<(u32, String)>) -> Self {
        procs.sort_by_key(|(pid, _)| *pid);
        let mut index = ProcIndex::default();
        for (pid, text) in procs {
            let Some(path) = cpuset_line(&text) else {
                continue;
            };
            let mut prefix = String::new();
            push_once(index.under.entry(String::new()).or_default(), pid);
            for c in path.split('/').filter(|c| !c.is_empty()) {
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(c);
                // Most prefixes and names are already there (every process shares `kubepods`):
                // a key is copied only for a new one.
                match index.under.get_mut(prefix.as_str()) {
                    Some(pids) => push_once(pids, pid),
                    None => {
                        index.under.insert(prefix.clone(), vec![pid]);
                    }
                }
                for id in container_names(c) {
                    match index.named.get_mut(id) {
                        Some(pids) => push_once(pids, pid),
                        None => {
                            index.named.insert(id.to_string(), vec![pid]);
                        }
                    }
                }
            }
            index.paths.insert(pid, path.to_string());
        }
        index
    }

    /// The pids that belong to the container `key`, ascending.
    pub fn pids_of(&self, key: &ContainerKey) -> &[u32] {
        let found = match key {
            ContainerKey::Cgroup(cg) => self.under.get(&cg.components().join("/")),
            ContainerKey::Id(id) if !id.is_empty() && !id.contains('/') => self.named.get(id),
            ContainerKey::Id(_) => None,
        };
        found.map_or(&[], Vec::as_slice)
    }

    /// The cgroup of `pid` in the cpuset hierarchy.
    pub fn cgroup_of(&self, pid: u32) -> Option<&str> {
        self.paths.get(&pid).map(String::as_str)
    }
}

/// Appends `pid` unless it is already last (one process may name an id in two components).
fn push_once(pids: &mut Vec<u32>, pid: u32) {
    if pids.last() != Some(&pid) {
        pids.push(pid);
    }
}

/// Which of `containers` (id, runtime-given cgroups path) have a process in their cgroup on
/// the host under `root`. `None` when none has: then either all are gone or this process
/// cannot see the host's processes (no host PID namespace), and the caller must not conclude
/// anything. A container whose cgroups path is refused counts as live (never released on a
/// guess).
pub fn live_containers<'a>(
    root: &Path,
    containers: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<HashSet<String>> {
    let containers: Vec<(&str, &str)> = containers.into_iter().collect();
    if containers.is_empty() {
        // Nothing to look for: reading every process's cgroup (a quarter of a second with
        // 10,000 processes) would only delay the first registration.
        return None;
    }
    let procs = ProcIndex::read(root);
    let mut live = HashSet::new();
    let mut refused = Vec::new();
    for (id, path) in containers {
        match ContainerKey::new(id, path) {
            Ok(key) if !procs.pids_of(&key).is_empty() => {
                live.insert(id.to_string());
            }
            Ok(_) => {}
            Err(_) => refused.push(id.to_string()),
        }
    }
    if live.is_empty() {
        return None;
    }
    live.extend(refused);
    Some(live)
}

/// `(pid, content of /proc/PID/cgroup)` for every process.
pub fn cgroup_lines_by_pid(root: &Path) -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir(root.join("proc")) else {
        return Vec::new();
    };
    let mut out: Vec<(u32, String)> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter_map(|pid| read_bounded(&root.join(format!("proc/{pid}/cgroup"))).map(|t| (pid, t)))
        .collect();
    out.sort();
    out
}

/// `/proc/PID/status` of `pid` under `root`, when readable.
pub fn status(root: &Path, pid: u32) -> Option<String> {
    read_bounded(&root.join(format!("proc/{pid}/status")))
}

/// The memory policy process `pid` runs with, as the kernel prints it in the first line of
/// `/proc/PID/numa_maps` (`default`, `bind:0-1`, `interleave:0-1`, `prefer (many):0`,
/// `weighted interleave:0-1`): a mapping without a policy of its own shows the task's. Only
/// the first line is read; the kernel walks page tables for each line it prints.
pub fn task_mempolicy(root: &Path, pid: u32) -> Option<String> {
    let mut buf = Vec::new();
    std::fs::File::open(root.join(format!("proc/{pid}/numa_maps")))
        .ok()?
        .take(4096)
        .read_to_end(&mut buf)
        .ok()?;
    let text = String::from_utf8_lossy(&buf);
    let (_address, rest) = text.lines().next()?.split_once(' ')?;
    // The policy ends at the first space after its node list (`prefer (many)` has one before).
    let end = match rest.find(':') {
        Some(colon) => rest[colon..].find(' ').map_or(rest.len(), |s| colon + s),
        None => rest.find(' ').unwrap_or(rest.len()),
    };
    Some(rest[..end].to_string())
}

fn read_bounded(path: &Path) -> Option<String> {
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_PROC_FILE)
        .read_to_end(&mut buf)
        .ok()?;
    String::from_utf8(buf).ok()
}

/// The value of field `name` (with its colon, as `Cpus_allowed_list:`) in a status text.
pub fn status_field(status: &str, name: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
}

/// The `/dev` a process sees (its root's), under `root`.
pub fn dev_of(root: &Path, pid: u32) -> PathBuf {
    root.join(format!("proc/{pid}/root/dev"))
}

#[cfg(test)]
#[path = "procfs_tests.rs"]
mod tests;
