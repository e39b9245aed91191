//! Restarts without double allocation: compare the persisted decisions with the containers the
//! runtime reports (Synchronize) and decide what to keep, release and rebuild. A running
//! container is never re-placed: one the state does not know is recorded as it runs.

use std::collections::HashMap;

use crate::placement::{annotations, Assignment, PlacementConfig, Policy};
use crate::topology::{CpuSet, NodeSet, Topology};

use crate::enforce::adjust::DECISION_ENV;
use crate::enforce::container::{ContainerView, PodView, RuntimeIds};
use crate::enforce::inputs::{
    build, build_request, placed_exclusive_on, RequestError, SpecDevices,
};
use crate::enforce::state::{Record, ResourceSummary, StateDoc, RECORDED_AS_RUNNING};

/// What to do after a restart.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reconciliation {
    /// Recorded and still alive: restore as recorded.
    pub keep: Vec<Record>,
    /// Recorded but gone (no longer listed): release. A listed stopped container keeps its
    /// record (marked stopped) until it is removed, as the kubelet keeps its CPUs.
    pub release: Vec<String>,
    /// Alive but unknown to the state: restore from what the container has now.
    pub rebuild: Vec<Record>,
}

/// Reconciles `doc` with the live containers (`pods` for their namespaces); containers rebuilt
/// are judged against the policy `placement` and their annotations give them.
pub fn reconcile(
    doc: &StateDoc,
    pods: &[PodView],
    live: &[ContainerView],
    topo: &Topology,
    placement: &PlacementConfig,
) -> Reconciliation {
    let mut out = Reconciliation::default();
    // Indexed once: a restart with thousands of containers must stay linear.
    let pods_by_id: HashMap<&str, &PodView> = pods.iter().map(|p| (p.id.as_str(), p)).collect();
    let by_id: HashMap<&str, &ContainerView> = live.iter().map(|c| (c.id.as_str(), c)).collect();
    let no_pod = PodView::default();
    let pod_of = |c: &ContainerView| -> &PodView {
        pods_by_id
            .get(c.pod_sandbox_id.as_str())
            .copied()
            .unwrap_or(&no_pod)
    };
    for (id, rec) in &doc.containers {
        if rec.pod_budget.is_some() {
            // A pod's budget is no container: it stays while the runtime lists its pod.
            match pods_by_id.contains_key(rec.pod_sandbox_id.as_str()) {
                true => out.keep.push(rec.clone()),
                false => out.release.push(id.clone()),
            }
            continue;
        }
        let Some(c) = by_id.get(id.as_str()).copied() else {
            out.release.push(id.clone());
            continue;
        };
        if !c.state.is_live() {
            // Stopped, not removed: it keeps what it holds until RemoveContainer, as the
            // kubelet keeps a container's CPUs.
            out.keep.push(Record {
                stopped: true,
                ..rec.clone()
            });
            continue;
        }
        if lost_its_devices(topo, pod_of(c), c, rec) {
            // Its record names devices it does not have: account for what it really holds.
            out.release.push(id.clone());
            out.rebuild
                .push(record_as_running(topo, placement, pod_of(c), c));
        } else {
            out.keep.push(rec.clone());
        }
    }
    for c in live.iter().filter(|c| c.state.is_live()) {
        if doc.containers.contains_key(&c.id) {
            continue;
        }
        out.rebuild
            .push(record_as_running(topo, placement, pod_of(c), c));
    }
    out
}

/// Whether a recorded container runs without its adjustment (nri-align died after deciding
/// and before the runtime got the answer, and the runtime went on without the plugin) *and*
/// the GPUs or NICs it really has differ from the recorded ones (a remap that never reached
/// it). Its cpuset can still be re-applied, its devices and environment cannot: the ledger
/// must count the devices it really has, or they would be handed out a second time.
fn lost_its_devices(topo: &Topology, pod: &PodView, c: &ContainerView, rec: &Record) -> bool {
    let decision = format!("{DECISION_ENV}=");
    if c.env.iter().any(|e| e.starts_with(&decision)) {
        return false;
    }
    let Ok(r) = build_request(topo, pod, c) else {
        return false;
    };
    let same = |a: &[String], b: &[String]| {
        let mut a = a.to_vec();
        let mut b = b.to_vec();
        a.sort();
        b.sort();
        a == b
    };
    // A claim's sharer has the device node too, and records the device as shared.
    let gpus: Vec<String> = rec
        .assignment
        .gpus
        .iter()
        .chain(
            rec.assignment
                .shared_gpus
                .iter()
                .filter(|g| r.allocated_gpus.contains(g)),
        )
        .cloned()
        .collect();
    let nics: Vec<String> = rec
        .assignment
        .nics
        .iter()
        .chain(
            rec.shared_devices
                .iter()
                .filter(|n| topo.nics.iter().any(|x| x.name == **n)),
        )
        .cloned()
        .collect();
    !same(&r.allocated_gpus, &gpus) || !same(&r.allocated_nics, &nics)
}

