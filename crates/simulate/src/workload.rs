//! The workload file of `simulate` (YAML or JSON): pods with containers, their resources and
//! annotations, and ordered add/remove events; Kubernetes quantities (`500m`, `64Gi`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use align_core::placement::request::GenericDevice;
use align_core::topology::Topology;

/// Why a workload file is not usable.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// YAML/JSON syntax or schema (serde's message, which repeats a bad value, is cut).
    #[error("invalid workload: {}", align_core::untrusted::message(&.0.to_string()))]
    Parse(#[from] serde_yaml_ng::Error),
    /// More text than any workload needs.
    #[error("invalid workload: {0}")]
    TooLarge(String),
    /// A quantity that is not a number with a known suffix.
    #[error("pod {pod} container {container}: invalid {what} {value:?} ({hint})")]
    Quantity {
        /// Pod name.
        pod: String,
        /// Container name.
        container: String,
        /// `cpu`, `cpu_limit`, `memory`.
        what: &'static str,
        /// The text.
        value: String,
        /// What is accepted.
        hint: &'static str,
    },
    /// A pod definition that cannot be replayed.
    #[error("pod {pod}: {reason}")]
    Pod {
        /// Pod name.
        pod: String,
        /// What is wrong.
        reason: String,
    },
    /// An event names a pod that is not defined, or a pod is added twice.
    #[error("event {index}: {reason}")]
    Event {
        /// Event position (1-based).
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

/// A number or a string in the file (`cpu: 2` and `cpu: "500m"` both work).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Quantity {
    /// A plain number.
    Number(f64),
    /// A Kubernetes quantity.
    Text(String),
}

impl std::fmt::Display for Quantity {
    /// As written in the file, for error messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Quantity::Number(n) => write!(f, "{n}"),
            Quantity::Text(t) => f.write_str(t),
        }
    }
}

/// A workload file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Pods.
    pub pods: Vec<PodSpec>,
    /// Ordered events; default: add every pod in order.
    #[serde(default)]
    pub events: Vec<Event>,
}

/// One pod.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodSpec {
    /// Name.
    pub name: String,
    /// Namespace.
    #[serde(default = "default_ns")]
    pub namespace: String,
    /// Annotations (`policy.nri-align.io/pod`...).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Containers in creation order.
    pub containers: Vec<ContainerSpec>,
}

fn default_ns() -> String {
    "default".into()
}

/// One container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    /// Name.
    pub name: String,
    /// CPU request (`"16"`, `"500m"`, `1.5`).
    #[serde(default)]
    pub cpu: Option<Quantity>,
    /// CPU limit; defaults to the request.
    #[serde(default)]
    pub cpu_limit: Option<Quantity>,
    /// Memory limit (`64Gi`).
    #[serde(default)]
    pub memory: Option<Quantity>,
    /// GPUs a device plugin allocated.
    #[serde(default)]
    pub gpus: u32,
    /// RDMA NICs a device plugin allocated.
    #[serde(default)]
    pub nics: u32,
    /// PCI functions a DRA driver allocated (bus ids of the topology's PCI devices,
    /// `0000:c0:00.0`: an FPGA, another vendor's accelerator, a NIC without RDMA), reaching
    /// the container as CDI devices. nri-align aligns the container's CPUs and memory to their
    /// nodes as to a GPU's (generic devices, never held); the kubelet's managers never see
    /// them. GPUs keep to `gpus`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// 2 MiB huge pages (`hugepages-2Mi: 1Gi`, bytes as in a pod's limits).
    #[serde(
        default,
        rename = "hugepages-2Mi",
        skip_serializing_if = "Option::is_none"
    )]
    pub hugepages_2mi: Option<Quantity>,
    /// 1 GiB huge pages (`hugepages-1Gi: 4Gi`).
    #[serde(
        default,
        rename = "hugepages-1Gi",
        skip_serializing_if = "Option::is_none"
    )]
    pub hugepages_1gi: Option<Quantity>,
}

/// An event: exactly one of `add` and `remove`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// Create the pod's containers in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add: Option<String>,
    /// Stop and remove the pod's containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove: Option<String>,
}

impl Event {
    /// An `add` event.
    pub fn add(pod: &str) -> Self {
        Self {
            add: Some(pod.to_string()),
            remove: None,
        }
    }
    /// A `remove` event.
    pub fn remove(pod: &str) -> Self {
        Self {
            add: None,
            remove: Some(pod.to_string()),
        }
    }
}

