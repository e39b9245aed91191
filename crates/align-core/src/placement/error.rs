//! Why a placement could not be made, with messages a user can act on.

use crate::topology::NodeSet;

use super::hugepages::fmt_pages;
use super::policy::Policy;

/// What a container asked for, in the units the messages use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ask {
    /// Exclusive CPUs (0 for shared-pool containers).
    pub cpus: u32,
    /// Memory limit in bytes (0 when unlimited).
    pub memory_bytes: u64,
    /// GPUs.
    pub gpus: u32,
    /// NICs.
    pub nics: u32,
    /// Huge pages per size.
    pub hugepages: Vec<super::hugepages::HugePageNeed>,
}

/// What one NUMA node had free when a request was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeOffer {
    /// Node id.
    pub node: u32,
    /// Free exclusive-able CPUs.
    pub cpus: u32,
    /// Free memory in bytes.
    pub memory_bytes: u64,
    /// Free GPUs.
    pub gpus: u32,
    /// NICs no container uses (the `free:` state's count).
    pub nics: u32,
    /// NICs other containers use, which this one may share (NICs are never held alone).
    pub nics_in_use: u32,
    /// Free huge pages of the sizes asked, as (size in KiB, pages).
    pub hugepages: Vec<(u64, u64)>,
}

/// Why the scheduler's choice cannot be had. The message's first line stands alone in a
/// kubelet event: who chose what, what is wrong, what is free there, who holds it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{scheduler} chose {chose} for {container}, but {problem}; free there: {free}{held}. \
     Reschedule the pod, or set scheduler_choice: preferred to place it elsewhere on this node"
)]
pub struct ChoiceRefusal {
    /// `koordinator`, `crane` or `memory-plugin`.
    pub scheduler: String,
    /// `namespace/pod/container`.
    pub container: String,
    /// What the scheduler chose (`cpus 0-3, NUMA node 0`).
    pub chose: String,
    /// Why it cannot be had (`cpus 2-3 are held`, `4 exclusive CPUs are asked and 2 are free`).
    pub problem: String,
    /// What is free on the chosen nodes.
    pub free: String,
    /// `; held by ns/pod/c (…)`, or nothing.
    pub held: String,
}

/// Why an in-place resize of a container's exclusive CPUs was refused: the container stays as
/// it was. Shaped as a creation's refusal: what was asked, what is free next to what it
/// holds, what would fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot resize {container} in place from {had} to {asked} exclusive CPU(s) under policy \
     {policy}: {problem}; it holds cpus {held} on NUMA {nodes}; free next to them: {free_near}; \
     {fits}. The container keeps its CPUs"
)]
pub struct ResizeRefusal {
    /// `namespace/pod/container`.
    pub container: String,
    /// The effective policy.
    pub policy: Policy,
    /// Exclusive CPUs it holds.
    pub had: u32,
    /// Exclusive CPUs asked.
    pub asked: u32,
    /// What does not fit (`2 more CPUs do not fit on its NUMA node 0`).
    pub problem: String,
    /// The CPUs it holds.
    pub held: String,
    /// Its NUMA nodes (`node 0`, `nodes 0-1`).
    pub nodes: String,
    /// Free CPUs of the nodes it may grow on, nearest first (`node 0: 2 (3,7)`).
    pub free_near: String,
    /// What would fit (`ask for at most 4`).
    pub fits: String,
}

