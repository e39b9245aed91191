//! Containers seen from the host's /proc alone (no CRI call): which processes run under a pod's
//! cgroup parent, in which container's cgroup, on which CPUs, with which device nodes. What runc
//! and the kernel enforce, whatever nri-align or the runtime believe.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// A container seen from the host's /proc alone (no CRI call): cheap enough to sample often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// CPUs allowed to its processes (union).
    pub cpus: Vec<u32>,
    /// `/dev/nvidiaN` and `/dev/infiniband/uverbsN` in its /dev.
    pub devices: Vec<String>,
    /// Whether its processes carry NRI_ALIGN_DECISION (nri-align adjusted it at creation;
    /// containers the runtime created while nri-align was down do not).
    pub decision: bool,
}

/// A process whose cgroup lies under a pod's cgroup parent.
pub struct ContainerProcess {
    pub pid: u32,
    /// The container (or sandbox) id its cgroup is named by ([`container_of_cgroup`]).
    pub id: String,
    /// Its `Cpus_allowed_list`: what the kernel lets it run on.
    pub cpus: Vec<u32>,
}

/// Every process whose cgroup lies under `cgroup_parent`, with the container (or sandbox) id
/// of its cgroup and the CPUs it may run on. Processes that end meanwhile are skipped.
pub fn processes_under(cgroup_parent: &str) -> Vec<ContainerProcess> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let needle = format!("{}/", cgroup_parent.trim_end_matches('/'));
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cg) = fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
            continue;
        };
        let Some(id) = cg.lines().find_map(|l| {
            let at = l.find(&needle)?;
            container_of_cgroup(l[at + needle.len()..].split('/').next()?)
        }) else {
            continue;
        };
        let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let cpus = super::host::parse_list(
            &super::status_field(&status, "Cpus_allowed_list").unwrap_or_default(),
        );
        out.push(ContainerProcess { pid, id, cpus });
    }
    out
}

/// Every process whose cgroup lies under `cgroup_parent`, grouped by the cgroup's last path
/// element (the container or sandbox id).
pub fn scan_cgroup(cgroup_parent: &str) -> BTreeMap<String, Seen> {
    let mut out: BTreeMap<String, Seen> = BTreeMap::new();
    for ContainerProcess { pid, id, cpus } in processes_under(cgroup_parent) {
        let devices = container_devices(Path::new(&format!("/proc/{pid}/root/dev")));
        let environ = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let decision = environ
            .split(|b| *b == 0)
            .any(|kv| kv.starts_with(b"NRI_ALIGN_DECISION="));
        let entry = out.entry(id).or_insert_with(|| Seen {
            cpus: Vec::new(),
            devices: devices.clone(),
            decision,
        });
        entry.decision |= decision;
        entry.cpus.extend(cpus);
        entry.cpus.sort_unstable();
        entry.cpus.dedup();
    }
    out
}

/// The container (or sandbox) id in the name of its cgroup below the pod's cgroup parent:
/// containerd's cgroupfs driver names it by the id, CRI-O's `crio-ID` (its conmon, when moved
/// there, sits in `crio-conmon-ID`, which is no container), and the systemd drivers
/// `cri-containerd-ID.scope` / `crio-ID.scope`.
pub fn container_of_cgroup(leaf: &str) -> Option<String> {
    if leaf.starts_with("crio-conmon-") {
        return None;
    }
    let id = leaf.strip_suffix(".scope").unwrap_or(leaf);
    let id = id
        .strip_prefix("crio-")
        .or_else(|| id.strip_prefix("cri-containerd-"))
        .unwrap_or(id);
    (!id.is_empty()).then(|| id.to_string())
}

/// GPU and RDMA verbs nodes under a container's /dev, sorted.
pub fn container_devices(dev: &Path) -> Vec<String> {
    let mut devices: Vec<String> = Vec::new();
    for (dir, prefix) in [
        (dev.to_path_buf(), "/dev/"),
        (dev.join("infiniband"), "/dev/infiniband/"),
    ] {
        if let Ok(rd) = fs::read_dir(&dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let gpu = name
                    .strip_prefix("nvidia")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
                if gpu || name.starts_with("uverbs") {
                    devices.push(format!("{prefix}{name}"));
                }
            }
        }
    }
    devices.sort();
    devices
}
