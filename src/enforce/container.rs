//! What enforcement reads from NRI, as plain Rust structs: a container, its pod, its devices and
//! linux resources. `nri/convert.rs` converts the generated protobuf types into these, so the rest
//! of `enforce` never touches generated code and is tested without a runtime.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::host::devices::DeviceNode;
use crate::topology::idset::{ParseIdSetError, MAX_ID};
use crate::topology::IdSet;

/// A protobuf map in a stable order, as the views keep annotations: both the NRI conversion
/// and the CRI listing's build views from such maps, so the helper lives with the views.
pub(crate) fn sorted(m: &std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// A pod as NRI describes it (`PodSandbox`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodView {
    /// Sandbox id (what `Container.pod_sandbox_id` refers to).
    pub id: String,
    /// Pod UID.
    pub uid: String,
    /// Pod name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Pod annotations.
    pub annotations: BTreeMap<String, String>,
    /// The pod's resources in all (`LinuxPodSandbox.pod_resources`: the kubelet's sum over the
    /// pod's containers), when the runtime passes them; sizes a pod-scope node set.
    #[serde(default)]
    pub resources: Option<ResourcesView>,
}

/// A device-cgroup rule (`LinuxDeviceCgroup`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRule {
    /// Allow (true) or deny.
    pub allow: bool,
    /// `c`, `b` or `a`.
    pub kind: String,
    /// Major number, `None` for any.
    pub major: Option<i64>,
    /// Minor number, `None` for any.
    pub minor: Option<i64>,
    /// Access (`rwm`).
    pub access: String,
}

/// The container's linux resources, the fields enforcement uses (`LinuxResources`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourcesView {
    /// cpu.shares (`LinuxCPU.shares`).
    pub cpu_shares: Option<u64>,
    /// CFS quota in microseconds (`LinuxCPU.quota`); <= 0 means unlimited.
    pub cpu_quota: Option<i64>,
    /// CFS period in microseconds (`LinuxCPU.period`).
    pub cpu_period: Option<u64>,
    /// cpuset.cpus as set in the spec (Linux list form; empty when unset), read once.
    pub cpuset_cpus: RuntimeIds,
    /// cpuset.mems as set in the spec, read once.
    pub cpuset_mems: RuntimeIds,
    /// Memory limit in bytes (`LinuxMemory.limit`); <= 0 means unlimited.
    pub memory_limit: Option<i64>,
    /// Device-cgroup rules in the spec.
    pub device_rules: Vec<DeviceRule>,
    /// Hugetlb limits (`LinuxResources.hugepage_limits`) as the runtime names them: the page
    /// size as runc writes it (`2MB`, `1GB`) and the limit in bytes. The kubelet sends one
    /// for every page size of the host, 0 for a size the container does not ask.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hugepage_limits: Vec<(String, u64)>,
}

/// The most ids a kernel names: `CONFIG_NR_CPUS` is at most 8192 (x86_64 `MAXSMP`) and
/// `MAX_NUMNODES` at most 1024. A runtime's list is read within it when the view is made, so
/// that a string of any size costs microseconds there.
pub const KERNEL_ID_LIMIT: u32 = 8192;

/// An id list the runtime reports (`LinuxCPU.cpus` or `.mems`), read once when the view is
/// made: the text as given (for logs and the wire, which carry it unchanged) and the set it
/// names. Where it is used, [`RuntimeIds::below`] holds it to what the host can have without
/// reading the text again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub struct RuntimeIds {
    text: String,
    read: Result<IdSet, ParseIdSetError>,
}

impl RuntimeIds {
    /// Reads `text` (empty or blank: no list, the empty set).
    pub fn new(text: impl Into<String>) -> Self {
        let text = text.into();
        let read = IdSet::parse_list_below(&text, KERNEL_ID_LIMIT);
        RuntimeIds { text, read }
    }

    /// The text as the runtime gave it.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether no list is set (empty or blank).
    pub fn is_unset(&self) -> bool {
        self.text.trim().is_empty()
    }

    /// The set, when it is a list of ids below `limit` (one past the highest id this host can
    /// have), as `IdSet::parse_list_below` would answer for the text: a text longer than any
    /// such list, one that is no list, or an id at or above `limit` is an error.
    pub fn below(&self, limit: u32) -> Result<&IdSet, ParseIdSetError> {
        let err = |reason: String| ParseIdSetError {
            input: self.text.clone(),
            reason,
        };
        let limit = limit.min(MAX_ID);
        let longest = IdSet::longest_list(limit);
        if self.text.len() > longest {
            return Err(err(format!(
                "longer than any list of ids below {limit} ({longest} bytes at most)"
            )));
        }
        let set = self.read.as_ref().map_err(Clone::clone)?;
        match set.runs().last() {
            Some((_, hi)) if hi >= limit => Err(err("id too large".into())),
            _ => Ok(set),
        }
    }
}

impl Default for RuntimeIds {
    fn default() -> Self {
        RuntimeIds::new(String::new())
    }
}

impl From<String> for RuntimeIds {
    fn from(text: String) -> Self {
        RuntimeIds::new(text)
    }
}

impl From<&str> for RuntimeIds {
    fn from(text: &str) -> Self {
        RuntimeIds::new(text)
    }
}

impl From<RuntimeIds> for String {
    fn from(ids: RuntimeIds) -> Self {
        ids.text
    }
}