/// Placement failures. Each message names what was asked, what was there, and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// An `*.nri-align.io/` annotation that is unknown or has a bad value.
    #[error("invalid annotation {key}={value}: {reason}")]
    InvalidAnnotation {
        /// The annotation key (cut to its start when long).
        key: String,
        /// Its value, quoted (cut to its start when long).
        value: String,
        /// What is wrong and which values are accepted.
        reason: String,
    },
    /// `cpus: exclusive` (or `isolated`) on a container the scheduler did not account as
    /// Guaranteed-shaped: granting it would take CPUs the scheduler promised to others.
    #[error(
        "{container}: {annotation} asks for {cpus} exclusive CPU(s), but the container is not \
         Guaranteed-shaped (cpu request {request_milli}m, limit {limit}): an annotation never \
         widens what the scheduler accounted. Set the CPU request equal to the limit in whole \
         CPUs (and a memory limit), or have the node administrator add namespace \
         {namespace:?} to exclusive_annotation_namespaces"
    )]
    NotGuaranteed {
        /// `namespace/pod/container`.
        container: String,
        /// The annotation that asked, `key=value` (one field, keeping the error small).
        annotation: String,
        /// Exclusive CPUs it would have got.
        cpus: u32,
        /// CPU request in millicores.
        request_milli: u64,
        /// CPU limit as text (`none` or `1500m`).
        limit: String,
        /// The pod's namespace.
        namespace: String,
    },
    /// `cpus: isolated` from a namespace not in `isolated_namespaces`: isolated CPUs are set
    /// aside for the workloads the node administrator names, not for any Guaranteed pod.
    #[error(
        "{container}: {annotation} asks for isolated CPUs, but namespace {namespace:?} is not \
         in isolated_namespaces {allowed:?}: have the node administrator add it to the \
         isolated_namespaces key of the nri-align configuration, or ask for cpus: exclusive"
    )]
    IsolatedNotAllowed {
        /// `namespace/pod/container`.
        container: String,
        /// The annotation that asked, `key=value`.
        annotation: String,
        /// The pod's namespace.
        namespace: String,
        /// The namespaces allowed now (`isolated_namespaces`).
        allowed: Vec<String>,
    },
    /// The request cannot be placed on one node set under the policy.
    #[error(
        "cannot align {container} under policy {policy}: {what} {} fit {shape}; asked {}; \
         best candidate node {}; {suggestion}",
        fit_verb(what),
        fmt_ask(asked),
        fmt_offer(best)
    )]
    Unalignable {
        /// `namespace/pod/container`.
        container: String,
        /// The effective policy.
        policy: Policy,
        /// Resources that could not be aligned (`cpu`, `memory`, `hugepages-2Mi`, `gpu`,
        /// `nic`).
        what: String,
        /// "one NUMA node", "2 NUMA nodes", "the pod's NUMA nodes 0-1", followed by the
        /// devices the search could not move, with their nodes and who gave them (`: the
        /// device plugin gave GPU … on node 1 and NIC … on node 0, and gpu_mode: keep does not
        /// move them`). One field: the error stays small enough to return by value.
        shape: String,
        /// What was asked.
        asked: Box<Ask>,
        /// The best candidate node and what it had free.
        best: Box<NodeOffer>,
        /// What would fit ("reduce cpu to 6 or use policy best-effort").
        suggestion: String,
    },
    /// The host has not enough free resources at all, whatever the alignment.
    #[error("not enough free {resource} for {container}: asked {asked}, {free} on the host")]
    Insufficient {
        /// `namespace/pod/container`.
        container: String,
        /// `cpu`, `memory`, `huge pages`, `gpu`, `nic`, `whole-core cpu`.
        resource: String,
        /// Amount asked (human units).
        asked: String,
        /// Amount free (human units, `32 free`; NICs, which containers share, as
        /// `2 in all (1 unused)`).
        free: String,
    },
    /// Exclusive CPUs would take the last CPU of the shared pool.
    #[error(
        "not enough free cpu for {container}: asked {asked} exclusive, and the shared pool \
         ({pool}) must keep at least one CPU for containers without exclusive CPUs; ask for \
         fewer CPUs or free some"
    )]
    SharedPoolExhausted {
        /// `namespace/pod/container`.
        container: String,
        /// Exclusive CPUs asked.
        asked: u32,
        /// The shared pool before this request.
        pool: String,
    },
    /// No CPU is left for a container without exclusive CPUs: every online CPU is held
    /// exclusively, reserved or isolated (a hot-plug took the pool's last CPUs). Without a
    /// cpuset it would run on every CPU, the exclusive ones included.
    #[error(
        "no shared cpu for {container}: the online CPUs ({online}) are all held exclusively, \
         reserved or isolated, and a container without exclusive CPUs must not run on them; \
         refused until a CPU comes back online or an exclusive container ends (the kubelet \
         retries the creation)"
    )]
    NoSharedCpu {
        /// `namespace/pod/container`.
        container: String,
        /// The online CPUs now.
        online: String,
    },
    /// A resource is already held by another live container.
    #[error("{resource} {id} is already held by container {holder}")]
    Conflict {
        /// `exclusive cpu`, `gpu`, `container`.
        resource: String,
        /// The CPU id, bus id or container id.
        id: String,
        /// The container holding it.
        holder: String,
    },
    /// A device the container carries is not in the topology.
    #[error("{kind} {id} is not in the host topology (known: {known})")]
    UnknownDevice {
        /// `gpu` or `nic`.
        kind: String,
        /// The bus id or name given.
        id: String,
        /// The known ones, comma-separated.
        known: String,
    },
    /// `full-pcpus-only` and a CPU count that is not a multiple of the threads per core.
    #[error(
        "{container} asks for {cpus} exclusive CPUs, but full-pcpus-only needs a multiple of \
         {threads} (threads per core); ask for {suggest} CPUs"
    )]
    SmtAlignment {
        /// `namespace/pod/container`.
        container: String,
        /// CPUs asked.
        cpus: u32,
        /// Threads per core.
        threads: u32,
        /// The next multiple.
        suggest: u32,
    },
    /// The scheduler's choice (Koordinator's CPUs and devices, Crane's zones) cannot be honoured
    /// on this node now, and `scheduler_choice` is `required`.
    #[error("{0}")]
    SchedulerChoice(Box<ChoiceRefusal>),
    /// An in-place resize that does not fit next to what the container holds.
    #[error("{0}")]
    Resize(Box<ResizeRefusal>),
    /// A persisted assignment that does not fit the topology.
    #[error("cannot restore {container}: {reason}")]
    Restore {
        /// Container id.
        container: String,
        /// Why.
        reason: String,
    },
}

