//! What one container asks for (and what its whole pod asks for, where that is known).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::scheduler::SchedulerChoice;

use super::assignment::Assignment;

/// The pod a container belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodInfo {
    /// Pod UID (the key for pod scope).
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Pod annotations (policy.nri-align.io/... keys are read from here).
    pub annotations: BTreeMap<String, String>,
}

/// One container's request, derived from what NRI gives (resources, devices, env).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Runtime container id (the key of the allocation).
    pub container_id: String,
    /// Container name within the pod (for `container.<name>` annotations).
    pub container_name: String,
    /// Its pod.
    pub pod: PodInfo,
    /// CPU request in millicores (from shares; 0 when unknown).
    pub cpu_request_milli: u64,
    /// CPU limit in millicores (from quota/period), `None` when unlimited.
    pub cpu_limit_milli: Option<u64>,
    /// Memory limit in bytes, `None` when unlimited.
    pub memory_limit_bytes: Option<u64>,
    /// GPUs a device plugin allocated, as PCI bus ids in sysfs form (from device nodes,
    /// CDI devices or NVIDIA_VISIBLE_DEVICES, resolved by the enforcement layer).
    pub allocated_gpus: Vec<String>,
    /// RDMA NICs a device plugin allocated, by interface/RDMA name as in `Topology::nics`.
    pub allocated_nics: Vec<String>,
    /// GPUs the container uses without holding them alone (PCI bus ids): the parent of a MIG
    /// device, a time-sliced or MPS replica, a GPU several containers were given, or one named
    /// only by an environment variable no authoritative source confirmed. Placement aligns to
    /// them and never records, remaps or refuses them as taken.
    #[serde(default)]
    pub shared_gpus: Vec<String>,
    /// Where the pod's scheduler said it goes (read from its annotations by
    /// [`scheduler::read`](super::scheduler::read)): a constraint of the search, or a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<SchedulerChoice>,
    /// Other PCI devices the runtime gives the container whatever placement says (a CDI
    /// device that is neither a GPU nor an RDMA NIC the topology knows: an FPGA, another
    /// vendor's accelerator, a NIC without RDMA). Placement aligns the CPUs and memory to
    /// their NUMA nodes as to a GPU's; they are never held, chosen or remapped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generic_devices: Vec<GenericDevice>,
    /// Huge pages per size (the container's `hugepage_limits`): held on the nodes placement
    /// chooses, which must have them free.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hugepages: Vec<super::hugepages::HugePageNeed>,
}

impl Request {
    /// An assignment naming this container and its pod, exclusive and under `policy` as
    /// resolved, nothing placed yet: where a decision starts, the allocator's and the kubelet
    /// baseline's alike.
    pub fn blank_assignment(&self, exclusive: bool, policy: super::policy::Policy) -> Assignment {
        Assignment {
            container_id: self.container_id.clone(),
            container_name: self.container_name.clone(),
            pod_uid: self.pod.uid.clone(),
            pod_name: format!("{}/{}", self.pod.namespace, self.pod.name),
            exclusive,
            policy,
            ..Assignment::default()
        }
    }
}

/// A PCI device placement aligns to without managing it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenericDevice {
    /// Where it was named (a CDI name `vendor/class=name`).
    pub name: String,
    /// PCI bus id in sysfs form, lowercase.
    pub pci_bus_id: String,
    /// Its NUMA node, `None` when the host does not say (then it constrains nothing).
    pub numa_node: Option<u32>,
    /// Root complex, then the bridges down to the function (for the record and reports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcie_path: Vec<String>,
}

/// What a whole pod asks for, when it is known before its first container is placed
/// (`simulate` knows the workload; the plugin can read the pod's resources). In pod scope the
/// first container pins the pod's node set, so that set is chosen to hold the whole pod when
/// one within the policy's width can; otherwise the first container is sized alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodTotals {
    /// Exclusive CPUs of all the pod's containers.
    pub exclusive_cpus: u32,
    /// Memory limits of the containers that are bound to nodes, summed.
    pub memory_bytes: u64,
    /// GPUs of all containers.
    pub gpus: u32,
    /// NICs of all containers.
    pub nics: u32,
}

impl PodTotals {
    /// Totals of `reqs` by the kubelet's Guaranteed rule (annotations aside: a sizing hint).
    pub fn of(reqs: &[Request]) -> PodTotals {
        let mut t = PodTotals::default();
        for r in reqs {
            let m = r.cpu_request_milli;
            if r.cpu_limit_milli == Some(m) && m > 0 && m % 1000 == 0 {
                t.exclusive_cpus = t
                    .exclusive_cpus
                    .saturating_add(u32::try_from(m / 1000).unwrap_or(u32::MAX));
                t.memory_bytes = t
                    .memory_bytes
                    .saturating_add(r.memory_limit_bytes.unwrap_or(0));
            }
            t.gpus = t.gpus.saturating_add(r.allocated_gpus.len() as u32);
            t.nics = t.nics.saturating_add(r.allocated_nics.len() as u32);
        }
        t
    }
}
