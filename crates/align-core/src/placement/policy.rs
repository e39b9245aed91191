//! Policies, scopes and node-level placement configuration, with the kubelet's meanings.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::topology::CpuSet;

/// Topology Manager policy: how hard alignment is required.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// No alignment: CPUs from the shared pool (or anywhere for exclusive), devices as given.
    None,
    /// Prefer alignment; admit anyway, on the closest set of nodes.
    #[default]
    BestEffort,
    /// Admit only when every resource is on the preferred (smallest possible) node set.
    Restricted,
    /// Admit only when every resource fits on one NUMA node.
    SingleNumaNode,
}

/// Alignment scope.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// Each container aligned on its own.
    #[default]
    Container,
    /// Every container of a pod on the same NUMA node set.
    Pod,
}

/// What a container's CPUs should be (the `cpus.` annotation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpuPreference {
    /// Exclusive when requests equal limits and the count is an integer, else shared.
    #[default]
    Auto,
    /// Exclusive whole CPUs (rounded up), even without a Guaranteed-style request.
    Exclusive,
    /// Shared pool even for a Guaranteed-style request.
    Shared,
    /// Exclusive CPUs taken only from the CPUs the kernel isolates (`isolcpus=`,
    /// `/sys/devices/system/cpu/isolated`); no other request ever gets those.
    Isolated,
}

/// What an in-place shrink of a container's exclusive CPUs may give back (`resize_shrink`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResizeShrink {
    /// Only CPUs added since admission, newest first: a container never goes below the CPUs
    /// it was admitted with (the kubelet's static policy keeps those too).
    #[default]
    Admitted,
    /// The added CPUs newest first, then the admitted ones farthest from its devices.
    Any,
}

/// Who chooses which GPUs a container gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuMode {
    /// nri-align chooses the GPUs, keeping the count the device plugin allocated.
    #[default]
    Remap,
    /// Keep the allocated GPUs; align CPUs, memory and NICs to them.
    Keep,
}

/// Which free NUMA node a request that fits on one is packed onto (`numa_choice`), named after
/// the kubelet proposal's `numa-allocation-strategy` (kubernetes/enhancements#6332) and
/// Koordinator's `node.koordinator.sh/numa-allocate-strategy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NumaChoice {
    /// The node left with the least free after it (nodes with idle GPUs and NICs kept for the
    /// work that needs them first): nri-align's search so far.
    #[default]
    BestFit,
    /// The node with the smallest share of its CPUs free: fills busy nodes first, keeping whole
    /// nodes free for large requests.
    MostAllocated,
    /// The node with the largest share of its CPUs free: spreads load (and memory bandwidth)
    /// over the nodes.
    LeastAllocated,
}

/// The NUMA memory policy a container's threads start with (`mempolicy`): the kernel's
/// `set_mempolicy(2)` modes, over the container's memory nodes. Applied by the OCI runtime from
/// `linux.memoryPolicy` (runtime-spec v1.3.0), which NRI v0.12 lets a plugin set; runtimes
/// that cannot take it run the container with the default (local, first-touch) policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemPolicy {
    /// Set nothing: the kernel's default (allocate on the node the thread runs on).
    #[default]
    None,
    /// `MPOL_BIND`: only from the container's memory nodes, failing over to none of the others.
    Bind,
    /// `MPOL_INTERLEAVE`: pages spread round-robin over the container's memory nodes.
    Interleave,
    /// `MPOL_PREFERRED_MANY`: from the container's CPU nodes first, any node after.
    PreferredMany,
    /// `MPOL_WEIGHTED_INTERLEAVE`: interleaved by the kernel's per-node weights.
    WeightedInterleave,
}

/// How a container's exclusive CPUs are split over the NUMA nodes it was given
/// (`cpu_spread`), when those are more than one. The kubelet's counterpart is the CPU
/// manager's `distribute-cpus-across-numa` option.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpuSpread {
    /// Where the container's GPUs, NICs or other devices sit on more than one node, each
    /// device's node gets a share in proportion to the devices there (see
    /// `placement::spread`); otherwise as [`CpuSpread::Pack`].
    #[default]
    ByDevice,
    /// An equal share on each of the container's nodes.
    Even,
    /// The first node filled before the next.
    Pack,
}

/// What to do when the scheduler's choice (Koordinator's, Crane's) cannot be had on this node
/// when the container is created (CPUs taken since, a zone too small after a race).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerChoiceMode {
    /// Refuse the container, saying what the scheduler chose and what is there: the scheduler
    /// and the node never disagree silently.
    #[default]
    Required,
    /// Place it by the node's own search instead, and say so in the decision's reason.
    Preferred,
}