impl Workload {
    /// Parses YAML or JSON (JSON is YAML).
    pub fn parse(text: &str) -> Result<Self, WorkloadError> {
        align_core::untrusted::check_len(
            "the workload",
            text.len(),
            align_core::untrusted::MAX_DOCUMENT_BYTES,
        )
        .map_err(WorkloadError::TooLarge)?;
        align_core::untrusted::yaml::check(text)
            .map_err(|e| WorkloadError::TooLarge(e.to_string()))?;
        let w: Workload = serde_yaml_ng::from_str(text)?;
        // Events name pods: two pods with one name would make `remove` ambiguous.
        for (i, p) in w.pods.iter().enumerate() {
            if w.pods[..i].iter().any(|q| q.name == p.name) {
                return Err(WorkloadError::Pod {
                    pod: align_core::untrusted::excerpt(&p.name),
                    reason: "defined twice; pod names must be unique".into(),
                });
            }
            if p.containers.is_empty() {
                return Err(WorkloadError::Pod {
                    pod: align_core::untrusted::excerpt(&p.name),
                    reason: "has no containers".into(),
                });
            }
        }
        Ok(w)
    }
}

/// A non-negative finite amount that fits in 64 bits, rounded to the nearest unit; anything
/// else is not a quantity (a saturated `1e30` would read as a real, huge request).
fn whole(x: f64) -> Option<u64> {
    let x = x.round();
    (x.is_finite() && x >= 0.0 && x < u64::MAX as f64).then_some(x as u64)
}

pub(super) fn cpu_milli(q: &Quantity) -> Option<u64> {
    match q {
        Quantity::Number(n) => whole(n * 1000.0),
        Quantity::Text(t) => {
            let t = t.trim();
            match t.strip_suffix('m') {
                Some(m) => m.parse().ok(),
                None => t.parse::<f64>().ok().and_then(|n| whole(n * 1000.0)),
            }
        }
    }
}

pub(super) fn bytes(q: &Quantity) -> Option<u64> {
    const SUFFIXES: [(&str, u64); 8] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
    ];
    match q {
        Quantity::Number(n) => whole(*n),
        Quantity::Text(t) => {
            let t = t.trim();
            for (s, mul) in SUFFIXES {
                if let Some(num) = t.strip_suffix(s) {
                    return num
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .and_then(|n| whole(n * mul as f64));
                }
            }
            t.parse().ok()
        }
    }
}

/// The generic devices of container `c`: its DRA `devices`, each a PCI function of `topo` that
/// is neither a GPU nor a NIC of it, with the topology's NUMA node and PCIe path.
pub(super) fn dra_devices(
    pod: &PodSpec,
    c: &ContainerSpec,
    topo: &Topology,
) -> Result<Vec<GenericDevice>, WorkloadError> {
    let mut out: Vec<GenericDevice> = Vec::new();
    for bus in &c.devices {
        let bus = bus.trim().to_ascii_lowercase();
        let bad = |why: &str| WorkloadError::Pod {
            pod: align_core::untrusted::excerpt(&pod.name),
            reason: format!(
                "container {}: device {} {why}",
                align_core::untrusted::excerpt(&c.name),
                align_core::untrusted::quoted(&bus)
            ),
        };
        if topo.gpus.iter().any(|g| g.pci_bus_id == bus) {
            return Err(bad("is a GPU: ask for GPUs with `gpus`"));
        }
        if topo
            .nics
            .iter()
            .any(|n| n.pci_bus_id.as_deref() == Some(bus.as_str()))
        {
            return Err(bad("is a NIC: ask for RDMA NICs with `nics`"));
        }
        let Some(d) = topo.pci(&bus) else {
            return Err(bad("is no PCI function of the topology"));
        };
        if out.iter().any(|g| g.pci_bus_id == bus) {
            continue;
        }
        let mut pcie_path = vec![d.root_complex.clone()];
        pcie_path.extend(d.bridges.iter().rev().cloned());
        pcie_path.push(bus.clone());
        out.push(GenericDevice {
            name: format!("dra/{bus}"),
            pci_bus_id: bus,
            numa_node: d.numa_node,
            pcie_path,
        });
    }
    Ok(out)
}

#[cfg(test)]
#[path = "workload_tests.rs"]
mod tests;