impl PartialEq<&str> for RuntimeIds {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl std::fmt::Display for RuntimeIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// A mount of the container (`Mount`): the device plugin's volume-mounts strategy names GPUs
/// by the container path of `/dev/null` mounts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountView {
    /// Path inside the container.
    pub destination: String,
    /// Host path (or source).
    pub source: String,
}

/// Devices the kubelet reports for one container through its PodResources API, for the
/// resources nri-align is configured to read (`ContainerDevices`, ids as the plugin named
/// them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeletDevices {
    /// Resource name (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`, `rdma/hca_shared_devices_a`).
    pub resource: String,
    /// Device ids of that resource (`GPU-...`, `GPU-...::3`, `MIG-...`, `0`).
    pub ids: Vec<String>,
}

/// One device of a DRA claim as PodResources reports it (`DynamicResource` /
/// `ClaimResource`, proto/podresources/api.proto).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeletClaimDevice {
    /// `namespace/name` of the ResourceClaim.
    pub claim: String,
    /// The DRA driver (`gpu.nvidia.com`).
    pub driver: String,
    /// Its pool (usually the node name).
    pub pool: String,
    /// The device within the pool (`gpu-0`).
    pub device: String,
    /// Qualified CDI names the driver prepared for it.
    pub cdi_names: Vec<String>,
}

/// Container lifecycle state as NRI reports it (`ContainerState`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContainerState {
    /// Unknown (a runtime that does not say).
    #[default]
    Unknown,
    /// Created, not started.
    Created,
    /// Paused.
    Paused,
    /// Running.
    Running,
    /// Stopped (exited).
    Stopped,
}

impl ContainerState {
    /// Whether the container still holds its resources (anything but stopped).
    pub fn is_live(self) -> bool {
        self != ContainerState::Stopped
    }
}

/// A container as NRI describes it (`Container`), reduced to what enforcement reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerView {
    /// Container id.
    pub id: String,
    /// Sandbox id of its pod.
    pub pod_sandbox_id: String,
    /// Container name.
    pub name: String,
    /// Lifecycle state.
    pub state: ContainerState,
    /// Container annotations.
    pub annotations: BTreeMap<String, String>,
    /// Environment, `KEY=VALUE` entries.
    pub env: Vec<String>,
    /// Device nodes in the spec.
    pub devices: Vec<DeviceNode>,
    /// CDI device names (`nvidia.com/gpu=0`).
    pub cdi_devices: Vec<String>,
    /// Mounts (for the volume-mounts device-list strategy).
    #[serde(default)]
    pub mounts: Vec<MountView>,
    /// What the kubelet's PodResources API says this container was allocated: `None` when it
    /// was not asked, did not answer, or does not list the container (plain init containers
    /// are never listed); `Some` (possibly empty) is the kubelet's authoritative answer.
    #[serde(default)]
    pub kubelet_devices: Option<Vec<KubeletDevices>>,
    /// The DRA claims the kubelet's PodResources answer lists for this container
    /// (`dynamic_resources`): each allocated device's CDI names with its driver, pool and
    /// device, kept for the record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubelet_claims: Vec<KubeletClaimDevice>,
    /// The container's CDI names (NRI's `CDI_devices`, `cdi.k8s.io/` annotations, the claims
    /// above) that the CDI spec registry knows, resolved to host devices before the engine
    /// is locked: an in-memory lookup, no spec file is read on a creation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cdi_resolved: Vec<crate::host::cdi::CdiDevice>,
    /// The devices the kubelet lists as allocatable on the node (its PodResources
    /// `GetAllocatableResources`: healthy devices only), asked in `gpu_mode: remap` alone;
    /// `None` when not asked or it did not answer. A remap chooses only among these GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_allocatable: Option<Vec<KubeletDevices>>,
    /// Linux resources.
    pub resources: ResourcesView,
    /// cgroups path as the runtime gives it (`linux.cgroups_path`), recorded for `verify`.
    pub cgroups_path: String,
    /// Init process id, when the runtime says (0 otherwise).
    pub pid: u32,
}

/// What the node says of a container beyond what its runtime sent, learnt before the engine
/// is locked: the kubelet's PodResources answer and the CDI spec registry's resolution of its
/// names. The plugin gathers it apart from the runtime's view (`nri/node_facts.rs`) and joins
/// the two once ([`ContainerView::with_node`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// [`ContainerView::kubelet_devices`].
    pub kubelet_devices: Option<Vec<KubeletDevices>>,
    /// [`ContainerView::kubelet_allocatable`].
    pub kubelet_allocatable: Option<Vec<KubeletDevices>>,
    /// [`ContainerView::kubelet_claims`].
    pub kubelet_claims: Vec<KubeletClaimDevice>,
    /// [`ContainerView::cdi_resolved`].
    pub cdi_resolved: Vec<crate::host::cdi::CdiDevice>,
}

impl ContainerView {
    /// This view joined with what the node says of the container (any such facts it had are
    /// replaced).
    pub fn with_node(self, node: NodeFacts) -> Self {
        ContainerView {
            kubelet_devices: node.kubelet_devices,
            kubelet_allocatable: node.kubelet_allocatable,
            kubelet_claims: node.kubelet_claims,
            cdi_resolved: node.cdi_resolved,
            ..self
        }
    }

    /// The value of environment variable `key`, if set (the last entry wins, as in exec).
    pub fn env_var(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find_map(|e| e.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
    }
}

#[cfg(test)]
#[path = "container_tests.rs"]
mod tests;
