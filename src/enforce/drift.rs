//! Drift check: for every recorded container, find its processes under `/proc`, then compare
//! the cgroup's cpuset (v1 or v2), the processes' allowed CPUs and memory nodes, and the GPU and
//! RDMA device nodes visible in the container with the recorded decision.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::topology::IdSet;

use crate::enforce::inputs::{nvidia_minor, uverbs_name};
use crate::enforce::state::{Record, StateDoc};

/// How one container compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Matches the decision.
    Ok,
    /// Differs from the decision.
    Drift,
    /// No process found (created, stopped, or gone): nothing to compare.
    NotRunning,
}

/// The check of one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerCheck {
    /// Container id.
    pub id: String,
    /// Pod namespace/name.
    pub pod: String,
    /// Container name.
    pub name: String,
    /// Processes found.
    pub pids: Vec<u32>,
    /// Verdict.
    pub verdict: Verdict,
    /// Each difference, in words.
    pub problems: Vec<String>,
}

/// Checks every record of `doc` against the host under `root`.
pub fn verify(doc: &StateDoc, root: &Path) -> Vec<ContainerCheck> {
    let procs = cgroup_lines_by_pid(root);
    let mounts = CgroupMounts::read(root);
    doc.containers
        .iter()
        .map(|(id, rec)| check_one(id, rec, root, &procs, &mounts))
        .collect()
}

fn check_one(
    id: &str,
    rec: &Record,
    root: &Path,
    procs: &[(u32, String)],
    mounts: &CgroupMounts,
) -> ContainerCheck {
    let a = &rec.assignment;
    let mut check = ContainerCheck {
        id: id.to_string(),
        pod: a.pod_name.clone(),
        name: a.container_name.clone(),
        pids: Vec::new(),
        verdict: Verdict::NotRunning,
        problems: Vec::new(),
    };
    // containerd puts the container id in the cgroup path with either cgroup driver
    // (`/k8s.io/ID`, `cri-containerd-ID.scope`).
    let mine: Vec<&(u32, String)> = procs.iter().filter(|(_, cg)| cg.contains(id)).collect();
    check.pids = mine.iter().map(|(p, _)| *p).collect();
    let Some((first, cgroup_text)) = mine.first() else {
        return check;
    };
    let want_cpus = &rec.applied_cpus;
    let want_mems = &a.mems;

    match mounts.cpuset_dir(root, cgroup_text) {
        Some(dir) => {
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
            // cgroup v2 leaves cpuset.cpus empty when unset; the effective file then counts.
            let value = |base: &str| {
                read(base)
                    .filter(|s| !s.trim().is_empty())
                    .or_else(|| read(&format!("{base}.effective")))
            };
            compare(
                &mut check.problems,
                "cgroup cpuset.cpus",
                value("cpuset.cpus"),
                want_cpus,
                false,
            );
            if !want_mems.is_empty() {
                compare(
                    &mut check.problems,
                    "cgroup cpuset.mems",
                    value("cpuset.mems"),
                    want_mems,
                    false,
                );
            }
        }
        None => check
            .problems
            .push("cpuset cgroup of the container not found".into()),
    }
    for (pid, _) in &mine {
        let status = std::fs::read_to_string(root.join(format!("proc/{pid}/status"))).ok();
        let field = |name: &str| {
            status.as_deref().and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
            })
        };
        // A process may narrow its own affinity (taskset); only CPUs outside the decision count.
        compare(
            &mut check.problems,
            &format!("pid {pid} Cpus_allowed_list"),
            field("Cpus_allowed_list:"),
            want_cpus,
            true,
        );
        if !want_mems.is_empty() {
            compare(
                &mut check.problems,
                &format!("pid {pid} Mems_allowed_list"),
                field("Mems_allowed_list:"),
                want_mems,
                true,
            );
        }
    }
    let seen = visible_devices(&root.join(format!("proc/{first}/root/dev")));
    let mut want: Vec<String> = rec
        .devices
        .iter()
        .filter(|p| nvidia_minor(p).is_some() || uverbs_name(p).is_some())
        .cloned()
        .collect();
    want.sort();
    if let Some(seen) = seen {
        if seen != want {
            check.problems.push(format!(
                "visible devices [{}], decided [{}]",
                seen.join(" "),
                want.join(" ")
            ));
        }
    }
    check.verdict = if check.problems.is_empty() {
        Verdict::Ok
    } else {
        Verdict::Drift
    };
    check
}