/// Records a running container with what it has now: its cpuset (all online CPUs when it has
/// none), its mems, and the GPUs and NICs of its device nodes. It counts as exclusive only when
/// it looks like a Guaranteed integer-CPU container whose cpuset has exactly that many CPUs;
/// anything else is treated as a shared-pool member and follows the pool from now on. Its
/// policy is the one its annotations (or the node default in `placement`) ask for, and it
/// counts as aligned when what it has meets that policy (`aligned_as_running`), so that
/// `status` after a restart says what is true rather than "none". The record is flagged
/// [`Record::found_running`]; its reason begins with [`RECORDED_AS_RUNNING`] for people and
/// for older versions reading the log.
pub fn record_as_running(
    topo: &Topology,
    placement: &PlacementConfig,
    pod: &PodView,
    c: &ContainerView,
) -> Record {
    let cpus = running_cpus(topo, c);
    let numa_nodes: NodeSet = topo
        .cpus
        .iter()
        .filter(|cpu| cpus.contains(cpu.id))
        .map(|cpu| cpu.numa_node)
        .collect();
    let node_limit = topo.numa_nodes.iter().map(|n| n.id + 1).max().unwrap_or(1);
    let mems = runtime_idset(&c.resources.cpuset_mems, node_limit, "cpuset.mems", &c.id)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| numa_nodes.clone());
    let Asked {
        gpus,
        nics,
        shared_gpus,
        resources,
        policy,
        exclusive,
        note,
        spec,
    } = asked_of_running(topo, placement, pod, c, &cpus);
    let aligned = aligned_as_running(
        topo,
        policy,
        Held {
            exclusive,
            numa_nodes: &numa_nodes,
            mems: &mems,
            gpus: &gpus,
            shared_gpus: &shared_gpus,
            nics: &nics,
        },
    );
    let hugepages = pages_on_mems(
        topo,
        &mems,
        &crate::enforce::inputs::hugepage_needs(&c.resources.hugepage_limits),
    );
    Record {
        assignment: Assignment {
            exclusive,
            mems,
            numa_nodes,
            hugepages,
            memory_bytes: c
                .resources
                .memory_limit
                .and_then(|m| u64::try_from(m).ok())
                .unwrap_or(0),
            gpus,
            nics,
            shared_gpus,
            chosen_gpus: Vec::new(),
            policy,
            aligned,
            reason: format!("{RECORDED_AS_RUNNING}{note}"),
            ..running_identity(pod, c, &cpus)
        },
        pod_sandbox_id: c.pod_sandbox_id.clone(),
        namespace: pod.namespace.clone(),
        cgroups_path: c.cgroups_path.clone(),
        applied_cpus: cpus,
        devices: spec.node_paths(),
        resources,
        found_running: true,
        // Which claim devices it names, so that a sibling of its pod naming the same one
        // shares it rather than holds it a second time (`Engine::share_running_claims`).
        cdi_names: spec.cdi_names,
        ..Record::default()
    }
}

/// The huge pages a running container's limits ask for, laid over its memory nodes in order,
/// each node up to the pages it has: where the kernel took them cannot be read back, but
/// they come from those nodes, and holding them there keeps a restarted daemon from counting
/// them free. What the nodes do not have is left out (the restore would refuse more).
fn pages_on_mems(
    topo: &Topology,
    mems: &NodeSet,
    needs: &[crate::placement::HugePageNeed],
) -> Vec<crate::placement::HugePagesHeld> {
    let mut held = Vec::new();
    for need in needs {
        let mut left = need.pages;
        for node in topo.numa_nodes.iter().filter(|n| mems.contains(n.id)) {
            let total = node
                .hugepages
                .iter()
                .find(|h| h.size_kb == need.size_kb)
                .map_or(0, |h| h.total);
            let take = left.min(total);
            if take > 0 {
                held.push(crate::placement::HugePagesHeld {
                    node: node.id,
                    size_kb: need.size_kb,
                    pages: take,
                });
                left -= take;
            }
        }
    }
    held
}