impl PlacementError {
    /// Whether another live container's hold caused the refusal (a device or CPU it holds),
    /// rather than what this container asks or how the node is set up.
    pub fn blames_another_container(&self) -> bool {
        match self {
            Self::Conflict { .. } => true,
            Self::SchedulerChoice(r) => !r.held.is_empty(),
            _ => false,
        }
    }

    /// The short label metrics count this refusal under (`nri_align_rejections_total{reason}`).
    /// An exhaustive match, so a new variant cannot ship without a label.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidAnnotation { .. } => "invalid-annotation",
            Self::NotGuaranteed { .. } => "not-guaranteed",
            Self::IsolatedNotAllowed { .. } => "isolated-not-allowed",
            Self::Unalignable { .. } => "unalignable",
            Self::Insufficient { .. } => "insufficient",
            Self::SharedPoolExhausted { .. } => "shared-pool-exhausted",
            Self::NoSharedCpu { .. } => "no-shared-cpu",
            Self::Conflict { .. } => "conflict",
            Self::UnknownDevice { .. } => "unknown-device",
            Self::SmtAlignment { .. } => "smt-alignment",
            Self::Restore { .. } => "restore",
            Self::SchedulerChoice(_) => "scheduler-choice",
            Self::Resize(_) => "resize",
        }
    }
}

/// "cpu does not fit", "gpus do not fit", "cpu, memory do not fit", "hugepages-2Mi do not
/// fit".
fn fit_verb(what: &str) -> &'static str {
    if what == "cpu" || what == "memory" {
        "does not"
    } else {
        "do not"
    }
}

/// Memory for messages: exact in the largest binary unit that divides it while the number stays
/// short (64Gi, 1536Mi), else with one decimal, rounded down (431.0Gi) so that "reduce memory
/// to X" always fits.
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    if b == 0 {
        return "0".to_string();
    }
    for (name, size) in UNITS {
        if b >= size && b % size == 0 && b / size < 10_000 {
            return format!("{}{name}", b / size);
        }
    }
    for (name, size) in UNITS {
        if b >= size {
            let tenths = u128::from(b) * 10 / u128::from(size);
            return format!("{}.{}{name}", tenths / 10, tenths % 10);
        }
    }
    b.to_string()
}

fn fmt_ask(a: &Ask) -> String {
    let mut s = format!(
        "cpu {}, memory {}, gpus {}, nics {}",
        a.cpus,
        fmt_bytes(a.memory_bytes),
        a.gpus,
        a.nics
    );
    for h in &a.hugepages {
        s.push_str(&format!(", {}", fmt_pages(h.size_kb, h.pages)));
    }
    s
}

/// The free counts of the `free:` state (NICs unused by any container), then the NICs in use
/// that a container may still share: "nics 1" alone would read as a free NIC the state lacks.
fn fmt_offer(o: &NodeOffer) -> String {
    let shared = if o.nics_in_use > 0 {
        format!(" (+{} in use, shareable)", o.nics_in_use)
    } else {
        String::new()
    };
    let mut s = format!(
        "{} had free cpu {}, memory {}, gpus {}, nics {}{shared}",
        o.node,
        o.cpus,
        fmt_bytes(o.memory_bytes),
        o.gpus,
        o.nics
    );
    for (size_kb, pages) in &o.hugepages {
        s.push_str(&format!(", {}", fmt_pages(*size_kb, *pages)));
    }
    s
}

/// "node 0", "nodes 0-1".
pub fn fmt_nodes(n: &NodeSet) -> String {
    if n.len() == 1 {
        format!("node {n}")
    } else {
        format!("nodes {n}")
    }
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
