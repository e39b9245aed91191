//! Drift check (`nri-align verify`): for every recorded container, find its processes, then
//! compare the cgroup's cpuset (v1 or v2), the processes' allowed CPUs and memory nodes, and the
//! GPU and RDMA device nodes visible in the container with the recorded decision. What it reads
//! comes from `host/`; this file only compares.

use std::path::Path;

use serde::Serialize;

use crate::enforce::state::{Record, StateDoc};
use crate::host::cgroup::{CgroupMounts, ContainerCgroup};
use crate::host::devices::{nvidia_minor, uverbs_name, visible_devices};
use crate::host::procfs::{dev_of, status, status_field, ContainerKey, ProcIndex};
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
    let procs = ProcIndex::read(root);
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
    procs: &ProcIndex,
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
    // The container's processes are those in its cgroup (from the cgroups path the runtime
    // gave, either driver), compared component by component: never a process whose path merely
    // contains the id, never CRI-O's conmon beside it (`crio-conmon-ID.scope`).
    let key = match ContainerKey::new(id, &rec.cgroups_path) {
        Ok(key) => key,
        Err(e) => {
            check
                .problems
                .push(format!("recorded cgroups path refused: {e}"));
            check.verdict = Verdict::Drift;
            return check;
        }
    };
    check.pids = procs.pids_of(&key).to_vec();
    let Some(first) = check.pids.first().copied() else {
        return check;
    };
    let want_cpus = &rec.applied_cpus;
    let want_mems = &a.mems;

    // Without a recorded path, the cgroup is the one the first process is in.
    let cgroup = match &key {
        ContainerKey::Cgroup(cg) => Some(cg.clone()),
        ContainerKey::Id(_) => procs
            .cgroup_of(first)
            .and_then(|path| ContainerCgroup::parse(path).ok()),
    };
    match cgroup.map(|cg| mounts.read_cpuset(&cg)) {
        Some(Ok(Some(state))) => {
            compare(
                &mut check.problems,
                "cgroup cpuset.cpus",
                state.cpus,
                want_cpus,
                false,
            );
            if !want_mems.is_empty() {
                compare(
                    &mut check.problems,
                    "cgroup cpuset.mems",
                    state.mems,
                    want_mems,
                    false,
                );
            }
        }
        Some(Err(e)) => check.problems.push(format!("cpuset cgroup: {e}")),
        Some(Ok(None)) | None => check
            .problems
            .push("cpuset cgroup of the container not found".into()),
    }
    for pid in &check.pids {
        let status = status(root, *pid);
        let field = |name: &str| status.as_deref().and_then(|s| status_field(s, name));
        // A process may narrow its own affinity (taskset); only CPUs outside the decision count.
        compare(
            &mut check.problems,
            &format!("pid {pid} Cpus_allowed_list"),
            parse_field(field("Cpus_allowed_list:").ok_or_else(|| "unreadable".to_string())),
            want_cpus,
            true,
        );
        if !want_mems.is_empty() {
            compare(
                &mut check.problems,
                &format!("pid {pid} Mems_allowed_list"),
                parse_field(field("Mems_allowed_list:").ok_or_else(|| "unreadable".to_string())),
                want_mems,
                true,
            );
        }
    }
    let seen = visible_devices(&dev_of(root, first));
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
    got: Result<IdSet, String>,
    want: &IdSet,
    subset: bool,
) {
    match got {
        Ok(set) if (subset && set.is_subset(want)) || set == *want => {}
        Ok(set) => problems.push(format!("{what} is {set}, decided {want}")),
        Err(e) => problems.push(format!("{what}: {e}")),
    }
}

