//! From a [`SchedulerChoice`] to what the search must hold on this host: the nodes it may use,
//! the exact CPUs, the GPUs and NICs, or the refusal that says what the scheduler chose, what
//! is free there, and which container holds what it wanted.

use crate::placement::error::{fmt_bytes, ChoiceRefusal, PlacementError};
use crate::placement::ledger::Ledger;
use crate::placement::numa::Cap;
use crate::placement::policy::CpuPreference;
use crate::placement::scheduler::{CranePolicy, Scheduler, SchedulerChoice};
use crate::topology::{CpuSet, NodeSet, Topology};

/// A choice in this host's indices, checked against what is free.
#[derive(Debug, Clone)]
pub struct Honour {
    /// Who chose.
    pub scheduler: Scheduler,
    /// Node indices the search may use (`None`: any).
    pub allowed: Option<Vec<bool>>,
    /// Node ids the scheduler named (`cpuset.mems` and the shared CPUs come from these).
    pub nodes: NodeSet,
    /// The CPUs an exclusive container takes from (the pod's set, less what its other
    /// containers already hold).
    pub cpus: Option<CpuSet>,
    /// GPUs held (indices).
    pub gpus: Vec<usize>,
    /// GPUs used shared (indices).
    pub shared_gpus: Vec<usize>,
    /// NICs held (indices).
    pub nics: Vec<usize>,
    /// The CPU preference the scheduler's policy implies (Crane's `cpu-policy`).
    pub preference: Option<CpuPreference>,
}

impl Honour {
    /// Whether it constrains the search (a Crane `none` policy alone does not).
    pub fn binds(&self) -> bool {
        self.allowed.is_some()
            || self.cpus.is_some()
            || !self.gpus.is_empty()
            || !self.shared_gpus.is_empty()
            || !self.nics.is_empty()
    }
}

/// What the container itself asks, for the capacity check.
#[derive(Debug, Clone, Copy)]
pub struct Demand<'a> {
    /// `namespace/pod/container`.
    pub who: &'a str,
    /// The pod's UID: CPUs its other containers hold are the pod's own, not a conflict.
    pub pod_uid: &'a str,
    /// Exclusive CPUs (0 for a shared-pool container).
    pub cpus: u32,
    /// Memory accounted on the nodes.
    pub memory: u64,
}

/// The CPU preference Crane's policy implies; `None` leaves the node's rule.
pub fn preference(choice: &SchedulerChoice) -> Option<CpuPreference> {
    match choice.cpu_policy? {
        CranePolicy::None | CranePolicy::Numa => Some(CpuPreference::Shared),
        CranePolicy::Exclusive | CranePolicy::Immovable => None,
    }
}

