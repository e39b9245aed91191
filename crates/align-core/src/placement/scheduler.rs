//! The scheduler's choice: where a topology-aware scheduler that picks NUMA nodes, CPUs and
//! devices itself (Koordinator's koord-scheduler, Crane's scheduler) said a pod goes, read from
//! the pod annotations it writes before binding, so that the node places the container there
//! rather than deciding again on its own.
//!
//! [`read`] turns the annotations into a [`SchedulerChoice`] (strictly typed, bounded, a
//! malformed value refused with the key and what is wrong), which the enforcement layer puts
//! on the [`Request`](super::Request); [`honour`](super::resolve::honour) turns it into constraints of the one search
//! (allowed nodes, the exact CPUs, the GPUs and NICs held) or the refusal that says what the
//! scheduler chose, what is free there and who holds what it wanted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::PlacementError;
use crate::topology::{CpuSet, NodeSet};
use crate::untrusted::{excerpt, quoted};

mod crane;
mod koordinator;

pub use crane::{
    CPU_POLICY as CRANE_CPU_POLICY, EXCLUDE_RESERVED as CRANE_EXCLUDE_RESERVED,
    TOPOLOGY_AWARENESS as CRANE_TOPOLOGY_AWARENESS, TOPOLOGY_RESULT as CRANE_TOPOLOGY_RESULT,
};
pub use koordinator::{
    DEVICE_ALLOCATED as KOORD_DEVICE_ALLOCATED, RESOURCE_STATUS as KOORD_RESOURCE_STATUS,
};

/// Longest scheduler annotation value read: eight GPUs and eight RDMA NICs with a few VFs
/// each, as koord-scheduler writes them, take about 4 KiB.
pub const MAX_VALUE_BYTES: usize = 32 << 10;

/// Most NUMA nodes, devices of one kind, or VFs one annotation may list: more than any host
/// has, few enough that a hostile value costs nothing to walk.
pub const MAX_ENTRIES: usize = 256;

/// Highest NUMA node id a choice may name (the kernel's `MAX_NUMNODES` is at most 1024).
pub const MAX_NODE_ID: u32 = 1023;

/// Which scheduler made the choice (a label of the outcome metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheduler {
    /// koord-scheduler (`scheduling.koordinator.sh/` annotations).
    Koordinator,
    /// Crane's topology-aware scheduler (`topology.crane.io/` annotations).
    Crane,
    /// Another NRI plugin that owns `cpuset.mems` on the node (a DRA memory driver's, with
    /// `leave_to_others: [mems]`): the memory nodes it set before nri-align was asked are
    /// where the container's CPUs go.
    MemoryPlugin,
}

impl Scheduler {
    /// The label (`koordinator`, `crane`, `memory-plugin`).
    pub fn label(self) -> &'static str {
        match self {
            Scheduler::Koordinator => "koordinator",
            Scheduler::Crane => "crane",
            Scheduler::MemoryPlugin => "memory-plugin",
        }
    }
}

/// Crane's `topology.crane.io/cpu-policy`: how the pod's CPUs relate to the zones chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CranePolicy {
    /// The node's default (shared) CPUs, anywhere: the zones bind nothing.
    None,
    /// CPUs no other container shares (Guaranteed-shaped pods only, as for any exclusive CPU).
    Exclusive,
    /// The shared CPUs of the chosen zones.
    Numa,
    /// Pinned CPUs of the chosen zones (nri-align gives them exclusively when the container is
    /// Guaranteed-shaped, the shared CPUs of the zones otherwise).
    Immovable,
}

/// Where the scheduler said a pod goes. Node-local names only (CPU ids, NUMA node ids, GPU
/// minors, PCI bus ids): [`honour`](super::resolve::honour) checks each against this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerChoice {
    /// Who chose.
    pub scheduler: Scheduler,
    /// The exact CPUs (Koordinator's `cpuset`, for the whole pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<CpuSet>,
    /// The NUMA nodes CPUs and memory come from (empty: the scheduler named none).
    #[serde(default)]
    pub nodes: NodeSet,
    /// GPUs held, by minor (`/dev/nvidiaN`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_minors: Vec<u32>,
    /// GPUs used shared (a fraction of a GPU: Koordinator's `gpu-core` under 100), by minor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_gpu_minors: Vec<u32>,
    /// RDMA NICs held, by PCI bus id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rdma: Vec<String>,
    /// SR-IOV virtual functions of those NICs, by PCI bus id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vfs: Vec<String>,
    /// Crane's CPU policy, when the pod has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_policy: Option<CranePolicy>,
}

impl SchedulerChoice {
    /// An empty choice of `scheduler`.
    pub fn new(scheduler: Scheduler) -> Self {
        Self {
            scheduler,
            cpus: None,
            nodes: NodeSet::new(),
            gpu_minors: Vec::new(),
            shared_gpu_minors: Vec::new(),
            rdma: Vec::new(),
            vfs: Vec::new(),
            cpu_policy: None,
        }
    }