/// What a running container's request says, as far as this host can read it.
struct Asked {
    gpus: Vec<String>,
    nics: Vec<String>,
    shared_gpus: Vec<String>,
    resources: ResourceSummary,
    policy: Policy,
    /// Whether it looks like a Guaranteed integer-CPU container holding exactly its CPUs
    /// (never when its cpuset is every online CPU).
    exclusive: bool,
    /// What could not be read, for the record's reason (empty when all could).
    note: String,
    /// What its spec says of its devices (read even when its GPUs are unknown here).
    spec: SpecDevices,
}

/// Reads the request of running container `c` (whose cpuset is `cpus`) for
/// [`record_as_running`]: a request that names GPUs this host does not have still records
/// the container, without devices.
fn asked_of_running(
    topo: &Topology,
    placement: &PlacementConfig,
    pod: &PodView,
    c: &ContainerView,
    cpus: &CpuSet,
) -> Asked {
    let (r, spec) = match build(topo, pod, c, false) {
        Ok(b) => (b.request, b.devices.spec),
        Err(RequestError::UnknownGpu { .. }) => {
            return Asked {
                gpus: Vec::new(),
                nics: Vec::new(),
                shared_gpus: Vec::new(),
                resources: ResourceSummary::default(),
                policy: placement.policy,
                exclusive: false,
                note: " (its GPU references are unknown to this host)".to_string(),
                spec: SpecDevices::read(c),
            }
        }
    };
    let (policy, note) =
        match annotations::effective(&r.pod.annotations, &r.container_name, placement) {
            Ok(eff) => (eff.policy, String::new()),
            Err(e) => (
                placement.policy,
                format!(" (node default policy shown: {e})"),
            ),
        };
    // nri-align lifts the CFS quota of the exclusive containers it places (`quota.rs`), so
    // the kubelet's CPU limit no longer shows in what runs; its own decision, written into
    // the container at creation, says the limit was the request.
    let limit = r
        .cpu_limit_milli
        .or_else(|| (placed_exclusive_on(c).as_ref() == Some(cpus)).then_some(r.cpu_request_milli));
    let integer_guaranteed = limit.is_some_and(|l| {
        l > 0 && l % 1000 == 0 && l == r.cpu_request_milli && cpus.len() as u64 == l / 1000
    });
    Asked {
        resources: ResourceSummary::of(&r),
        shared_gpus: r.shared_gpus.clone(),
        policy,
        exclusive: integer_guaranteed && *cpus != topo.online_cpus(),
        note,
        gpus: r.allocated_gpus,
        nics: r.allocated_nics,
        spec,
    }
}

/// What a running container holds, as [`record_as_running`] found it.
struct Held<'a> {
    exclusive: bool,
    numa_nodes: &'a NodeSet,
    mems: &'a NodeSet,
    gpus: &'a [String],
    /// GPUs used but not held alone (MIG parents, replicas): aligned to like the others.
    shared_gpus: &'a [String],
    nics: &'a [String],
}

