//! The cpuset containers are created under, and the online CPUs outside it.
//!
//! A container can only be given CPUs inside the cpuset of the cgroup it is created under: the
//! kernel refuses (v1) or silently narrows (v2, `cpuset.cpus.effective`) a child's cpuset to
//! its parent's. On a Kubernetes node that parent is `kubepods` (`kubepods.slice` under the
//! systemd driver), which systemd's `AllowedCPUs=`, a partitioned node or an operator can
//! narrow. CPUs outside it are never placed on: counting them would hand out CPUs a container
//! cannot run on, or leave a shared container no CPU it may use.
//!
//! Which cgroup: `kubepods.slice`, then `kubepods`, in the cpuset hierarchy (the v1 `cpuset`
//! mount first, then the unified one); where neither exists, the cgroup of this process
//! (`proc/self/cpuset`), which is what a tree gathered by `hwloc-gather-topology` inside a
//! restricted cpuset records. Its `cpuset.cpus.effective` (v2), `cpuset.effective_cpus`,
//! `cpuset.cpus` or `cpus` (v1 mounted with `noprefix`) is read. Nothing found, or a cpuset
//! that holds no online CPU (a half-written file, a tree from elsewhere): no CPU is left out.

use std::path::{Component, Path, PathBuf};

use super::{read_str, shown, SysFs};
use crate::topology::idset::CpuSet;

/// The cgroups containers are created under, in the order they are looked for.
const KUBEPODS: [&str; 2] = ["kubepods.slice", "kubepods"];

/// The files that hold a cgroup's CPUs, most telling first.
const CPU_FILES: [&str; 4] = [
    "cpuset.cpus.effective",
    "cpuset.effective_cpus",
    "cpuset.cpus",
    "cpus",
];

/// One mounted hierarchy that may have the cpuset controller.
#[derive(Debug, PartialEq, Eq)]
struct Hierarchy {
    /// Where it is mounted, under the tree's root.
    point: PathBuf,
    /// The mount's root within the hierarchy (`/` unless a sub-cgroup is bind-mounted).
    root: String,
}

/// The online CPUs outside the containers' cpuset, with a warning naming the cgroup when
/// there are any.
pub(crate) fn outside_cpuset(fs: &SysFs, online: &CpuSet) -> CpuSet {
    let Some((dir, allowed)) = containers_cpuset(fs) else {
        return CpuSet::new();
    };
    if allowed.is_disjoint(online) {
        fs.warn(format!(
            "the cpuset of {} ({allowed}) holds no online CPU: not used",
            dir.display()
        ));
        return CpuSet::new();
    }
    let outside = online.difference(&allowed);
    if !outside.is_empty() {
        fs.warn(format!(
            "CPUs {outside} are outside the cpuset of {} ({allowed}), where containers are \
             created: never placed on",
            dir.display()
        ));
    }
    outside
}

/// The directory of the containers' cgroup and its CPUs.
fn containers_cpuset(fs: &SysFs) -> Option<(PathBuf, CpuSet)> {
    let hierarchies = hierarchies(fs);
    let own = read_str(&fs.proc("self/cpuset"));
    let wanted = KUBEPODS
        .iter()
        .map(|k| format!("/{k}"))
        .chain(own.filter(|p| p != "/"));
    for cgroup in wanted {
        for h in &hierarchies {
            let Some(dir) = dir_of(h, &cgroup) else {
                continue;
            };
            if let Some(cpus) = CPU_FILES.iter().find_map(|f| read_cpus(fs, &dir.join(f))) {
                return Some((dir, cpus));
            }
        }
    }
    None
}

/// A CPU list file; `None` when missing, empty (a v2 `cpuset.cpus` that inherits) or not a list.
fn read_cpus(fs: &SysFs, path: &Path) -> Option<CpuSet> {
    let text = read_str(path)?;
    if text.is_empty() {
        return None;
    }
    match CpuSet::parse_list(&text) {
        Ok(s) if !s.is_empty() => Some(s),
        Ok(_) => None,
        Err(e) => {
            fs.warn(format!(
                "{}: {:?} is no CPU list ({e}): not used",
                path.display(),
                shown(&text)
            ));
            None
        }
    }
}

/// The directory of `cgroup` (an absolute cgroup path) in hierarchy `h`, when it is below the
/// mount's root and exists. `..` and other non-plain components are refused.
fn dir_of(h: &Hierarchy, cgroup: &str) -> Option<PathBuf> {
    let parts = |p: &str| -> Option<Vec<String>> {
        Path::new(p)
            .components()
            .filter(|c| !matches!(c, Component::RootDir | Component::CurDir))
            .map(|c| match c {
                Component::Normal(n) => n.to_str().map(str::to_string),
                _ => None,
            })
            .collect()
    };
    let (want, root) = (parts(cgroup)?, parts(&h.root)?);
    let below = want.strip_prefix(root.as_slice())?;
    let dir = below.iter().fold(h.point.clone(), |d, p| d.join(p));
    dir.is_dir().then_some(dir)
}

/// The hierarchies that may carry the cpuset controller: v1 `cpuset` mounts first, then the
/// unified one, from the tree's mount table, then the usual mount points (a daemon in a
/// container sees the host's through the host root, not in its own mount table).
fn hierarchies(fs: &SysFs) -> Vec<Hierarchy> {
    let (mut v1, mut v2) = (Vec::new(), Vec::new());
    let mountinfo = ["self/mountinfo", "1/mountinfo"]
        .iter()
        .find_map(|p| read_str(&fs.proc(p)));
    if let Some(text) = mountinfo {
        for line in text.lines() {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let l: Vec<&str> = left.split_whitespace().collect();
            let r: Vec<&str> = right.split_whitespace().collect();
            if let (Some(root), Some(point), Some(fstype)) = (l.get(3), l.get(4), r.first()) {
                let opts = r.get(2).copied().unwrap_or("");
                sort_mount(fs, fstype, point, root, opts, &mut v1, &mut v2);
            }
        }
    } else if let Some(text) = read_str(&fs.proc("mounts")) {
        // DEVICE MOUNTPOINT FSTYPE OPTS DUMP PASS
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if let (Some(point), Some(fstype), Some(opts)) = (f.get(1), f.get(2), f.get(3)) {
                sort_mount(fs, fstype, point, "/", opts, &mut v1, &mut v2);
            }
        }
    }
    for (point, list) in [("fs/cgroup/cpuset", &mut v1), ("fs/cgroup", &mut v2)] {
        let h = Hierarchy {
            point: fs.sys(point),
            root: "/".into(),
        };
        if !list.contains(&h) {
            list.push(h);
        }
    }
    v1.extend(v2);
    v1
}

/// Files a mount-table entry as a v1 cpuset hierarchy, the unified one, or neither.
fn sort_mount(
    fs: &SysFs,
    fstype: &str,
    point: &str,
    root: &str,
    opts: &str,
    v1: &mut Vec<Hierarchy>,
    v2: &mut Vec<Hierarchy>,
) {
    let h = || Hierarchy {
        point: fs.root.join(point.trim_start_matches('/')),
        root: root.to_string(),
    };
    let cpuset_v1 =
        fstype == "cpuset" || (fstype == "cgroup" && opts.split(',').any(|o| o == "cpuset"));
    if cpuset_v1 {
        v1.push(h());
    } else if fstype == "cgroup2" {
        v2.push(h());
    }
}

#[cfg(test)]
#[path = "cpuset_tests.rs"]
mod tests;