    /// Whether it constrains anything at all.
    pub fn is_empty(&self) -> bool {
        self.cpus.is_none()
            && self.nodes.is_empty()
            && self.gpu_minors.is_empty()
            && self.shared_gpu_minors.is_empty()
            && self.rdma.is_empty()
            && self.vfs.is_empty()
            && self.cpu_policy.is_none()
    }

    /// What was chosen, in the words of a refusal: `cpus 0-3, NUMA node 0, GPU minor 1`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = &self.cpus {
            parts.push(format!("cpus {c}"));
        }
        if !self.nodes.is_empty() {
            let s = if self.nodes.len() == 1 { "" } else { "s" };
            parts.push(format!("NUMA node{s} {}", self.nodes));
        }
        let minors = |m: &[u32]| m.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        if !self.gpu_minors.is_empty() {
            parts.push(format!("GPU minor {}", minors(&self.gpu_minors)));
        }
        if !self.shared_gpu_minors.is_empty() {
            parts.push(format!(
                "shared GPU minor {}",
                minors(&self.shared_gpu_minors)
            ));
        }
        if !self.rdma.is_empty() {
            parts.push(format!("RDMA {}", self.rdma.join(",")));
        }
        if let Some(p) = self.cpu_policy {
            parts.push(format!("cpu-policy {}", crane::policy_name(p)));
        }
        if parts.is_empty() {
            return "nothing".into();
        }
        parts.join(", ")
    }
}

/// Annotation key prefixes of each scheduler that writes a choice.
const KOORDINATOR_PREFIX: &str = "scheduling.koordinator.sh/";
const CRANE_PREFIX: &str = "topology.crane.io/";

/// The schedulers whose choice annotations `annotations` carry (each once, Koordinator first),
/// whether or not their values are well formed.
pub fn annotated_by(annotations: &BTreeMap<String, String>) -> Vec<Scheduler> {
    let koord = [KOORD_RESOURCE_STATUS, KOORD_DEVICE_ALLOCATED];
    let crane = [
        CRANE_TOPOLOGY_RESULT,
        CRANE_CPU_POLICY,
        CRANE_TOPOLOGY_AWARENESS,
        CRANE_EXCLUDE_RESERVED,
    ];
    let mut out = Vec::new();
    if koord.iter().any(|k| annotations.contains_key(*k)) {
        out.push(Scheduler::Koordinator);
    }
    if crane.iter().any(|k| annotations.contains_key(*k)) {
        out.push(Scheduler::Crane);
    }
    out
}

/// The scheduler that owns annotation `key`, if any (to label a malformed value).
pub fn owner_of(key: &str) -> Option<Scheduler> {
    if key.starts_with(KOORDINATOR_PREFIX) {
        Some(Scheduler::Koordinator)
    } else if key.starts_with(CRANE_PREFIX) {
        Some(Scheduler::Crane)
    } else {
        None
    }
}

/// What a pod's annotations say once the node's trust is applied.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TrustedRead {
    /// The choice of a trusted scheduler, when one annotated the pod.
    pub choice: Option<SchedulerChoice>,
    /// Schedulers whose annotations the pod carries but the node does not trust: ignored
    /// whole, malformed or not.
    pub untrusted: Vec<Scheduler>,
}

/// Reads the choice of the schedulers in `trusted` only. Any pod author can write these
/// annotations; only an admission policy or the scheduler's own webhook makes them the
/// scheduler's word, and only the node's administrator knows whether one is in place. An
/// untrusted scheduler's annotations are never read, so a malformed one refuses nothing.
pub fn read_trusted(
    annotations: &BTreeMap<String, String>,
    trusted: &[Scheduler],
) -> Result<TrustedRead, PlacementError> {
    let present = annotated_by(annotations);
    let (trusted_present, untrusted): (Vec<Scheduler>, Vec<Scheduler>) =
        present.into_iter().partition(|s| trusted.contains(s));
    let koord = if trusted_present.contains(&Scheduler::Koordinator) {
        koordinator::read(annotations)?
    } else {
        None
    };
    let crane = if trusted_present.contains(&Scheduler::Crane) {
        crane::read(annotations)?
    } else {
        None
    };
    Ok(TrustedRead {
        choice: one_choice(koord, crane)?,
        untrusted,
    })
}