/// Node-level placement settings (from the configuration file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementConfig {
    /// Default policy.
    pub policy: Policy,
    /// Default scope.
    pub scope: Scope,
    /// CPUs never given to containers (list form in the file: `"0-1"`).
    pub reserved_cpus: CpuSet,
    /// GPU mode.
    pub gpu_mode: GpuMode,
    /// Whether annotations may ask for GPUs/NICs the container was not allocated.
    pub allow_device_annotations: bool,
    /// Exclusive CPUs only as whole cores (kubelet `full-pcpus-only`).
    pub full_pcpus_only: bool,
    /// Namespaces whose pods may ask for exclusive (or isolated) CPUs by annotation without a
    /// Guaranteed-shaped request. Empty by default: an annotation never widens what the
    /// scheduler accounted.
    #[serde(default)]
    pub exclusive_annotation_namespaces: Vec<String>,
    /// Namespaces whose pods may ask for isolated CPUs (`cpus: isolated`). Isolated CPUs are
    /// the few the kernel keeps free of scheduler noise (`isolcpus`, `nohz_full`), set aside
    /// for chosen workloads: being Guaranteed-shaped is not enough to take them. Empty by
    /// default: nobody may, until the node administrator names the namespaces.
    #[serde(default)]
    pub isolated_namespaces: Vec<String>,
    /// Whether a scheduler's choice that cannot be had refuses the container.
    #[serde(default)]
    pub scheduler_choice: SchedulerChoiceMode,
    /// Which node a request that fits on one is packed onto.
    #[serde(default)]
    pub numa_choice: NumaChoice,
    /// Free CPUs per NUMA node kept out of the shared pool for exclusive containers (0: none).
    /// Exclusive admissions taken from it move no shared container; see `placement::pool`.
    #[serde(default)]
    pub exclusive_headroom: u32,
    /// The memory policy containers start with (`none`: the kernel's default).
    #[serde(default)]
    pub mempolicy: MemPolicy,
    /// How exclusive CPUs are split over a container's nodes.
    #[serde(default)]
    pub cpu_spread: CpuSpread,
    /// What an in-place shrink of exclusive CPUs may give back (see `placement::resize`).
    #[serde(default)]
    pub resize_shrink: ResizeShrink,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        Self {
            policy: Policy::BestEffort,
            scope: Scope::Container,
            reserved_cpus: CpuSet::new(),
            gpu_mode: GpuMode::Remap,
            allow_device_annotations: false,
            full_pcpus_only: false,
            exclusive_annotation_namespaces: Vec::new(),
            isolated_namespaces: Vec::new(),
            scheduler_choice: SchedulerChoiceMode::Required,
            numa_choice: NumaChoice::BestFit,
            exclusive_headroom: 0,
            mempolicy: MemPolicy::None,
            cpu_spread: CpuSpread::ByDevice,
            resize_shrink: ResizeShrink::Admitted,
        }
    }
}

/// A policy, scope, preference or mode name that is not one of the known values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {given:?}; expected one of: {expected}")]
pub struct UnknownValue {
    /// What kind of value (`policy`, `scope`...).
    pub what: &'static str,
    /// The text given.
    pub given: String,
    /// The accepted values.
    pub expected: &'static str,
}

macro_rules! named_enum {
    ($ty:ty, $what:literal, [$($name:literal => $variant:expr),+ $(,)?]) => {
        impl FromStr for $ty {
            type Err = UnknownValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s.trim() {
                    $($name => Ok($variant),)+
                    other => Err(UnknownValue {
                        what: $what,
                        given: other.to_string(),
                        expected: concat!($($name, " "),+).trim_end(),
                    }),
                }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let name = match self { $(v if *v == $variant => $name,)+ _ => "?" };
                f.write_str(name)
            }
        }
    };
}

named_enum!(Policy, "policy", [
    "none" => Policy::None,
    "best-effort" => Policy::BestEffort,
    "restricted" => Policy::Restricted,
    "single-numa-node" => Policy::SingleNumaNode,
]);
named_enum!(Scope, "scope", ["container" => Scope::Container, "pod" => Scope::Pod]);
named_enum!(CpuPreference, "cpu preference", [
    "auto" => CpuPreference::Auto,
    "exclusive" => CpuPreference::Exclusive,
    "shared" => CpuPreference::Shared,
    "isolated" => CpuPreference::Isolated,
]);
named_enum!(SchedulerChoiceMode, "scheduler choice", [
    "required" => SchedulerChoiceMode::Required,
    "preferred" => SchedulerChoiceMode::Preferred,
]);
named_enum!(NumaChoice, "numa choice", [
    "best-fit" => NumaChoice::BestFit,
    "most-allocated" => NumaChoice::MostAllocated,
    "least-allocated" => NumaChoice::LeastAllocated,
]);
named_enum!(CpuSpread, "cpu spread", [
    "by-device" => CpuSpread::ByDevice,
    "even" => CpuSpread::Even,
    "pack" => CpuSpread::Pack,
]);
named_enum!(ResizeShrink, "resize shrink", [
    "admitted" => ResizeShrink::Admitted,
    "any" => ResizeShrink::Any,
]);
named_enum!(GpuMode, "gpu mode", ["remap" => GpuMode::Remap, "keep" => GpuMode::Keep]);
named_enum!(MemPolicy, "mempolicy", [
    "none" => MemPolicy::None,
    "bind" => MemPolicy::Bind,
    "interleave" => MemPolicy::Interleave,
    "preferred-many" => MemPolicy::PreferredMany,
    "weighted-interleave" => MemPolicy::WeightedInterleave,
]);

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
