//! What the soak test (tests/e2e/soak.rs) needs besides the suites' harness: a small seeded
//! random generator (no crate: a seed must replay the same steps wherever it runs) and a view of
//! every running container from the host alone (/proc and its cpuset cgroup), cheap enough to
//! take after every step.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use super::align::{container_devices, cpuset_dir, processes_under, ContainerProcess};
use serde_json::Value;

use super::host::{parse_list, recorded_ids};
use super::{ContainerSpec, Runtime};
use crate::rng::Rng;

/// A seed from the clock and the process id, for a run that was given none.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    Rng::new(nanos ^ u64::from(std::process::id()).rotate_left(32)).next_u64() % 1_000_000_000
}

/// The seed (`NRI_ALIGN_SOAK_SEED`, else a fresh one) and the number of steps
/// (`NRI_ALIGN_SOAK_STEPS`, else `default`) of a soak run.
pub fn seed_and_steps(default: usize) -> (u64, usize) {
    let number = |key: &str| -> Option<u64> {
        let v = std::env::var(key).ok()?;
        Some(
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{key}={v:?}: not a number")),
        )
    };
    let seed = number("NRI_ALIGN_SOAK_SEED").unwrap_or_else(fresh_seed);
    let steps = number("NRI_ALIGN_SOAK_STEPS").map_or(default, |n| n as usize);
    (seed, steps)
}

/// The name `cargo test --test e2e soak::soak::NAME` runs `rt`'s soak by.
pub fn test_filter(rt: Runtime) -> &'static str {
    match rt {
        Runtime::Crio => "crio",
        _ if rt == Runtime::CONTAINERD_1_7 => "containerd_1_7",
        _ => "containerd_2_1",
    }
}

/// A container seen from the host: the CPUs its processes may run on, its cpuset cgroup's CPUs
/// and the GPU / RDMA nodes in its /dev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Its processes.
    pub pids: Vec<u32>,
    /// Union of its processes' `Cpus_allowed_list`.
    pub proc_cpus: Vec<u32>,
    /// `cpuset.cpus` of its cgroup (the effective set when unset).
    pub cgroup_cpus: Vec<u32>,
    /// `/dev/nvidiaN`, `/dev/infiniband/uverbsN` in its /dev.
    pub devices: Vec<String>,
}

