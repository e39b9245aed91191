//! One container's devices as one typed value, read once from its view: each GPU, RDMA NIC
//! and generic device with where it came from, whether that source is authoritative, whether
//! it is used shared, and the CDI name or DRA claim it came through; beside them the facts of
//! the spec and env that the adjustment, the record and a remap depend on (the GPU and RDMA
//! nodes the runtime gives anyway, whether the GPUs reach the container only by env, whether
//! the env names only allocated MIG devices).
//!
//! [`super::build`] makes it and carries it in [`super::Built`]; the engine and
//! `enforce/adjust.rs` read only this value, never the container's env, device nodes or CDI
//! names again, so that what a device is and where it came from is decided in one place.

use k8s_devices::nvidia::{self, VisibleDevices, VISIBLE_DEVICES_ENV};

use super::found::{Found, GpuSource};
use crate::enforce::container::{ContainerView, DeviceNode, KubeletClaimDevice};
use crate::host::cdi::CdiTarget;
use crate::placement::GenericDevice;

/// One GPU of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuClaim {
    /// PCI bus id, as in `Topology::gpus`.
    pub bus_id: String,
    /// Where it came from.
    pub source: GpuSource,
    /// Whether that source may add devices, hold GPUs and refuse on error.
    pub authoritative: bool,
    /// Used shared (a MIG parent, a replica, a `.shared` resource, named only by the env)
    /// rather than held alone.
    pub shared: bool,
    /// The CDI name it came through, when it came through one.
    pub cdi_name: Option<String>,
    /// The DRA claim (`namespace/name`) whose CDI name gave it, when one did.
    pub dra_claim: Option<String>,
}

/// One RDMA NIC of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicClaim {
    /// Its name, as in `Topology::nics`.
    pub name: String,
    /// A CDI device or a `uverbsN` node of the spec: both authoritative.
    pub source: GpuSource,
    /// The CDI name it came through, when it came through one.
    pub cdi_name: Option<String>,
    /// The DRA claim whose CDI name gave it, when one did.
    pub dra_claim: Option<String>,
}

/// One generic device (a PCI function that is no GPU or RDMA NIC of the topology), always
/// from a CDI device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenericClaim {
    /// The device, named by its CDI name.
    pub device: GenericDevice,
    /// The DRA claim whose CDI name gave it, when one did.
    pub dra_claim: Option<String>,
}

/// What the spec and env of a container say about its devices, whatever this host's
/// topology: read even when a GPU reference is unknown (a running container is recorded all
/// the same).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecDevices {
    /// The GPU (`/dev/nvidiaN`) and RDMA (`/dev/infiniband/uverbsN`) device nodes of the
    /// spec: what the runtime gives whatever nri-align does, what a running container is
    /// recorded as seeing, and what an adjustment takes away when it is not chosen.
    pub nodes: Vec<DeviceNode>,
    /// Whether no NVIDIA device node, NVIDIA CDI name, resolved NVIDIA GPU or volume-mounts
    /// mount is in the spec: the runtime then gives the container no GPU of its own accord,
    /// and nri-align's env and nodes are all it gets.
    pub gpus_only_by_env: bool,
    /// Whether `NVIDIA_VISIBLE_DEVICES` names GPUs (set, and neither empty, `void` nor
    /// `none`).
    pub env_names_gpus: bool,
    /// Whether `NVIDIA_VISIBLE_DEVICES` names only MIG devices that the kubelet's answer or a
    /// CDI name of the spec allocated: the device plugin's own env, left as it is.
    pub env_allocated_mig: bool,
    /// The CDI names that resolved to devices (for the record, and to tell a claim shared
    /// with a sibling of the pod).
    pub cdi_names: Vec<String>,
    /// The DRA claim devices the kubelet listed (for the record, bounded like every list
    /// read from outside).
    pub dra_claims: Vec<KubeletClaimDevice>,
    /// The container paths of the device nodes the resolved CDI devices add: the runtime's to
    /// give as the spec says, so an adjustment never removes or replaces them.
    pub cdi_node_paths: Vec<String>,
    /// The CPU lists of the DRA CPU driver's claims (`DRA_CPUSET_<claim>=<list>`), taken from
    /// the env edits of the CDI devices the container was given by name (the CRI field,
    /// `cdi.k8s.io/` annotations, the kubelet's claims), never from the container's own env:
    /// a pod spec can carry any `DRA_CPUSET_` entry, and one matched back from that env alone
    /// proves nothing either.
    pub dra_cpusets: Vec<String>,
}

