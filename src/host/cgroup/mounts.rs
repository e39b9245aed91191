//! Where the cpuset hierarchy is mounted, read from `/proc/self/mountinfo` under a host root,
//! and the cgroups-rs hierarchy that reads and writes it.
//!
//! cgroups-rs finds its hierarchies itself (`hierarchies::auto()`): it reads this process's
//! `/proc/self/mountinfo` (not one under a root, so no test tree), keeps only `cgroup` (v1)
//! mounts, and takes the v2 hierarchy to be `/sys/fs/cgroup` (its `V2` reads
//! `/sys/fs/cgroup/cgroup.controllers` whatever root it is given). That misses hosts like this
//! one (cgroup v1, with cgroup2 at `/sys/fs/cgroup/unified`), any tree under `--host-root`, and
//! mounts whose root is not the hierarchy's (a bind of a sub-cgroup). So the mounts are found
//! here, and [`OneController`] hands cgroups-rs the one cpuset (or cpu) hierarchy, through its public
//! `Hierarchy` trait, for the reads and writes themselves.

use std::io::Read;
use std::path::{Path, PathBuf};

use cgroups_rs::fs::cpu::CpuController;
use cgroups_rs::fs::cpuset::CpuSetController;
use cgroups_rs::fs::{Cgroup, Hierarchy, Subsystem};

/// Largest mountinfo read (a node with thousands of container mounts has a few MiB).
const MAX_MOUNTINFO: u64 = 16 << 20;

/// One mounted cgroup hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The mount's root within the hierarchy (`/` unless a sub-cgroup is bind-mounted).
    pub root: String,
    /// Where it is mounted, under the host root this was read from.
    pub point: PathBuf,
    /// cgroup v2 (the unified hierarchy).
    pub v2: bool,
}

/// The cgroup mounts nri-align cares about.
#[derive(Debug, Clone, Default)]
pub struct CgroupMounts {
    v1_cpuset: Option<Mount>,
    v1_memory: Option<Mount>,
    v1_cpu: Option<Mount>,
    v2: Option<Mount>,
}

impl CgroupMounts {
    /// Reads `proc/self/mountinfo` (else PID 1's) under `root`. Nothing readable: no mounts.
    pub fn read(root: &Path) -> Self {
        let text = ["proc/self/mountinfo", "proc/1/mountinfo"]
            .iter()
            .find_map(|p| read_bounded(&root.join(p)))
            .unwrap_or_default();
        Self::parse(root, &text)
    }

    /// Parses mountinfo text; mount points are taken under `root`.
    pub fn parse(root: &Path, text: &str) -> Self {
        let mut m = CgroupMounts::default();
        for line in text.lines() {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let l: Vec<&str> = left.split_whitespace().collect();
            let r: Vec<&str> = right.split_whitespace().collect();
            let (Some(mroot), Some(point), Some(fstype)) = (l.get(3), l.get(4), r.first()) else {
                continue;
            };
            let point = unescape(point);
            let mount = |v2| Mount {
                root: unescape(mroot),
                point: root.join(point.trim_start_matches('/')),
                v2,
            };
            let has = |ctrl: &str| r.get(2).is_some_and(|o| o.split(',').any(|x| x == ctrl));
            // One v1 mount may carry both controllers (`rw,cpuset,memory`).
            if *fstype == "cgroup" && has("cpuset") {
                m.v1_cpuset.get_or_insert(mount(false));
            }
            if *fstype == "cgroup" && has("memory") {
                m.v1_memory.get_or_insert(mount(false));
            }
            if *fstype == "cgroup" && has("cpu") {
                m.v1_cpu.get_or_insert(mount(false));
            }
            if *fstype == "cgroup2" {
                m.v2.get_or_insert(mount(true));
            }
        }
        m
    }

    /// The hierarchy the cpuset controller lives in: v1's `cpuset` mount when there is one
    /// (legacy and hybrid hosts: their cgroup2 mount has no controllers), else the unified one.
    pub fn cpuset(&self) -> Option<&Mount> {
        self.v1_cpuset.as_ref().or(self.v2.as_ref())
    }

