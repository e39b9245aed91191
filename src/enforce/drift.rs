//! Drift check (`nri-align verify`): for every recorded container, find its processes, then
//! compare the cgroup's cpuset (v1 or v2), the processes' allowed CPUs and memory nodes, and the
//! GPU and RDMA device nodes visible in the container with the recorded decision. What it reads
//! comes from `host/`; this file only compares.

use std::path::Path;

use serde::Serialize;

use crate::enforce::state::{Record, StateDoc};
use crate::host::cgroup::{read_cpuset, CgroupMounts};
use crate::host::devices::{nvidia_minor, uverbs_name, visible_devices};
use crate::host::procfs::{cgroup_lines_by_pid, dev_of, status, status_field};
use crate::topology::IdSet;

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
            let value = |base: &str| read_cpuset(&dir, base);
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
        let status = status(root, *pid);
        let field = |name: &str| status.as_deref().and_then(|s| status_field(s, name));
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
    let seen = visible_devices(&dev_of(root, *first));
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
                ..Record::default()
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