/// One container's devices, read once (see the module's words).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceClaims {
    /// Its GPUs: those held alone, then those used shared, each in the order its source
    /// named them.
    pub gpus: Vec<GpuClaim>,
    /// Its RDMA NICs.
    pub nics: Vec<NicClaim>,
    /// Its generic devices.
    pub generic: Vec<GenericClaim>,
    /// Where its GPUs came from, when any did (every GPU comes from the first source that
    /// names any).
    pub source: Option<GpuSource>,
    /// Whether the kubelet's PodResources answer named its GPUs and they reach it only
    /// through `NVIDIA_VISIBLE_DEVICES`, so that `remap` can move them by rewriting the
    /// variable and adding the chosen nodes.
    pub remappable: bool,
    /// What its spec and env say.
    pub spec: SpecDevices,
}

impl DeviceClaims {
    /// Whether GPU `bus_id` came through a CDI device the spec registry resolved: the runtime
    /// injects such a device as its spec says, so nri-align adds, removes and rewrites nothing
    /// of it (no node, no env). An NVIDIA device plugin's CDI name read by its name alone (no
    /// spec on this host) is the device plugin's GPU like any other.
    pub fn gpu_from_cdi(&self, bus_id: &str) -> bool {
        self.gpus
            .iter()
            .any(|g| g.bus_id == bus_id && self.resolved(g.cdi_name.as_deref()))
    }

    /// Whether NIC `name` came through a resolved CDI device (see [`DeviceClaims::gpu_from_cdi`]).
    pub fn nic_from_cdi(&self, name: &str) -> bool {
        self.nics
            .iter()
            .any(|n| n.name == name && self.resolved(n.cdi_name.as_deref()))
    }

    /// Whether `cdi_name` is one the spec registry resolved for the container.
    fn resolved(&self, cdi_name: Option<&str>) -> bool {
        cdi_name.is_some_and(|n| self.spec.cdi_names.iter().any(|r| r == n))
    }

    /// Whether any of its GPUs came through a resolved CDI device.
    pub fn any_gpu_from_cdi(&self) -> bool {
        self.gpus
            .iter()
            .any(|g| self.resolved(g.cdi_name.as_deref()))
    }

