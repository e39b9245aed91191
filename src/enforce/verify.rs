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

use crate::enforce::memloc::{
    locality, memory_of, remote_flag, threads, MemoryLocality, RemoteMemory, ThreadPlacement,
};
use crate::enforce::state::{Record, StateDoc};
use crate::host::cgroup::{CgroupMounts, ContainerCgroup};
use crate::host::devices::{nvidia_minor, uverbs_name, visible_devices};
use crate::host::procfs::{dev_of, status, status_field, task_mempolicy, ContainerKey, ProcIndex};
use crate::placement::device_map::DeviceMap;
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
    /// Where its memory lives, per NUMA node, against its nodes (absent where it could not be
    /// read or its record names no memory nodes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryLocality>,
    /// Where its threads last ran, against its cpuset.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<ThreadPlacement>,
    /// Set when its resident memory is mostly off its nodes. A report, not drift: the
    /// decision is in force, the memory was placed before or despite it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_memory: Option<RemoteMemory>,
    /// Each GPU's and NIC's CPUs and memory nodes as the container's env gives them
    /// (`NRI_ALIGN_GPU_CPUS`, ...); absent for a container without devices.
    #[serde(skip_serializing_if = "DeviceMap::is_empty")]
    pub device_map: DeviceMap,
}

/// How `verify` judges what it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Flag a container when more than this percent of its resident memory is off its nodes
    /// (`verify_remote_memory_threshold`).
    pub remote_memory_threshold: u8,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self {
            remote_memory_threshold: crate::config::DEFAULT_REMOTE_MEMORY_THRESHOLD,
        }
    }
}

/// Checks every record of `doc` against the host under `root`, with the default options.
pub fn verify(doc: &StateDoc, root: &Path) -> Vec<ContainerCheck> {
    verify_with(doc, root, VerifyOptions::default())
}

/// Checks every record of `doc` against the host under `root`.
pub fn verify_with(doc: &StateDoc, root: &Path, options: VerifyOptions) -> Vec<ContainerCheck> {
    let procs = ProcIndex::read(root);
    let mounts = CgroupMounts::read(root);
    let online = read_online(root).ok().map(|o| o.cpus);
    let view = View {
        procs: &procs,
        mounts: &mounts,
        nested_pidns: in_nested_pid_namespace(root),
        options,
        page_size: crate::host::memloc::page_size(),
    };
    doc.containers
        .iter()
        // A pod's budget is no container: its CPUs are checked through its containers.
        .filter(|(_, rec)| rec.pod_budget.is_none())
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
    options: VerifyOptions,
    /// This host's page size (cgroup v1 counts memory in pages).
    page_size: u64,
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
        memory: None,
        threads: Vec::new(),
        remote_memory: None,
        device_map: a.device_map.clone(),
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
    check_mempolicy(&mut check, root, first, rec);
    check_map(&mut check.problems, rec);
    if let Some(first) = first {
        check_devices(&mut check.problems, root, first, rec);
    }
    observe_memory(&mut check, &key, root, view, rec);
    check.verdict = if check.problems.is_empty() {
        Verdict::Ok
    } else {
        Verdict::Drift
    };
    check
}

/// Where the container's memory lives and its threads last ran; whether its memory is
/// mostly off its nodes.
fn observe_memory(
    check: &mut ContainerCheck,
    key: &ContainerKey,
    root: &Path,
    view: &View,
    rec: &Record,
) {
    match memory_of(root, view.mounts, key, &check.pids, view.page_size) {
        Ok(Some(found)) => check.memory = locality(rec, found),
        Ok(None) => {}
        Err(e) => check.unchecked.push(format!("where its memory lives: {e}")),
    }
    check.threads = threads(root, &check.pids, rec);
    check.remote_memory = check.memory.as_ref().and_then(|loc| {
        remote_flag(
            root,
            loc,
            rec,
            &check.pids,
            view.options.remote_memory_threshold,
        )
    });
}

/// The per-device map the container's env holds names only CPUs it has: the env is written
/// once, at creation, so an exclusive container whose CPUs moved since (a CPU replaced after
/// it went offline) reads a map that sends its workers elsewhere. A shared container's map
/// follows the pool no more than its env does, and is not compared.
fn check_map(problems: &mut Vec<String>, rec: &Record) {
    let a = &rec.assignment;
    if !a.exclusive || rec.applied_cpus.is_empty() {
        return;
    }
    let mut named = IdSet::new();
    for g in &a.device_map.gpus {
        named.extend_from(&g.cpus);
    }
    let outside = named.difference(&rec.applied_cpus);
    if !outside.is_empty() {
        problems.push(format!(
            "NRI_ALIGN_GPU_CPUS names CPUs {outside} the container does not have (cpuset {})",
            rec.applied_cpus
        ));
    }
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

/// The memory policy the first process runs with against the one decided: one the runtime
/// could not carry is said to be unchecked, one it carried but did not apply (an OCI runtime
/// that ignores `linux.memoryPolicy`) is a difference.
fn check_mempolicy(check: &mut ContainerCheck, root: &Path, first: Option<u32>, rec: &Record) {
    let Some(policy) = &rec.assignment.mempolicy else {
        return;
    };
    if rec.mempolicy_left_out {
        check.unchecked.push(format!(
            "mempolicy {} {}: not applied, the runtime's NRI cannot carry a memory policy \
             (NRI v0.12 and later can)",
            policy.mode, policy.nodes
        ));
        return;
    }
    let Some(pid) = first else {
        return;
    };
    let want = kernel_policy_text(policy);
    match task_mempolicy(root, pid) {
        Some(got) if got == want => {}
        Some(got) => check.problems.push(format!(
            "pid {pid} memory policy {got}, decided {want}: the runtime passed it on and its \
             OCI runtime did not apply it (runc applies linux.memoryPolicy from 1.4)"
        )),
        None => check.unchecked.push(format!(
            "pid {pid} memory policy: /proc/{pid}/numa_maps unreadable"
        )),
    }
}

/// How the kernel prints `policy` in `numa_maps` (`mpol_to_str`).
fn kernel_policy_text(policy: &crate::placement::MemoryPolicy) -> String {
    use crate::placement::MemPolicy as M;
    let mode = match policy.mode {
        M::None => "default",
        M::Bind => "bind",
        M::Interleave => "interleave",
        M::PreferredMany => "prefer (many)",
        M::WeightedInterleave => "weighted interleave",
    };
    format!("{mode}:{}", policy.nodes)
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
#[path = "verify_tests.rs"]
mod tests;