/// Which of `ids` have a process in their cgroup on the host under `root`. `None` when none
/// has: then either all are gone or this process cannot see the host's processes (no host PID
/// namespace), and the caller must not conclude anything.
pub fn live_containers<'a>(
    root: &Path,
    ids: impl IntoIterator<Item = &'a str>,
) -> Option<std::collections::HashSet<String>> {
    let procs = cgroup_lines_by_pid(root);
    let live: std::collections::HashSet<String> = ids
        .into_iter()
        .filter(|id| procs.iter().any(|(_, cg)| cg.contains(id)))
        .map(str::to_string)
        .collect();
    (!live.is_empty()).then_some(live)
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

fn repair_cpuset_under(
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

fn compare(
    problems: &mut Vec<String>,
    what: &str,
    got: Option<String>,
    want: &IdSet,
    subset: bool,
) {
    let Some(text) = got else {
        problems.push(format!("{what}: unreadable"));
        return;
    };
    match IdSet::parse_list(text.trim()) {
        Ok(set) if (subset && set.is_subset(want)) || set == *want => {}
        Ok(set) => problems.push(format!("{what} is {set}, decided {want}")),
        Err(e) => problems.push(format!("{what}: {e}")),
    }
}

/// `(pid, content of /proc/PID/cgroup)` for every process.
fn cgroup_lines_by_pid(root: &Path) -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir(root.join("proc")) else {
        return Vec::new();
    };
    let mut out: Vec<(u32, String)> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter_map(|pid| {
            std::fs::read_to_string(root.join(format!("proc/{pid}/cgroup")))
                .ok()
                .map(|t| (pid, t))
        })
        .collect();
    out.sort();
    out
}

/// GPU and uverbs nodes under a container's `/dev`, sorted; `None` when it cannot be read.
fn visible_devices(dev: &Path) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dev).ok()?.filter_map(|e| e.ok()) {
        let path = format!("/dev/{}", e.file_name().to_string_lossy());
        if nvidia_minor(&path).is_some() {
            out.push(path);
        }
    }
    if let Ok(ib) = std::fs::read_dir(dev.join("infiniband")) {
        for e in ib.filter_map(|e| e.ok()) {
            let path = format!("/dev/infiniband/{}", e.file_name().to_string_lossy());
            if uverbs_name(&path).is_some() {
                out.push(path);
            }
        }
    }
    out.sort();
    Some(out)
}

/// Where the cpuset hierarchy is mounted (v1) or the unified hierarchy (v2).
#[derive(Debug, Default)]
struct CgroupMounts {
    /// (mount root within the hierarchy, mount point) of the v1 cpuset controller.
    v1_cpuset: Option<(String, PathBuf)>,
    /// Same for cgroup2.
    v2: Option<(String, PathBuf)>,
}

impl CgroupMounts {
    fn read(root: &Path) -> Self {
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
    fn cpuset_dir(&self, root: &Path, cgroup_text: &str) -> Option<PathBuf> {
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
    use crate::placement::Assignment;
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

    fn doc(id: &str) -> StateDoc {
        let mut d = StateDoc::default();
        d.containers.insert(
            id.into(),
            Record {
                assignment: Assignment {
                    container_id: id.into(),
                    cpus: "2-3".parse().expect("set"),
                    exclusive: true,
                    mems: "0".parse().expect("set"),
                    ..Default::default()
                },
                pod_sandbox_id: String::new(),
                namespace: String::new(),
                cgroups_path: format!("/k8s.io/{id}"),
                applied_cpus: "2-3".parse().expect("set"),
                devices: vec!["/dev/nvidia1".into()],
                resources: Default::default(),
            },
        );
        d
    }

    #[test]
    fn matching_container_is_ok() {
        let t = tempfile::tempdir().expect("tmp");
        host(
            t.path(),
            "abc",
            "2-3",
            "2",
            &["/dev/nvidia1", "/dev/nvidiactl", "/dev/null"],
        );
        let r = verify(&doc("abc"), t.path());
        assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
        assert_eq!(r[0].pids, vec![4242]);
    }

    #[test]
    fn widened_cpuset_and_extra_gpu_are_drift() {
        let t = tempfile::tempdir().expect("tmp");
        host(
            t.path(),
            "abc",
            "0-3",
            "0-3",
            &["/dev/nvidia0", "/dev/nvidia1"],
        );
        let r = verify(&doc("abc"), t.path());
        assert_eq!(r[0].verdict, Verdict::Drift);
        let all = r[0].problems.join("\n");
        assert!(
            all.contains("cgroup cpuset.cpus is 0-3, decided 2-3"),
            "{all}"
        );
        assert!(all.contains("pid 4242 Cpus_allowed_list is 0-3"), "{all}");
        assert!(
            all.contains("visible devices [/dev/nvidia0 /dev/nvidia1], decided [/dev/nvidia1]"),
            "{all}"
        );
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

    #[test]
    fn live_containers_needs_at_least_one_visible() {
        let t = tempfile::tempdir().expect("tmp");
        host(t.path(), "abc", "2-3", "2", &[]);
        let live = live_containers(t.path(), ["abc", "gone"]).expect("abc is visible");
        assert!(live.contains("abc") && !live.contains("gone"));
        assert_eq!(live_containers(t.path(), ["gone"]), None);
    }

    #[test]
    fn cgroup_v2_and_absent_containers() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path();
        write(
            root,
            "proc/self/mountinfo",
            "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        write(
            root,
            "proc/9/cgroup",
            "0::/kubepods/cri-containerd-abc.scope\n",
        );
        write(
            root,
            "proc/9/status",
            "Cpus_allowed_list:\t2-3\nMems_allowed_list:\t0\n",
        );
        write(
            root,
            "sys/fs/cgroup/kubepods/cri-containerd-abc.scope/cpuset.cpus",
            "\n",
        );
        write(
            root,
            "sys/fs/cgroup/kubepods/cri-containerd-abc.scope/cpuset.cpus.effective",
            "2-3\n",
        );
        write(
            root,
            "sys/fs/cgroup/kubepods/cri-containerd-abc.scope/cpuset.mems",
            "0\n",
        );
        let mut d = doc("abc");
        d.containers.get_mut("abc").expect("rec").devices.clear();
        d.containers
            .insert("gone".into(), doc("gone").containers["gone"].clone());
        let r = verify(&d, root);
        assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
        assert_eq!(r[1].verdict, Verdict::NotRunning);
    }
}