/// A status field's list, parsed.
fn parse_field(text: Result<String, String>) -> Result<IdSet, String> {
    text.and_then(|t| IdSet::parse_list(t.trim()).map_err(|e| e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testing::{container_host as host, write};
    use crate::placement::Assignment;

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

    /// cgroup v2 with the systemd driver: `kubepods-pod1.slice:RUNTIME:abc` is the scope
    /// `PREFIX-abc.scope` in `kubepods.slice/kubepods-pod1.slice`, `cpuset.cpus` unset.
    fn v2_systemd_host(root: &Path, scope: &str) {
        let dir = format!("sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/{scope}");
        write(
            root,
            "proc/self/mountinfo",
            "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        write(
            root,
            "proc/9/cgroup",
            &format!("0::/kubepods.slice/kubepods-pod1.slice/{scope}\n"),
        );
        write(
            root,
            "proc/9/status",
            "Cpus_allowed_list:\t2-3\nMems_allowed_list:\t0\n",
        );
        write(root, &format!("{dir}/cpuset.cpus"), "\n");
        write(root, &format!("{dir}/cpuset.cpus.effective"), "2-3\n");
        write(root, &format!("{dir}/cpuset.mems"), "0\n");
    }

    fn doc_at(id: &str, cgroups_path: &str) -> StateDoc {
        let mut d = doc(id);
        {
            let mut rec = d.containers.get_mut(id).expect("rec");
            rec.cgroups_path = cgroups_path.to_string();
            rec.devices.clear();
        }
        d
    }

    #[test]
    fn systemd_scopes_on_cgroup_v2_and_absent_containers() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path();
        v2_systemd_host(root, "cri-containerd-abc.scope");
        let mut d = doc_at("abc", "kubepods-pod1.slice:cri-containerd:abc");
        d.containers
            .insert("gone".into(), doc("gone").containers["gone"].clone());
        let r = verify(&d, root);
        assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
        assert_eq!(r[0].pids, vec![9]);
        assert_eq!(r[1].verdict, Verdict::NotRunning);
        // A record without a cgroups path finds the scope by the id as a whole name.
        let r = verify(&doc_at("abc", ""), root);
        assert_eq!((r[0].verdict, r[0].pids.clone()), (Verdict::Ok, vec![9]));
    }

    #[test]
    fn crio_conmon_beside_the_container_is_not_the_container() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path();
        v2_systemd_host(root, "crio-abc.scope");
        // conmon, in its own scope next to the container's, on every CPU.
        write(
            root,
            "proc/8/cgroup",
            "0::/kubepods.slice/kubepods-pod1.slice/crio-conmon-abc.scope\n",
        );
        write(
            root,
            "proc/8/status",
            "Cpus_allowed_list:\t0-7\nMems_allowed_list:\t0-1\n",
        );
        for path in ["kubepods-pod1.slice:crio:abc", ""] {
            let r = verify(&doc_at("abc", path), root);
            assert_eq!(r[0].pids, vec![9], "{path:?}");
            assert_eq!(r[0].verdict, Verdict::Ok, "{path:?}: {:?}", r[0].problems);
        }
    }

    #[test]
    fn a_short_id_matches_no_unrelated_process() {
        // Issue 18.4: id `a` matched 80 unrelated processes as substrings of their paths.
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path();
        write(
            root,
            "proc/self/mountinfo",
            "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        for pid in 100..180 {
            write(
                root,
                &format!("proc/{pid}/cgroup"),
                &format!("0::/system.slice/app-{pid}.scope\n"),
            );
        }
        for path in ["", "/k8s.io/a"] {
            let r = verify(&doc_at("a", path), root);
            assert!(r[0].pids.is_empty(), "{path:?}: {:?}", r[0].pids);
            assert_eq!(r[0].verdict, Verdict::NotRunning);
        }
    }

    #[test]
    fn a_recorded_path_that_leaves_the_cgroup_root_is_reported_not_followed() {
        let t = tempfile::tempdir().expect("tmp");
        host(t.path(), "abc", "2-3", "2", &[]);
        let r = verify(&doc_at("abc", "/../../../../tmp/x"), t.path());
        assert_eq!(r[0].verdict, Verdict::Drift);
        assert!(r[0].problems[0].contains("`..`"), "{:?}", r[0].problems);
    }
}
