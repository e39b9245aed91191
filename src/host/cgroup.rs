//! cgroups: where the cpuset hierarchy is mounted (v1 `cpuset` controller or the v2 unified
//! hierarchy), a process's or container's cpuset directory, reading its `cpuset.cpus` /
//! `cpuset.mems`, and the one write nri-align makes (repairing a cpuset the runtime lost).

use std::path::{Path, PathBuf};

use crate::topology::IdSet;

/// The value of cpuset file `base` (`cpuset.cpus`, `cpuset.mems`) in `dir`. cgroup v2 leaves
/// the file empty when unset; `BASE.effective` then counts. `None` when neither can be read.
pub fn read_cpuset(dir: &Path, base: &str) -> Option<String> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    read(base)
        .filter(|s| !s.trim().is_empty())
        .or_else(|| read(&format!("{base}.effective")))
}

/// Makes the cpuset cgroup of a container (OCI `linux.cgroupsPath`, cgroupfs driver form
/// `/parent/id`, under this process's cgroup mounts) hold `want` when it holds something else.
/// Returns what it found when it changed it, `Ok(None)` when it already matched or the cgroup is
/// not one this can find (systemd driver form `slice:prefix:name`, no such directory).
///
/// Only for repairing what the runtime lost: the runtime already recorded `want` in the
/// container's spec (see `Engine::container_started`), the kernel just never got it.
pub fn repair_cpuset(cgroups_path: &str, want: &IdSet) -> std::io::Result<Option<IdSet>> {
    repair_cpuset_under(Path::new("/"), cgroups_path, want)
}

pub(crate) fn repair_cpuset_under(
    root: &Path,
    cgroups_path: &str,
    want: &IdSet,
) -> std::io::Result<Option<IdSet>> {
    if cgroups_path.is_empty() || cgroups_path.contains(':') {
        return Ok(None);
    }
    let mounts = CgroupMounts::read(root);
    // The same path in the v1 cpuset hierarchy or the v2 unified one, as /proc/PID/cgroup
    // would list it.
    let lines = format!("1:cpuset:{cgroups_path}\n0::{cgroups_path}\n");
    let Some(dir) = mounts.cpuset_dir(root, &lines) else {
        return Ok(None);
    };
    let file = dir.join("cpuset.cpus");
    let text = std::fs::read_to_string(&file)?;
    let has = IdSet::parse_list(text.trim()).unwrap_or_default();
    if has == *want {
        return Ok(None);
    }
    std::fs::write(&file, want.to_string())?;
    Ok(Some(has))
}

/// Where the cpuset hierarchy is mounted (v1) or the unified hierarchy (v2).
#[derive(Debug, Default)]
pub struct CgroupMounts {
    /// (mount root within the hierarchy, mount point) of the v1 cpuset controller.
    v1_cpuset: Option<(String, PathBuf)>,
    /// Same for cgroup2.
    v2: Option<(String, PathBuf)>,
}

impl CgroupMounts {
    /// Reads `/proc/self/mountinfo` (or PID 1's) under `root`.
    pub fn read(root: &Path) -> Self {
        let mut m = CgroupMounts::default();
        let text = std::fs::read_to_string(root.join("proc/self/mountinfo"))
            .or_else(|_| std::fs::read_to_string(root.join("proc/1/mountinfo")))
            .unwrap_or_default();
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
            let entry = (mroot.to_string(), PathBuf::from(point));
            match *fstype {
                "cgroup"
                    if r.get(2)
                        .is_some_and(|o| o.split(',').any(|x| x == "cpuset")) =>
                {
                    m.v1_cpuset.get_or_insert(entry);
                }
                "cgroup2" => {
                    m.v2.get_or_insert(entry);
                }
                _ => {}
            }
        }
        m
    }

    /// The cpuset directory of a process from its `/proc/PID/cgroup` text.
    pub fn cpuset_dir(&self, root: &Path, cgroup_text: &str) -> Option<PathBuf> {
        for line in cgroup_text.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(hid), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let mount = if hid == "0" && ctrls.is_empty() {
                self.v2.as_ref()
            } else if ctrls.split(',').any(|c| c == "cpuset") {
                self.v1_cpuset.as_ref()
            } else {
                None
            };
            let Some((mroot, point)) = mount else {
                continue;
            };
            let rel = path.strip_prefix(mroot.as_str()).unwrap_or(path);
            let dir = root
                .join(point.strip_prefix("/").unwrap_or(point))
                .join(rel.trim_start_matches('/'));
            if dir.is_dir() {
                return Some(dir);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    }

    /// A host with cgroup v1 cpuset at /sys/fs/cgroup/cpuset and one container process.
    fn host(root: &Path, id: &str, cg_cpus: &str, allowed: &str, devs: &[&str]) {
        write(
            root,
            "proc/self/mountinfo",
            "30 25 0:26 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset\n",
        );
        write(
            root,
            "proc/4242/cgroup",
            &format!("5:cpuset:/k8s.io/{id}\n1:name=systemd:/k8s.io/{id}\n"),
        );
        write(
            root,
            "proc/4242/status",
            &format!("Name:\tsleep\nCpus_allowed_list:\t{allowed}\nMems_allowed_list:\t0\n"),
        );
        write(
            root,
            &format!("sys/fs/cgroup/cpuset/k8s.io/{id}/cpuset.cpus"),
            &format!("{cg_cpus}\n"),
        );
        write(
            root,
            &format!("sys/fs/cgroup/cpuset/k8s.io/{id}/cpuset.mems"),
            "0\n",
        );
        fs::create_dir_all(root.join("proc/4242/root/dev")).expect("dev");
        for d in devs {
            write(root, &format!("proc/4242/root{d}"), "");
        }
        write(root, "proc/77/cgroup", "5:cpuset:/other\n");
    }

    #[test]
    fn a_lost_cpuset_is_repaired_in_the_cgroup_and_a_matching_one_left_alone() {
        let t = tempfile::tempdir().expect("tmp");
        host(t.path(), "abc", "0-3", "0-3", &[]);
        let file = t.path().join("sys/fs/cgroup/cpuset/k8s.io/abc/cpuset.cpus");
        let want: IdSet = "2-3".parse().expect("set");
        let had = repair_cpuset_under(t.path(), "/k8s.io/abc", &want).expect("io");
        assert_eq!(had.map(|h| h.to_string()), Some("0-3".to_string()));
        assert_eq!(fs::read_to_string(&file).expect("read"), "2-3");
        assert_eq!(
            repair_cpuset_under(t.path(), "/k8s.io/abc", &want).expect("io"),
            None
        );
        // Not a cgroupfs path, or not there: nothing to do.
        assert_eq!(
            repair_cpuset_under(t.path(), "kubepods.slice:cri:abc", &want).expect("io"),
            None
        );
        assert_eq!(
            repair_cpuset_under(t.path(), "/k8s.io/gone", &want).expect("io"),
            None
        );
    }
}