/// Whether what a running container holds meets `policy`, by the rules nri-align's own
/// decisions follow: never under `none`; a shared container without devices has nothing to
/// align; otherwise its GPUs and NICs sit on its CPUs' NUMA nodes, its memory nodes serve
/// those nodes, and under `single-numa-node` that is one node. (Its own decision would also
/// weigh the narrowest width the node could have offered then; that moment is gone.)
fn aligned_as_running(topo: &Topology, policy: Policy, held: Held<'_>) -> bool {
    if policy == Policy::None {
        return false;
    }
    if !held.exclusive
        && held.gpus.is_empty()
        && held.shared_gpus.is_empty()
        && held.nics.is_empty()
    {
        return true;
    }
    // A device whose node is unknown (or not on this host's list) cannot be held against it.
    let on_cpu_nodes = |node: Option<u32>| node.map_or(true, |n| held.numa_nodes.contains(n));
    let gpus_inside = held.gpus.iter().chain(held.shared_gpus).all(|bus| {
        topo.gpus
            .iter()
            .find(|g| &g.pci_bus_id == bus)
            .map_or(true, |g| on_cpu_nodes(g.numa_node))
    });
    let nics_inside = held.nics.iter().all(|name| {
        topo.nics
            .iter()
            .find(|n| &n.name == name)
            .map_or(true, |n| on_cpu_nodes(n.numa_node))
    });
    let memory_nodes = topo.memory_nodes_for(held.numa_nodes);
    let mems_inside = held.mems.iter().all(|m| memory_nodes.contains(m));
    gpus_inside
        && nics_inside
        && mems_inside
        && (policy != Policy::SingleNumaNode || held.numa_nodes.len() == 1)
}

/// Records a running container of an exempt namespace that nri-align has no record of
/// (created before it ran, or while it was away) as exempt: it holds nothing, and from now on
/// it follows the shared pool (or the reserved CPUs) like the exempt containers nri-align
/// created, so it never stays on CPUs held exclusively.
pub fn exempt_record_as_running(topo: &Topology, pod: &PodView, c: &ContainerView) -> Record {
    let cpus = running_cpus(topo, c);
    Record {
        assignment: Assignment {
            policy: Policy::None,
            reason: "exempt namespace: recorded as running, follows the shared pool".into(),
            ..running_identity(pod, c, &cpus)
        },
        pod_sandbox_id: c.pod_sandbox_id.clone(),
        namespace: pod.namespace.clone(),
        cgroups_path: c.cgroups_path.clone(),
        applied_cpus: cpus,
        exempt: true,
        found_running: true,
        ..Record::default()
    }
}

/// The CPUs a running container has: its spec's cpuset, every online CPU when it has none (or
/// one this host cannot have).
fn running_cpus(topo: &Topology, c: &ContainerView) -> CpuSet {
    runtime_cpus(topo, &c.resources.cpuset_cpus, &c.id)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| topo.online_cpus())
}

/// One past the highest CPU id this host has, online or not: no cpuset the runtime reports
/// for it can name more.
pub(super) fn cpu_id_limit(topo: &Topology) -> u32 {
    let online = topo.cpus.iter().map(|c| c.id).max();
    let offline = topo.offline_cpus.runs().last().map(|(_, hi)| hi);
    online.max(offline).map_or(1, |id| id + 1)
}

/// A cpuset the runtime reports for container `id` (Synchronize, PostStart, the CRI listing),
/// read when its view was made, held to what this host can have; `None`, with one log line,
/// when it is not a list of this host's CPUs.
pub(super) fn runtime_cpus(topo: &Topology, reported: &RuntimeIds, id: &str) -> Option<CpuSet> {
    runtime_idset(reported, cpu_id_limit(topo), "cpuset.cpus", id)
}

/// [`runtime_cpus`] for a list in the env (a DRA driver's cpuset), read here: the view keeps
/// env entries as text. The bound on its length is checked before any parsing, so a string
/// of any size costs at most a few microseconds.
pub(super) fn env_cpus(topo: &Topology, text: &str, id: &str) -> Option<CpuSet> {
    runtime_idset(
        &RuntimeIds::new(text),
        cpu_id_limit(topo),
        "cpuset.cpus",
        id,
    )
}

fn runtime_idset(reported: &RuntimeIds, limit: u32, what: &str, id: &str) -> Option<CpuSet> {
    match reported.below(limit) {
        Ok(set) => Some(set.clone()),
        Err(e) => {
            let bytes = reported.text().len();
            tracing::warn!(container = %id, bytes, "the runtime reports a {what} this host cannot have, ignored: {e}");
            None
        }
    }
}

/// Who a running container is and the CPUs it has, the rest of its assignment empty.
fn running_identity(pod: &PodView, c: &ContainerView, cpus: &CpuSet) -> Assignment {
    Assignment {
        container_id: c.id.clone(),
        container_name: c.name.clone(),
        pod_uid: pod.uid.clone(),
        pod_name: format!("{}/{}", pod.namespace, pod.name),
        cpus: cpus.clone(),
        ..Assignment::default()
    }
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