/// Reads the scheduler's choice from a pod's annotations, trusting every scheduler: `None`
/// when no scheduler annotated the pod (or its annotations constrain nothing), an error naming
/// the key when a value is malformed, oversized, or when both schedulers annotated it. The
/// daemon reads through [`read_trusted`]; this is for offline tools (`simulate`) and tests.
pub fn read(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<SchedulerChoice>, PlacementError> {
    read_trusted(annotations, &[Scheduler::Koordinator, Scheduler::Crane]).map(|r| r.choice)
}

/// At most one scheduler places a pod.
fn one_choice(
    koord: Option<SchedulerChoice>,
    crane: Option<SchedulerChoice>,
) -> Result<Option<SchedulerChoice>, PlacementError> {
    match (koord, crane) {
        (Some(_), Some(_)) => Err(PlacementError::InvalidAnnotation {
            key: KOORD_RESOURCE_STATUS.into(),
            value: "(with topology.crane.io/topology-result)".into(),
            reason: "the pod carries both Koordinator's and Crane's placement; one scheduler \
                     places a pod"
                .into(),
        }),
        (Some(c), None) | (None, Some(c)) => Ok(Some(c).filter(|c| !c.is_empty())),
        (None, None) => Ok(None),
    }
}

impl SchedulerChoice {
    /// Keeps only the devices of the choice that the container was already given by an
    /// authoritative source (the kubelet, a DRA claim, the runtime's injected devices):
    /// `gpus` and `shared_gpus` by PCI bus id, `nics` by name as in `topo.nics`. A scheduler's
    /// choice may pick among what the container has; it never grants a device, since the
    /// annotation it came from is the pod's own to write. Returns what was dropped, in the
    /// words of a log line (`GPU minor 0, RDMA 0000:04:00.0`); empty when nothing was.
    pub fn narrow_to_given(
        &mut self,
        topo: &crate::topology::Topology,
        gpus: &[String],
        shared_gpus: &[String],
        nics: &[String],
    ) -> Vec<String> {
        let gpu_given = |minor: &u32, list: &[&[String]]| {
            topo.gpus
                .iter()
                .any(|g| g.minor == Some(*minor) && list.iter().any(|l| l.contains(&g.pci_bus_id)))
        };
        let nic_given = |bus: &String| {
            topo.nics.iter().any(|n| {
                n.pci_bus_id
                    .as_deref()
                    .is_some_and(|b| b.eq_ignore_ascii_case(bus))
                    && nics.contains(&n.name)
            })
        };
        let mut dropped = Vec::new();
        let mut keep_minors = |list: &mut Vec<u32>, what: &str, from: &[&[String]]| {
            list.retain(|m| {
                let keep = gpu_given(m, from);
                if !keep {
                    dropped.push(format!("{what} {m}"));
                }
                keep
            });
        };
        keep_minors(&mut self.gpu_minors, "GPU minor", &[gpus]);
        keep_minors(
            &mut self.shared_gpu_minors,
            "shared GPU minor",
            &[gpus, shared_gpus],
        );
        for (list, what) in [(&mut self.rdma, "RDMA"), (&mut self.vfs, "VF")] {
            list.retain(|bus| {
                let keep = nic_given(bus);
                if !keep {
                    dropped.push(format!("{what} {}", excerpt(bus)));
                }
                keep
            });
        }
        dropped
    }
}

/// The error for annotation `key` whose `value` is wrong for `reason`.
pub(super) fn invalid(key: &str, value: &str, reason: impl Into<String>) -> PlacementError {
    PlacementError::InvalidAnnotation {
        key: excerpt(key),
        value: quoted(value),
        reason: crate::untrusted::message(&reason.into()),
    }
}

/// The value of `key`, refused when longer than [`MAX_VALUE_BYTES`].
pub(super) fn value<'a>(
    annotations: &'a BTreeMap<String, String>,
    key: &str,
) -> Result<Option<&'a str>, PlacementError> {
    let Some(v) = annotations.get(key) else {
        return Ok(None);
    };
    if v.len() > MAX_VALUE_BYTES {
        return Err(invalid(
            key,
            v,
            format!(
                "the value is {} bytes; nri-align reads at most {MAX_VALUE_BYTES}",
                v.len()
            ),
        ));
    }
    Ok(Some(v))
}

/// Parses JSON `v` of annotation `key` as `T`, serde's message (cut) as the reason.
pub(super) fn json<T: serde::de::DeserializeOwned>(
    key: &str,
    v: &str,
) -> Result<T, PlacementError> {
    serde_json::from_str(v)
        .map_err(|e| invalid(key, v, format!("not valid JSON of this shape: {e}")))
}

/// A NUMA node id from the scheduler (an `int32` upstream), refused outside 0..=MAX_NODE_ID.
pub(super) fn node_id(key: &str, v: &str, n: i64) -> Result<u32, PlacementError> {
    u32::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_NODE_ID)
        .ok_or_else(|| {
            invalid(
                key,
                v,
                format!("NUMA node {n} is not an id from 0 to {MAX_NODE_ID}"),
            )
        })
}

/// Whether `s` is a PCI address in sysfs form, `DDDD:BB:DD.F` (hex digits).
pub(super) fn is_pci_bus_id(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && hex(0..4)
        && hex(5..7)
        && hex(8..10)
        && (b'0'..=b'7').contains(&b[11])
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
