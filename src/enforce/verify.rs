//! Drift check (`nri-align verify`): for every recorded container, find its processes, then
//! compare the cgroup's cpuset (v1 or v2), the processes' allowed CPUs and memory nodes, and the
//! GPU and RDMA device nodes visible in the container with the recorded decision. What it reads
//! comes from `host/`; this file only compares.
//!
//! The processes are found in `/proc` when it is the host's, else through the container's
//! cgroup: its `cgroup.procs` under the cgroup mount (the DaemonSet mounts the host's, without
//! `hostPID`). There the kernel lists processes of other PID namespaces as `0`: the container
//! is running and its cgroup cpuset is checked, but not its processes' affinity or devices,
//! which the check says. cgroup v1 leaves such processes out of `cgroup.procs` altogether: there
//! an empty list, read from a PID namespace that is not the host's, says nothing. A container
//! it could not look for at all is `unknown`, never `not-running`: that would be an all-clear
//! given without looking.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::enforce::state::{Record, StateDoc};
use crate::host::cgroup::{CgroupMounts, ContainerCgroup};
use crate::host::devices::{nvidia_minor, uverbs_name, visible_devices};
use crate::host::procfs::{dev_of, status, status_field, ContainerKey, ProcIndex};
use crate::topology::{read_online, IdSet};

/// How one container compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Matches the decision.
    Ok,
    /// Differs from the decision.
    Drift,
    /// Its cgroup is gone or holds no process (created, stopped, or gone): nothing to compare.
    NotRunning,
    /// Could not be looked for (no cgroup mount, no cgroups path recorded and no process seen):
    /// neither fine nor drifted.
    Unknown,
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
    /// What could not be compared, and why (the check covers the rest).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unchecked: Vec<String>,
    /// CPUs the container holds exclusively that are offline now (hot-unplugged or offlined
    /// since it was placed): it keeps the others, and these are its again when they return.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub offline_cpus: String,
}

/// Checks every record of `doc` against the host under `root`.
pub fn verify(doc: &StateDoc, root: &Path) -> Vec<ContainerCheck> {
    let procs = ProcIndex::read(root);
    let mounts = CgroupMounts::read(root);
    let online = read_online(root).ok().map(|o| o.cpus);
    let view = View {
        procs: &procs,
        mounts: &mounts,
        nested_pidns: in_nested_pid_namespace(root),
    };
    doc.containers
        .iter()
        .map(|(id, rec)| {
            let gone = offline_held(rec, online.as_ref());
            let mut check = check_one(id, rec, root, &view, &gone);
            check.offline_cpus = gone.to_string();
            check
        })
        .collect()
}

/// The CPUs record `rec` holds exclusively that are not in `online` (none when the online
/// CPUs could not be read).
pub fn offline_held(rec: &Record, online: Option<&IdSet>) -> IdSet {
    match online {
        Some(online) if rec.assignment.exclusive => rec.applied_cpus.difference(online),
        _ => IdSet::new(),
    }
}

/// What this process can see of the host.
struct View<'a> {
    procs: &'a ProcIndex,
    mounts: &'a CgroupMounts,
    /// This process's PID namespace is not the host's (a pod without `hostPID`).
    nested_pidns: bool,
}

/// Whether `proc/self` under `root` is in a PID namespace below the initial one: its `NSpid`
/// line has one PID per namespace level. A tree without the line (an old kernel, a test
/// fixture) counts as the host's.
fn in_nested_pid_namespace(root: &Path) -> bool {
    std::fs::read_to_string(root.join("proc/self/status"))
        .ok()
        .and_then(|s| status_field(&s, "NSpid:"))
        .is_some_and(|v| v.split_whitespace().count() > 1)
}