    /// The claims of `c` from what the readers found.
    pub(super) fn of(c: &ContainerView, found: &Found) -> Self {
        let spec = SpecDevices::read(c);
        let claim_of = |name: &Option<String>| {
            let name = name.as_deref()?;
            c.kubelet_claims
                .iter()
                .find(|k| k.cdi_names.iter().any(|n| n.trim() == name))
                .map(|k| k.claim.clone())
        };
        let via = |key: &str| {
            found
                .via
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, n)| n.clone())
        };
        let gpu = |bus: &String, shared: bool| {
            // Every GPU comes from the one source that named any.
            let source = found.source.unwrap_or(GpuSource::Env);
            let cdi_name = via(bus);
            GpuClaim {
                bus_id: bus.clone(),
                source,
                authoritative: source.is_authoritative(),
                shared,
                dra_claim: claim_of(&cdi_name),
                cdi_name,
            }
        };
        let gpus = (found.gpus.iter().map(|b| gpu(b, false)))
            .chain(found.shared_gpus.iter().map(|b| gpu(b, true)))
            .collect();
        let nics = found
            .nics
            .iter()
            .map(|n| {
                let cdi_name = via(n);
                NicClaim {
                    name: n.clone(),
                    source: if cdi_name.is_some() {
                        GpuSource::Cdi
                    } else {
                        GpuSource::DeviceNodes
                    },
                    dra_claim: claim_of(&cdi_name),
                    cdi_name,
                }
            })
            .collect();
        let generic = found
            .generic
            .iter()
            .map(|g| GenericClaim {
                dra_claim: claim_of(&Some(g.name.clone())),
                device: g.clone(),
            })
            .collect();
        // Only the kubelet's own answer allows a remap: a remap moves a container off the GPU
        // the kubelet gave it onto one the kubelet believes free, which is safe only while
        // nri-align sees every such allocation through PodResources. Without that answer
        // (timed out, in backoff, absent) the env's GPUs are kept, never moved, and never
        // moved onto.
        let remappable = found.source == Some(GpuSource::Kubelet) && spec.gpus_only_by_env;
        DeviceClaims {
            gpus,
            nics,
            generic,
            source: found.source,
            remappable,
            spec,
        }
    }

    /// The bus ids of the GPUs held alone, in order.
    pub fn held_gpus(&self) -> Vec<String> {
        self.gpus_where(false)
    }

    /// The bus ids of the GPUs used shared, in order.
    pub fn shared_gpus(&self) -> Vec<String> {
        self.gpus_where(true)
    }

    fn gpus_where(&self, shared: bool) -> Vec<String> {
        self.gpus
            .iter()
            .filter(|g| g.shared == shared)
            .map(|g| g.bus_id.clone())
            .collect()
    }

    /// Whether the spec already carries GPU or RDMA device nodes (which no remap can take
    /// away: runtimes drop an adjustment's removal of a device of the original spec).
    pub fn has_spec_nodes(&self) -> bool {
        !self.spec.nodes.is_empty()
    }
}

impl SpecDevices {
    /// Reads what the spec and env of `c` say about its devices.
    pub fn read(c: &ContainerView) -> Self {
        let env_names_gpus = c
            .env_var(VISIBLE_DEVICES_ENV)
            .is_some_and(|v| !matches!(v.trim(), "" | "void" | "none"));
        SpecDevices {
            nodes: c
                .devices
                .iter()
                .filter(|d| is_gpu_or_rdma_node(&d.path))
                .cloned()
                .collect(),
            gpus_only_by_env: gpus_reach_only_by_env(c),
            env_names_gpus,
            env_allocated_mig: env_is_allocated_mig(c),
            cdi_names: c.cdi_resolved.iter().map(|d| d.name.clone()).collect(),
            dra_claims: c
                .kubelet_claims
                .iter()
                .take(k8s_devices::MAX_ENTRIES)
                .cloned()
                .collect(),
            dra_cpusets: dra_cpusets(c),
            cdi_node_paths: {
                let mut paths: Vec<String> = c
                    .cdi_resolved
                    .iter()
                    .flat_map(|d| d.nodes.iter().map(|n| n.path.clone()))
                    .take(k8s_devices::MAX_ENTRIES)
                    .collect();
                paths.sort_unstable();
                paths.dedup();
                paths
            },
        }
    }

    /// The paths of [`SpecDevices::nodes`].
    pub fn node_paths(&self) -> Vec<String> {
        self.nodes.iter().map(|d| d.path.clone()).collect()
    }
}

/// The prefix of the DRA CPU driver's per-claim env entries: kubernetes-sigs/dra-driver-cpu
/// writes one CDI spec (`/var/run/cdi/<driver>.json`, kind `dra.k8s.io/cpu`) with a device per
/// claim whose only edit is the env entry `DRA_CPUSET_<claim uid>=<cpu list>`
/// (`pkg/driver/cdi.go`); the kubelet hands the container that device's CDI name.
pub const DRA_CPUSET_PREFIX: &str = "DRA_CPUSET_";