/// Checks `choice` against the host and the ledger for `demand`: the constraints, or the
/// refusal saying what is wrong and what is free there.
pub fn check(
    ledger: &Ledger,
    caps: &[Cap],
    choice: &SchedulerChoice,
    demand: &Demand<'_>,
) -> Result<Honour, PlacementError> {
    let topo = ledger.topo();
    // Each part is cut so that the whole first line stays within the 1024 bytes the API server
    // keeps of an event's message (`NoteLengthLimit`, kubernetes pkg/apis/core/validation/
    // events.go), where the kubelet's CreateContainerError event carries it.
    let refuse = |problem: String, nodes: &NodeSet, held: String| {
        PlacementError::SchedulerChoice(Box::new(ChoiceRefusal {
            scheduler: choice.scheduler.label().into(),
            container: cut(demand.who, 150),
            chose: cut(&choice.describe(), 150),
            problem: cut(&problem, 150),
            free: cut(&free_on(caps, topo, nodes), 250),
            held: cut(&held, 150),
        }))
    };
    // Crane's `none`: the default (shared) CPUs anywhere; the zones bind nothing.
    let binds_nodes = choice.cpu_policy != Some(CranePolicy::None);
    let mut nodes = if binds_nodes {
        choice.nodes.clone()
    } else {
        NodeSet::new()
    };
    if let Some(missing) = nodes.iter().find(|id| topo.node_index(*id).is_none()) {
        let problem = format!(
            "this host has no NUMA node {missing} (it has {})",
            all_nodes(topo)
        );
        return Err(refuse(problem, &NodeSet::new(), String::new()));
    }
    let cpus = match &choice.cpus {
        Some(set) if demand.cpus > 0 => Some(
            exact_cpus(ledger, set, demand)
                .map_err(|(p, held)| refuse(p, &nodes_of(topo, set), held))?,
        ),
        _ => None,
    };
    if let Some(set) = &choice.cpus {
        // The cpuset's nodes are the chosen ones too (cpuset.mems follows the CPUs).
        nodes.extend_from(&nodes_of(topo, set));
    }
    let gpus =
        gpu_indices(topo, &choice.gpu_minors).map_err(|p| refuse(p, &nodes, String::new()))?;
    if let Some((g, holder)) = gpus
        .iter()
        .find_map(|g| ledger.gpu_holder(*g).map(|h| (*g, h)))
    {
        let problem = format!(
            "GPU minor {} is held",
            topo.gpus[g].minor.unwrap_or_default()
        );
        return Err(refuse(problem, &nodes, held_by(ledger, holder)));
    }
    let shared_gpus = gpu_indices(topo, &choice.shared_gpu_minors)
        .map_err(|p| refuse(p, &nodes, String::new()))?;
    let nics = nic_indices(topo, choice).map_err(|p| refuse(p, &nodes, String::new()))?;
    if !nodes.is_empty() {
        // With the exact CPUs checked above, the nodes only have to hold the memory.
        let rest = Demand {
            cpus: if cpus.is_some() { 0 } else { demand.cpus },
            ..*demand
        };
        zone_fits(ledger, caps, &nodes, &rest).map_err(|(p, held)| refuse(p, &nodes, held))?;
    }
    let allowed = (!nodes.is_empty()).then(|| {
        // The devices' own nodes too: the scheduler may pair a GPU with a NIC a node away.
        let mut with = nodes.clone();
        for g in gpus.iter().chain(&shared_gpus) {
            with.extend_from(&ledger.ids(&ledger.gpu_node(*g).into_iter().collect::<Vec<_>>()));
        }
        for n in &nics {
            with.extend_from(&ledger.ids(&ledger.nic_node(*n).into_iter().collect::<Vec<_>>()));
        }
        topo.numa_nodes
            .iter()
            .map(|n| with.contains(n.id))
            .collect()
    });
    Ok(Honour {
        scheduler: choice.scheduler,
        allowed,
        nodes,
        cpus,
        gpus,
        shared_gpus,
        nics,
        preference: preference(choice),
    })
}

/// The CPUs of `set` an exclusive container of the pod may take: each online and not
/// reserved, none held by another pod's container, and enough left after the pod's own.
fn exact_cpus(
    ledger: &Ledger,
    set: &CpuSet,
    demand: &Demand<'_>,
) -> Result<CpuSet, (String, String)> {
    let offline = set.difference(ledger.online());
    if !offline.is_empty() {
        return Err((format!("cpus {offline} are not online here"), String::new()));
    }
    let reserved = set.intersection(ledger.reserved());
    if !reserved.is_empty() {
        return Err((
            format!("cpus {reserved} are reserved on this node (reserved_cpus)"),
            String::new(),
        ));
    }
    let mut mine = CpuSet::new();
    let mut theirs = CpuSet::new();
    let mut holders: Vec<&str> = Vec::new();
    for cpu in set.iter() {
        let Some(h) = ledger.cpu_holder(cpu) else {
            continue;
        };
        if ledger.get(h).is_some_and(|a| a.pod_uid == demand.pod_uid) {
            mine.insert(cpu);
        } else {
            theirs.insert(cpu);
            if !holders.contains(&h) {
                holders.push(h);
            }
        }
    }
    if let Some(first) = holders.first() {
        let more = match holders.len() {
            1 => String::new(),
            n => format!(" and {} other container(s)", n - 1),
        };
        return Err((
            if theirs.len() == 1 {
                format!("cpu {theirs} is held")
            } else {
                format!(
                    "{} of its cpus are held ({})",
                    theirs.len(),
                    cut(&theirs.to_string(), 80)
                )
            },
            format!("{}{more}", held_by(ledger, first)),
        ));
    }
    let left = set.difference(&mine);
    if (left.len() as u64) < u64::from(demand.cpus) {
        let problem = if mine.is_empty() {
            format!("the container asks for {} exclusive CPUs", demand.cpus)
        } else {
            format!(
                "the pod's other containers hold cpus {mine}, leaving {} of the {} asked",
                left.len(),
                demand.cpus
            )
        };
        return Err((problem, String::new()));
    }
    Ok(left)
}