/// Every process under `cgroup_parent`, grouped by container (or sandbox) id: what runc
/// enforces, whatever nri-align or the runtime believe.
pub fn observe(cgroup_parent: &str) -> BTreeMap<String, Observed> {
    let mut out: BTreeMap<String, Observed> = BTreeMap::new();
    for ContainerProcess { pid, id, cpus } in processes_under(cgroup_parent) {
        let entry = out.entry(id).or_insert_with(|| {
            let cgroup_cpus = cpuset_dir(pid)
                .map(|d| {
                    let read = |f: &str| fs::read_to_string(d.join(f)).unwrap_or_default();
                    let mut text = read("cpuset.cpus");
                    if text.trim().is_empty() {
                        text = read("cpuset.cpus.effective");
                    }
                    parse_list(&text)
                })
                .unwrap_or_default();
            Observed {
                pids: Vec::new(),
                proc_cpus: Vec::new(),
                cgroup_cpus,
                devices: container_devices(Path::new(&format!("/proc/{pid}/root/dev"))),
            }
        });
        entry.pids.push(pid);
        entry.proc_cpus.extend(cpus);
        entry.proc_cpus.sort_unstable();
        entry.proc_cpus.dedup();
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Exclusive,
    Shared,
    BestEffort,
    Exempt,
    Gpu,
}

/// A container the soak created and has not removed.
#[derive(Debug, Clone)]
pub struct Ctr {
    pub id: String,
    pub name: String,
    pub kind: Kind,
    pub pod: String,
    pub running: bool,
    /// A CRI update changed its resources, or the runtime created it while nri-align was
    /// down: only its record says what it holds.
    pub by_record: bool,
    /// What it was created from (a restart is the next attempt of it).
    pub spec: ContainerSpec,
}

/// What nri-align records: exclusive CPUs held, GPUs held (by container id).
pub struct Held {
    pub cpus: BTreeMap<u32, String>,
    pub gpus: BTreeMap<String, String>,
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// nri-align's message in a CRI error (the real crictl quotes it in a log line).
pub fn nri_msg(text: &str) -> &str {
    text.find("nri-align: ")
        .map(|at| text[at..].lines().next().unwrap_or(""))
        .map(|m| m.split('"').next().unwrap_or(m).trim())
        .unwrap_or(text)
}

fn overlap(a: &[u32], b: &[u32]) -> Vec<u32> {
    a.iter().copied().filter(|c| b.contains(c)).collect()
}

/// Where shared containers belong.
pub struct Placement {
    /// The host's online CPUs.
    pub online: Vec<u32>,
    /// The CPU `reserved_cpus` names in the configuration in force.
    pub reserved: Option<u32>,
    /// One NUMA node: every shared container is on the whole pool.
    pub single_node: bool,
}

/// The pool: online CPUs, minus the reserved one, minus those held exclusively.
pub fn pool(online: &[u32], reserved: Option<u32>, held: &Held) -> Vec<u32> {
    online
        .iter()
        .copied()
        .filter(|c| Some(*c) != reserved && !held.cpus.contains_key(c))
        .collect()
}

/// What the records hold, leaving out the stopped containers of `reuse_pod` (a new
/// container of a pod takes its stopped containers' CPUs and devices, as after an init
/// container).
pub fn held(state: &BTreeMap<String, Value>, reuse_pod: Option<&str>) -> Held {
    let mut held = Held {
        cpus: BTreeMap::new(),
        gpus: BTreeMap::new(),
    };
    for (id, r) in state {
        let released =
            r["stopped"] == true && Some(r["pod_sandbox_id"].as_str().unwrap_or("")) == reuse_pod;
        if released {
            continue;
        }
        if r["assignment"]["exclusive"] == true {
            for c in recorded_ids(&r["assignment"]["cpus"]) {
                held.cpus.insert(c, id.clone());
            }
        }
        for g in strs(&r["assignment"]["gpus"]) {
            held.gpus.insert(g, id.clone());
        }
    }
    held
}

/// The invariants that hold at every moment, on the containers `ctrs` the soak runs, nri-align's
/// records `state` and what the host shows (`seen`): no CPU in two exclusive containers' cpusets
/// (exclusive as asked, or as recorded), no GPU node in two containers, no CPU or GPU recorded
/// for two holders.
pub fn check_now(
    ctrs: &[Ctr],
    state: &BTreeMap<String, Value>,
    seen: &BTreeMap<String, Observed>,
) -> Result<(), String> {
    // Exclusive by what was asked (never updated) or by the record.
    let mut excl: Vec<(&str, &Observed)> = Vec::new();
    for c in ctrs.iter().filter(|c| c.running) {
        let o = seen
            .get(&c.id)
            .ok_or_else(|| format!("{} ({}) is running but has no process", c.name, c.id))?;
        let recorded = state
            .get(&c.id)
            .map(|r| r["assignment"]["exclusive"] == true);
        if (c.kind == Kind::Exclusive && !c.by_record) || recorded == Some(true) {
            if o.proc_cpus != o.cgroup_cpus {
                return Err(format!(
                    "exclusive {}: affinity {:?}, cgroup {:?}",
                    c.name, o.proc_cpus, o.cgroup_cpus
                ));
            }
            excl.push((&c.name, o));
        }
    }
    for (i, (a, oa)) in excl.iter().enumerate() {
        for (b, ob) in &excl[i + 1..] {
            let both = overlap(&oa.cgroup_cpus, &ob.cgroup_cpus);
            if !both.is_empty() {
                return Err(format!("CPUs {both:?} in exclusive {a} and {b}"));
            }
        }
    }
    let mut gpu_users: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, o) in seen {
        for d in o.devices.iter().filter(|d| d.starts_with("/dev/nvidia")) {
            gpu_users.entry(d).or_default().push(id);
        }
    }
    if let Some((d, users)) = gpu_users.iter().find(|(_, u)| u.len() > 1) {
        return Err(format!("{d} visible in {users:?}"));
    }
    let mut cpu_owner: BTreeMap<u32, &str> = BTreeMap::new();
    let mut gpu_owner: BTreeMap<String, &str> = BTreeMap::new();
    for (id, r) in state {
        if r["assignment"]["exclusive"] == true {
            for c in recorded_ids(&r["assignment"]["cpus"]) {
                if let Some(o) = cpu_owner.insert(c, id) {
                    return Err(format!("CPU {c} recorded for {o} and {id}"));
                }
            }
        }
        for g in strs(&r["assignment"]["gpus"]) {
            if let Some(o) = gpu_owner.insert(g.clone(), id) {
                return Err(format!("GPU {g} recorded for {o} and {id}"));
            }
        }
    }
    Ok(())
}

/// The invariants that hold once an event carried nri-align's pending updates: every running
/// container has a record (exempt ones an exempt record, exclusive ones an exclusive record
/// whose CPUs are its cpuset), none is on a CPU held exclusively, shared ones are on exactly
/// the pool (the reserved CPU for exempt ones, when one is), and no record names a removed
/// container.
pub fn check_settled(
    ctrs: &[Ctr],
    state: &BTreeMap<String, Value>,
    seen: &BTreeMap<String, Observed>,
    at: &Placement,
) -> Result<(), String> {
    let held = held(state, None);
    let pool = pool(&at.online, at.reserved, &held);
    let single_node = at.single_node;
    let held_cpus: Vec<u32> = held.cpus.keys().copied().collect();
    for c in ctrs.iter().filter(|c| c.running) {
        let o = &seen[&c.id];
        let rec = state
            .get(&c.id)
            .ok_or_else(|| format!("running {} ({}) has no record", c.name, c.id))?;
        let exclusive = rec["assignment"]["exclusive"] == true;
        if c.kind == Kind::Exclusive && !c.by_record && !exclusive {
            return Err(format!("{} was admitted exclusive, recorded {rec}", c.name));
        }
        if (c.kind == Kind::Exempt) != (rec["exempt"] == true) {
            return Err(format!("{} ({:?}) recorded {rec}", c.name, c.kind));
        }
        if exclusive {
            let mine = recorded_ids(&rec["assignment"]["cpus"]);
            if o.cgroup_cpus != mine || o.proc_cpus != mine {
                return Err(format!(
                    "exclusive {} recorded on {mine:?}, runs on {:?} (cgroup {:?})",
                    c.name, o.proc_cpus, o.cgroup_cpus
                ));
            }
            continue;
        }
        for cpus in [&o.proc_cpus, &o.cgroup_cpus] {
            let bad = overlap(cpus, &held_cpus);
            if !bad.is_empty() {
                return Err(format!(
                    "{} ({:?}) runs on {cpus:?}, CPUs {bad:?} held exclusively",
                    c.name, c.kind
                ));
            }
        }
        let want = match (c.kind, at.reserved) {
            (Kind::Exempt, Some(r)) => vec![r],
            _ => pool.clone(),
        };
        if single_node && (o.cgroup_cpus != want || o.proc_cpus != want) {
            return Err(format!(
                "{} ({:?}) runs on {:?} (cgroup {:?}), the pool is {want:?}",
                c.name, c.kind, o.proc_cpus, o.cgroup_cpus
            ));
        }
    }
    let known: BTreeSet<&str> = ctrs.iter().map(|c| c.id.as_str()).collect();
    if let Some(id) = state.keys().find(|id| !known.contains(id.as_str())) {
        return Err(format!("record of {id}, which is removed"));
    }
    Ok(())
}