    /// The hierarchy the memory controller lives in: v1's `memory` mount when there is one,
    /// else the unified one.
    pub fn memory(&self) -> Option<&Mount> {
        self.v1_memory.as_ref().or(self.v2.as_ref())
    }

    /// The hierarchy the cpu controller (CFS bandwidth) lives in: v1's `cpu` mount (usually
    /// `cpu,cpuacct`) when there is one, else the unified one.
    pub fn cpu(&self) -> Option<&Mount> {
        self.v1_cpu.as_ref().or(self.v2.as_ref())
    }
}

impl Mount {
    /// `proc_path` (a path in the hierarchy, as `/proc/PID/cgroup` or a runtime names it) as
    /// components below this mount's root; `None` when the mount does not show it.
    pub fn below_root<'a>(&self, components: &'a [String]) -> Option<&'a [String]> {
        let mut rest = components;
        for c in self.root.split('/').filter(|c| !c.is_empty()) {
            match rest.split_first() {
                Some((first, tail)) if first == c => rest = tail,
                _ => return None,
            }
        }
        Some(rest)
    }

    /// The directory of the cgroup at `components` (below the hierarchy root), if it exists,
    /// and only if it really is inside this mount: a symlink on the way out of it is refused.
    pub fn dir_of(&self, components: &[String]) -> Result<Option<PathBuf>, std::io::Error> {
        let Some(rest) = self.below_root(components) else {
            return Ok(None);
        };
        let dir = rest.iter().fold(self.point.clone(), |d, c| d.join(c));
        if !dir.is_dir() {
            return Ok(None);
        }
        let (real, base) = (dir.canonicalize()?, self.point.canonicalize()?);
        if !real.starts_with(&base) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} resolves to {}, outside the cgroup mount {}",
                    dir.display(),
                    real.display(),
                    base.display()
                ),
            ));
        }
        Ok(Some(dir))
    }

    /// A cgroups-rs handle on the cgroup at `rel` (below this mount's point, already confined).
    pub(super) fn cgroup(&self, rel: &Path) -> Cgroup {
        Cgroup::load(
            Box::new(OneController(self.clone(), Controller::CpuSet)),
            rel,
        )
    }

    /// [`Mount::cgroup`] for the cpu controller.
    pub(super) fn cpu_cgroup(&self, rel: &Path) -> Cgroup {
        Cgroup::load(Box::new(OneController(self.clone(), Controller::Cpu)), rel)
    }
}

/// The controllers nri-align reads and writes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Controller {
    CpuSet,
    Cpu,
}

/// One hierarchy as cgroups-rs sees it: a single controller at the mount.
#[derive(Debug, Clone)]
pub(super) struct OneController(Mount, Controller);

impl Hierarchy for OneController {
    fn subsystems(&self) -> Vec<Subsystem> {
        let (point, root, v2) = (self.0.point.clone(), PathBuf::from(&self.0.root), self.0.v2);
        vec![match self.1 {
            Controller::CpuSet => Subsystem::CpuSet(CpuSetController::new(point, root, v2)),
            Controller::Cpu => Subsystem::Cpu(CpuController::new(point, root, v2)),
        }]
    }

    fn root(&self) -> PathBuf {
        self.0.point.clone()
    }

    fn root_control_group(&self) -> Cgroup {
        Cgroup::load(Box::new(self.clone()), "")
    }

    fn parent_control_group(&self, path: &str) -> Cgroup {
        let parent = Path::new(path).parent().unwrap_or(Path::new(""));
        Cgroup::load(Box::new(self.clone()), parent)
    }

    fn v2(&self) -> bool {
        self.0.v2
    }
}

/// The text of a kernel file, at most [`MAX_MOUNTINFO`] bytes; `None` when unreadable.
fn read_bounded(path: &Path) -> Option<String> {
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_MOUNTINFO)
        .read_to_end(&mut buf)
        .ok()?;
    String::from_utf8(buf).ok()
}

/// mountinfo escapes space, tab, newline and backslash in paths as `\040`-style octal.
fn unescape(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_string();
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[path = "mounts_tests.rs"]
mod tests;