/// Whether the named nodes hold the container's exclusive CPUs and memory.
fn zone_fits(
    ledger: &Ledger,
    caps: &[Cap],
    nodes: &NodeSet,
    demand: &Demand<'_>,
) -> Result<(), (String, String)> {
    let on: Vec<&Cap> = caps.iter().filter(|c| nodes.contains(c.id)).collect();
    let cpus: u64 = on.iter().map(|c| u64::from(c.cpu)).sum();
    let mem: u64 = on.iter().map(|c| c.mem).sum();
    let short = if cpus < u64::from(demand.cpus) {
        format!(
            "{} exclusive CPUs are asked and {cpus} are free there",
            demand.cpus
        )
    } else if mem < demand.memory {
        format!(
            "{} of memory is asked and {} is free there",
            fmt_bytes(demand.memory),
            fmt_bytes(mem)
        )
    } else {
        return Ok(());
    };
    // Who holds the most CPUs there: the first container to look at.
    let topo = ledger.topo();
    let node_cpus: CpuSet = topo
        .numa_nodes
        .iter()
        .filter(|n| nodes.contains(n.id))
        .fold(CpuSet::new(), |acc, n| acc.union(&n.cpus));
    let holder = ledger
        .assignments()
        .filter(|a| a.exclusive && a.pod_uid != demand.pod_uid)
        .max_by_key(|a| a.cpus.intersection_len(&node_cpus))
        .filter(|a| a.cpus.intersection_len(&node_cpus) > 0)
        .map(|a| held_by(ledger, &a.container_id))
        .unwrap_or_default();
    Err((short, holder))
}

/// At most `max` bytes of `s`, cut on a character boundary and marked `…` where cut.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// `; held by ns/pod/c (container 1234abcd…)`.
fn held_by(ledger: &Ledger, id: &str) -> String {
    let short: String = id.chars().take(12).collect();
    match ledger.get(id) {
        Some(a) => format!(
            "; held by {}/{} (container {short}, cpus {})",
            crate::untrusted::excerpt(&a.pod_name),
            crate::untrusted::excerpt(&a.container_name),
            a.cpus
        ),
        None => format!("; held by container {short}"),
    }
}

/// What is free on `nodes` (every node when empty): `node 0: 6 cpus 12Gi, 1 GPU`.
fn free_on(caps: &[Cap], topo: &Topology, nodes: &NodeSet) -> String {
    let parts: Vec<String> = caps
        .iter()
        .filter(|c| nodes.is_empty() || nodes.contains(c.id))
        .filter(|c| topo.node_index(c.id).is_some())
        .map(|c| {
            let mut s = format!(
                "node {}: cpus {} ({}), {}",
                c.id,
                c.avail,
                c.cpu,
                fmt_bytes(c.mem)
            );
            if c.gpus > 0 {
                s.push_str(&format!(", {} GPU(s)", c.gpus));
            }
            s
        })
        .collect();
    if parts.is_empty() {
        "nothing".into()
    } else {
        parts.join("; ")
    }
}

fn all_nodes(topo: &Topology) -> NodeSet {
    topo.numa_nodes.iter().map(|n| n.id).collect()
}

/// The NUMA nodes of `cpus`.
fn nodes_of(topo: &Topology, cpus: &CpuSet) -> NodeSet {
    topo.numa_nodes
        .iter()
        .filter(|n| !n.cpus.is_disjoint(cpus))
        .map(|n| n.id)
        .collect()
}

/// GPU indices of `minors`; a minor this host has no GPU for is the problem.
fn gpu_indices(topo: &Topology, minors: &[u32]) -> Result<Vec<usize>, String> {
    minors
        .iter()
        .map(|m| {
            topo.gpus
                .iter()
                .position(|g| g.minor == Some(*m))
                .ok_or_else(|| format!("this host has no GPU of minor {m}"))
        })
        .collect()
}

/// NIC indices of the RDMA devices and VFs named: every PF by its bus id; a VF where the host
/// shows it as an interface of its own (else its PF, already held, stands for it).
fn nic_indices(topo: &Topology, choice: &SchedulerChoice) -> Result<Vec<usize>, String> {
    let by_bus = |bus: &str| {
        topo.nics.iter().position(|n| {
            n.pci_bus_id
                .as_deref()
                .is_some_and(|b| b.eq_ignore_ascii_case(bus))
        })
    };
    let mut out = Vec::new();
    for bus in &choice.rdma {
        let i = by_bus(bus).ok_or_else(|| format!("this host has no RDMA NIC at {bus}"))?;
        if !out.contains(&i) {
            out.push(i);
        }
    }
    for i in choice.vfs.iter().filter_map(|b| by_bus(b)) {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    Ok(out)
}