/// The CPU lists of the `DRA_CPUSET_` entries that named, resolved CDI devices of `c` add.
fn dra_cpusets(c: &ContainerView) -> Vec<String> {
    // Most containers have no CDI device: no name set to build on their create.
    if c.cdi_resolved.is_empty() {
        return Vec::new();
    }
    let matched_back = super::cdi::matched_back(c);
    c.cdi_resolved
        .iter()
        .filter(|d| !matched_back.contains(&d.name.as_str()))
        .flat_map(|d| d.env.iter())
        .filter_map(|e| {
            let (key, value) = e.split_once('=')?;
            let claim = key.strip_prefix(DRA_CPUSET_PREFIX)?;
            (!claim.is_empty()).then(|| value.to_string())
        })
        .take(k8s_devices::MAX_ENTRIES)
        .collect()
}

/// Whether `path` is a GPU (`/dev/nvidiaN`) or RDMA (`/dev/infiniband/uverbsN`) node.
fn is_gpu_or_rdma_node(path: &str) -> bool {
    matches!(
        nvidia::parse_device_node(path),
        Some(nvidia::NvidiaNode::Gpu(_))
    ) || crate::host::devices::uverbs_name(path).is_some()
}

/// Whether no NVIDIA device node, NVIDIA CDI name or volume-mounts mount is in the spec: the
/// runtime then gives the container no GPU of its own accord, and nri-align's env and nodes
/// are all it gets.
fn gpus_reach_only_by_env(c: &ContainerView) -> bool {
    let nodes = c
        .devices
        .iter()
        .any(|d| nvidia::parse_device_node(&d.path).is_some_and(|n| !n.is_control()));
    let is_nvidia = |n: &str| nvidia::split_cdi_name(n.trim()).is_some();
    // A resolved spec of any vendor that gives an NVIDIA GPU node (the DRA driver's claims).
    let resolved = c.cdi_resolved.iter().any(|d| {
        d.targets
            .iter()
            .any(|t| matches!(t, CdiTarget::NvidiaGpu { .. }))
    });
    let cdi = c.cdi_devices.iter().any(|n| is_nvidia(n))
        || c.annotations.iter().any(|(k, v)| {
            k.starts_with(k8s_devices::cdi::ANNOTATION_PREFIX) && v.split(',').any(is_nvidia)
        });
    let mounts = c
        .mounts
        .iter()
        .any(|m| nvidia::parse_volume_mount(&m.destination).is_some());
    !(nodes || cdi || mounts || resolved)
}

/// Whether `NVIDIA_VISIBLE_DEVICES` names only MIG devices that an authoritative source (the
/// kubelet's PodResources answer or a CDI device name of the spec) allocated to `c`. Such an env
/// is the device plugin's own answer, whatever nri-align could map; an env naming anything
/// else, or a MIG device no such source names, is not: the pod's own env could say anything.
fn env_is_allocated_mig(c: &ContainerView) -> bool {
    let Ok(VisibleDevices::List(list)) =
        nvidia::parse_visible_devices(c.env_var(VISIBLE_DEVICES_ENV))
    else {
        return false;
    };
    let kubelet = c
        .kubelet_devices
        .iter()
        .flatten()
        .flat_map(|r| r.ids.iter().map(|id| nvidia::split_replica_id(id).0));
    let cdi = c
        .cdi_devices
        .iter()
        .filter_map(|n| nvidia::split_cdi_name(n))
        .map(|(_, name)| name);
    let allocated: Vec<&str> = kubelet.chain(cdi).collect();
    !list.is_empty()
        && list.iter().all(|r| {
            let id = r.to_string();
            r.is_mig() && allocated.iter().any(|a| a.eq_ignore_ascii_case(&id))
        })
}

#[cfg(test)]
#[path = "claims_tests.rs"]
mod tests;