fn check_one(id: &str, rec: &Record, root: &Path, view: &View, offline: &IdSet) -> ContainerCheck {
    let View { procs, mounts, .. } = *view;
    let a = &rec.assignment;
    let mut check = ContainerCheck {
        id: id.to_string(),
        pod: a.pod_name.clone(),
        name: a.container_name.clone(),
        pids: Vec::new(),
        verdict: Verdict::NotRunning,
        problems: Vec::new(),
        unchecked: Vec::new(),
        offline_cpus: String::new(),
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
    let first = check.pids.first().copied();
    if first.is_none() && !look_in_cgroup(&mut check, &key, view) {
        return check;
    }
    check_cgroup(
        &mut check.problems,
        &key,
        first,
        procs,
        mounts,
        rec,
        offline,
    );
    check_processes(&mut check.problems, root, &check.pids, rec);
    if let Some(first) = first {
        check_devices(&mut check.problems, root, first, rec);
    }
    check.verdict = if check.problems.is_empty() {
        Verdict::Ok
    } else {
        Verdict::Drift
    };
    check
}

/// A container none of whose processes this /proc shows (no hostPID): whether its cgroup
/// says it runs, in which case the cgroup's cpuset is still checked (`true`). Sets the verdict
/// to unknown where it cannot look.
fn look_in_cgroup(check: &mut ContainerCheck, key: &ContainerKey, view: &View) -> bool {
    let ContainerKey::Cgroup(cg) = key else {
        check.verdict = Verdict::Unknown;
        check
            .unchecked
            .push("no process of it in /proc and no cgroups path recorded to look in".into());
        return false;
    };
    match cgroup_procs(view.mounts, cg) {
        Procs::Listed(n) if n > 0 => {
            check.unchecked.push(format!(
                "{n} process(es) in its cgroup, none visible in this PID namespace (no \
                 hostPID): their CPU and memory affinity and devices are not checked"
            ));
            true
        }
        Procs::EmptyV1 if view.nested_pidns => {
            check.verdict = Verdict::Unknown;
            check.unchecked.push(
                "its cgroup exists, and cgroup v1 leaves processes of other PID namespaces out \
                 of cgroup.procs: without the host's PID namespace (hostPID) whether it runs \
                 cannot be told"
                    .into(),
            );
            false
        }
        Procs::Listed(_) | Procs::EmptyV1 | Procs::NoCgroup => false,
        Procs::CannotLook(why) => {
            check.verdict = Verdict::Unknown;
            check.unchecked.push(why);
            false
        }
    }
}

/// The cgroup's cpuset against the decision. Without a recorded path, the cgroup is the one
/// the container's first process (`first`) is in.
fn check_cgroup(
    problems: &mut Vec<String>,
    key: &ContainerKey,
    first: Option<u32>,
    procs: &ProcIndex,
    mounts: &CgroupMounts,
    rec: &Record,
    offline: &IdSet,
) {
    let (want_cpus, want_mems) = (&rec.applied_cpus, &rec.assignment.mems);
    // A cgroup shows an offline CPU or not depending on the file read (`cpuset.cpus` keeps
    // what was written, the effective set loses it): either is what was decided.
    let online_part = want_cpus.difference(offline);
    let cgroup = match key {
        ContainerKey::Cgroup(cg) => Some(cg.clone()),
        ContainerKey::Id(_) => first
            .and_then(|pid| procs.cgroup_of(pid))
            .and_then(|path| ContainerCgroup::parse(path).ok()),
    };
    match cgroup.map(|cg| mounts.read_cpuset(&cg)) {
        Some(Ok(Some(state))) => {
            let cpus = match state.cpus {
                Ok(got) if !offline.is_empty() && got == online_part => Ok(want_cpus.clone()),
                other => other,
            };
            compare(problems, "cgroup cpuset.cpus", cpus, want_cpus, false);
            if !want_mems.is_empty() {
                compare(problems, "cgroup cpuset.mems", state.mems, want_mems, false);
            }
        }
        Some(Err(e)) => problems.push(format!("cpuset cgroup: {e}")),
        Some(Ok(None)) | None => problems.push("cpuset cgroup of the container not found".into()),
    }
}

/// Each process's allowed CPUs and memory nodes against the decision. A process may narrow
/// its own affinity (taskset); only CPUs outside the decision count.
fn check_processes(problems: &mut Vec<String>, root: &Path, pids: &[u32], rec: &Record) {
    let (want_cpus, want_mems) = (&rec.applied_cpus, &rec.assignment.mems);
    for pid in pids {
        let status = status(root, *pid);
        let field = |name: &str| status.as_deref().and_then(|s| status_field(s, name));
        compare(
            problems,
            &format!("pid {pid} Cpus_allowed_list"),
            parse_field(field("Cpus_allowed_list:").ok_or_else(|| "unreadable".to_string())),
            want_cpus,
            true,
        );
        if !want_mems.is_empty() {
            compare(
                problems,
                &format!("pid {pid} Mems_allowed_list"),
                parse_field(field("Mems_allowed_list:").ok_or_else(|| "unreadable".to_string())),
                want_mems,
                true,
            );
        }
    }
}

/// The GPU and RDMA device nodes the first process sees against those recorded (nothing to
/// say when they cannot be read).
fn check_devices(problems: &mut Vec<String>, root: &Path, first: u32, rec: &Record) {
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
            problems.push(format!(
                "visible devices [{}], decided [{}]",
                seen.join(" "),
                want.join(" ")
            ));
        }
    }
}

/// What a container's cgroup says of its processes.
#[derive(Debug, PartialEq, Eq)]
enum Procs {
    /// `cgroup.procs` lists this many (cgroup v2 lists those of other PID namespaces as `0`).
    Listed(usize),
    /// cgroup v1's `cgroup.procs` lists none (it leaves other PID namespaces' out).
    EmptyV1,
    /// The hierarchy is mounted and shows where the cgroup would be; it does not exist.
    NoCgroup,
    /// The cgroup could not be looked for: why.
    CannotLook(String),
}

fn cgroup_procs(mounts: &CgroupMounts, cg: &ContainerCgroup) -> Procs {
    let Some(mount) = mounts.cpuset() else {
        return Procs::CannotLook("no cgroup hierarchy mounted here to look for it in".into());
    };
    if mount.below_root(cg.components()).is_none() {
        return Procs::CannotLook(format!(
            "the cgroup mount at {} shows only {}, not {}",
            mount.point.display(),
            mount.root,
            cg.proc_path()
        ));
    }
    let dir: PathBuf = match mount.dir_of(cg.components()) {
        Ok(Some(dir)) => dir,
        Ok(None) if mount.point.is_dir() => return Procs::NoCgroup,
        Ok(None) => {
            return Procs::CannotLook(format!(
                "cgroup mount point {} is not a directory",
                mount.point.display()
            ))
        }
        Err(e) => return Procs::CannotLook(format!("cgroup {}: {e}", cg.proc_path())),
    };
    let path = dir.join("cgroup.procs");
    match std::fs::read_to_string(&path) {
        Ok(text) => match text.lines().filter(|l| !l.trim().is_empty()).count() {
            0 if !mount.v2 => Procs::EmptyV1,
            n => Procs::Listed(n),
        },
        // Removed between the two reads: the container just went.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Procs::NoCgroup,
        Err(e) => Procs::CannotLook(format!("{}: {e}", path.display())),
    }
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
        // Id `a` once matched 80 unrelated processes as substrings of their paths.
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
        std::fs::create_dir_all(root.join("sys/fs/cgroup")).expect("mount point");
        // Without a cgroups path there is nowhere else to look: not an all-clear.
        for (path, verdict) in [("", Verdict::Unknown), ("/k8s.io/a", Verdict::NotRunning)] {
            let r = verify(&doc_at("a", path), root);
            assert!(r[0].pids.is_empty(), "{path:?}: {:?}", r[0].pids);
            assert_eq!(r[0].verdict, verdict, "{path:?}");
        }
    }

    /// The DaemonSet's view: the host's cgroup hierarchy mounted, its own PID namespace. The
    /// kernel lists the container's processes as `0` in `cgroup.procs`.
    fn pidns_host(root: &Path, procs: &str, cpus: &str) {
        let dir = "sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope";
        write(
            root,
            "proc/self/mountinfo",
            "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        write(root, "proc/1/cgroup", "0::/\n");
        write(root, &format!("{dir}/cgroup.procs"), procs);
        write(root, &format!("{dir}/cpuset.cpus"), &format!("{cpus}\n"));
        write(root, &format!("{dir}/cpuset.mems"), "0\n");
    }

    #[test]
    fn processes_of_another_pid_namespace_are_found_through_the_cgroup() {
        let path = "kubepods-pod1.slice:cri-containerd:abc";
        let t = tempfile::tempdir().expect("tmp");
        pidns_host(t.path(), "0\n0\n", "2-3");
        let r = verify(&doc_at("abc", path), t.path());
        assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
        assert!(r[0].pids.is_empty());
        assert!(
            r[0].unchecked[0].starts_with("2 process(es) in its cgroup, none visible"),
            "{:?}",
            r[0].unchecked
        );

        let t = tempfile::tempdir().expect("tmp");
        pidns_host(t.path(), "0\n", "0-3");
        let r = verify(&doc_at("abc", path), t.path());
        assert_eq!(r[0].verdict, Verdict::Drift);
        assert!(
            r[0].problems[0].contains("cgroup cpuset.cpus is 0-3, decided 2-3"),
            "{:?}",
            r[0].problems
        );

        // An empty cgroup: created or stopped, really not running.
        let t = tempfile::tempdir().expect("tmp");
        pidns_host(t.path(), "", "2-3");
        let r = verify(&doc_at("abc", path), t.path());
        assert_eq!(r[0].verdict, Verdict::NotRunning);
    }

    #[test]
    fn an_empty_v1_cgroup_seen_from_another_pid_namespace_is_unknown() {
        let path = "/kubepods/pod1/abc";
        let dir = "sys/fs/cgroup/cpuset/kubepods/pod1/abc";
        for (nspid, verdict) in [
            ("NSpid:\t4321\t7\n", Verdict::Unknown),
            ("NSpid:\t7\n", Verdict::NotRunning),
        ] {
            let t = tempfile::tempdir().expect("tmp");
            let root = t.path();
            write(
                root,
                "proc/self/mountinfo",
                "30 25 0:26 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n",
            );
            write(
                root,
                "proc/self/status",
                &format!("Name:\tnri-align\n{nspid}"),
            );
            write(root, &format!("{dir}/cgroup.procs"), "");
            write(root, &format!("{dir}/cpuset.cpus"), "2-3\n");
            let r = verify(&doc_at("abc", path), root);
            assert_eq!(r[0].verdict, verdict, "{nspid:?}: {:?}", r[0].unchecked);
            if verdict == Verdict::Unknown {
                assert!(
                    r[0].unchecked[0].contains("hostPID"),
                    "{:?}",
                    r[0].unchecked
                );
            }
        }
    }

    #[test]
    fn without_a_cgroup_mount_a_container_is_unknown_not_absent() {
        let t = tempfile::tempdir().expect("tmp");
        write(t.path(), "proc/self/mountinfo", "");
        let r = verify(&doc("abc"), t.path());
        assert_eq!(r[0].verdict, Verdict::Unknown);
        assert!(
            r[0].unchecked[0].contains("no cgroup hierarchy mounted"),
            "{:?}",
            r[0].unchecked
        );
    }

    #[test]
    fn a_recorded_path_that_leaves_the_cgroup_root_is_reported_not_followed() {
        let t = tempfile::tempdir().expect("tmp");
        host(t.path(), "abc", "2-3", "2", &[]);
        let r = verify(&doc_at("abc", "/../../../../tmp/x"), t.path());
        assert_eq!(r[0].verdict, Verdict::Drift);
        assert!(r[0].problems[0].contains("`..`"), "{:?}", r[0].problems);
    }

    #[test]
    fn a_held_cpu_gone_offline_is_named_and_is_not_drift() {
        let t = tempfile::tempdir().expect("tmp");
        // CPU 3 went offline: the kernel took it out of the effective cpuset and affinity.
        host(t.path(), "abc", "2", "2", &["/dev/nvidia1"]);
        write(t.path(), "sys/devices/system/cpu/online", "0-2,4-7\n");
        let r = verify(&doc("abc"), t.path());
        assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
        assert_eq!(r[0].offline_cpus, "3");
        // All online again, the same cgroup is drift: a CPU it holds is missing.
        write(t.path(), "sys/devices/system/cpu/online", "0-7\n");
        let r = verify(&doc("abc"), t.path());
        assert_eq!(r[0].verdict, Verdict::Drift);
        assert_eq!(r[0].offline_cpus, "");
    }
}
