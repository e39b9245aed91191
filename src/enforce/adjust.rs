//! From a placement decision to what the runtime must change: the adjustment of the container
//! being created (cpuset, device nodes with their cgroup rules, env, decision record) and the
//! cpuset-only updates that move shared-pool containers when the pool changes.
//!
//! Why a shared-pool update carries only cpuset fields: NRI turns a `ContainerUpdate` into a
//! resource update of the existing spec (containerd converts it to CRI resources, which have no
//! device field, patches those fields into a copy of the spec and hands the whole
//! `linux.resources`, device rules included, to the shim). An update that sets only
//! `cpu.cpus` therefore leaves the device rules as they are. Sending device rules in an update
//! would be the risky choice: they are "NRI v1 emulation" fields that runtimes ignore or could
//! apply as a replacement list.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::placement::Assignment;
use crate::topology::{CpuSet, Gpu, NodeSet, Topology};

use crate::enforce::container::{ContainerView, DeviceNode, DeviceRule};
use crate::enforce::inputs::DeviceClaims;
use crate::host::devices::DeviceLookup;

/// Annotation and env entry that record the decision.
pub const DECISION_KEY: &str = "nri-align.io/decision";
/// Env var carrying the decision inside the container.
pub const DECISION_ENV: &str = "NRI_ALIGN_DECISION";
/// Env var with each GPU's CPUs, `ORD:CPULIST;...` by CUDA ordinal.
pub const GPU_CPUS_ENV: &str = "NRI_ALIGN_GPU_CPUS";
/// Env var with each GPU's memory nodes, `ORD:NODELIST;...`.
pub const GPU_MEMS_ENV: &str = "NRI_ALIGN_GPU_MEMS";
/// Env var with each NIC's CPUs, `NAME:CPULIST;...`.
pub const NIC_CPUS_ENV: &str = "NRI_ALIGN_NIC_CPUS";
/// NVIDIA control nodes added with any GPU, when the host has them.
pub const NVIDIA_CONTROL_NODES: [&str; 3] =
    ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"];
/// RDMA connection manager node added with any RDMA NIC, when the host has it.
pub const RDMA_CM: &str = "/dev/infiniband/rdma_cm";

/// The adjustment for one container, in runtime-neutral form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Adjustment {
    /// cpuset.cpus; empty: not set (the cpuset is left as it is). Text only at the wire
    /// (`nri/convert.rs`).
    #[serde(serialize_with = "crate::topology::idset::serialize_as_list")]
    pub cpuset_cpus: CpuSet,
    /// cpuset.mems; empty: not set.
    #[serde(serialize_with = "crate::topology::idset::serialize_as_list")]
    pub cpuset_mems: NodeSet,
    /// Device nodes to add.
    pub add_devices: Vec<DeviceNode>,
    /// Device-cgroup rules to append (allow for added nodes, deny for removed ones).
    pub device_rules: Vec<DeviceRule>,
    /// Container paths of device nodes to remove (sent as `-PATH`).
    pub remove_devices: Vec<String>,
    /// GPU and RDMA device nodes the container will see (for the record `verify` checks).
    pub visible_devices: Vec<String>,
    /// Environment to set.
    pub env: BTreeMap<String, String>,
    /// Annotations to set.
    pub annotations: BTreeMap<String, String>,
    /// The memory policy the container starts with; `None`: the kernel's default. Left out
    /// by the engine for a runtime whose NRI cannot carry it.
    pub memory_policy: Option<crate::placement::MemoryPolicy>,
    /// The CFS quota (`cpu.quota`, microseconds; `-1`: none); `None`: the kubelet's stays.
    /// Set by the engine for exclusive CPUs (`enforce/engine/quota.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_quota: Option<i64>,
}

/// A cpuset-only update of another container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpusetUpdate {
    /// Container id.
    pub container_id: String,
    /// New cpuset.cpus.
    pub cpus: CpuSet,
}

impl CpusetUpdate {
    /// The update moving container `id` from `before` to `now`, none when they are the same
    /// (a re-placement that lands where the container already is sends nothing).
    pub fn if_moved(id: &str, now: &CpuSet, before: &CpuSet) -> Option<Self> {
        (now != before).then(|| Self {
            container_id: id.to_owned(),
            cpus: now.clone(),
        })
    }
}

/// A `cpuset.mems`-only update of a container whose CPUs another plugin set: its memory
/// nodes follow the CPUs it got, and nothing it does not own is touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemsUpdate {
    /// Container id.
    pub container_id: String,
    /// New cpuset.mems.
    pub mems: NodeSet,
}

/// A decision that cannot be turned into devices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdjustError {
    /// A chosen GPU is not in the topology, or has no minor number.
    #[error("chosen GPU {0} has no /dev/nvidiaN node in the topology")]
    GpuWithoutNode(String),
    /// A chosen GPU's device node is missing on the host.
    #[error("device node {0} of a chosen device is missing on the host")]
    MissingNode(String),
}

/// One-line decision record (env and annotation), with the per-device map when there is one.
pub fn decision_record(a: &Assignment) -> String {
    let mut record = format!(
        "policy={} cpus={} exclusive={} mems={} nodes={} gpus={} nics={} aligned={}",
        a.policy,
        a.cpus,
        a.exclusive,
        a.mems,
        a.numa_nodes,
        a.gpus.join(","),
        a.nics.join(","),
        a.aligned
    );
    let map = &a.device_map;
    if !map.gpus.is_empty() {
        record.push_str(&format!(
            " gpu_cpus={} gpu_mems={}",
            map.gpu_cpus(),
            map.gpu_mems()
        ));
    }
    if !map.nics.is_empty() {
        record.push_str(&format!(" nic_cpus={}", map.nic_cpus()));
    }
    record
}

/// The per-device map's env entries (see `placement::device_map`): one per kind of device the
/// container was given.
fn set_device_map_env(adj: &mut Adjustment, a: &Assignment) {
    let map = &a.device_map;
    if !map.gpus.is_empty() {
        adj.env.insert(GPU_CPUS_ENV.into(), map.gpu_cpus());
        adj.env.insert(GPU_MEMS_ENV.into(), map.gpu_mems());
    }
    if !map.nics.is_empty() {
        adj.env.insert(NIC_CPUS_ENV.into(), map.nic_cpus());
    }
}

/// Builds the adjustment of container `c` (whose devices `claims` read) for decision `a`: the
/// cpuset, then the device nodes the decision adds (with their cgroup rules) and those it
/// takes away, then the GPU env and the decision record.
pub fn build_adjustment(
    a: &Assignment,
    topo: &Topology,
    c: &ContainerView,
    claims: &DeviceClaims,
    devs: &dyn DeviceLookup,
) -> Result<Adjustment, AdjustError> {
    let mut adj = Adjustment {
        cpuset_cpus: a.cpus.clone(),
        cpuset_mems: a.mems.clone(),
        memory_policy: a.mempolicy.clone(),
        ..Default::default()
    };
    // A device that came through CDI is the runtime's to inject as its spec says (its nodes
    // at the spec's container paths, its env): nri-align adds, removes and rewrites nothing
    // of it, and aligns to it all the same.
    let chosen = chosen_gpus(a, topo)?;
    let given: Vec<&Gpu> = chosen
        .iter()
        .copied()
        .filter(|g| !claims.gpu_from_cdi(&g.pci_bus_id))
        .collect();
    let (wanted, optional) = wanted_nodes(a, topo, &given, claims)?;
    let shared_nodes = shared_gpu_nodes(a, topo, claims, &wanted);
    let cdi_nodes = claims
        .spec
        .nodes
        .iter()
        .map(|d| &d.path)
        .filter(|p| claims.spec.cdi_node_paths.contains(p) && !wanted.contains(p));
    adj.visible_devices = wanted
        .iter()
        .chain(&shared_nodes)
        .chain(cdi_nodes)
        .cloned()
        .collect();
    add_nodes(&mut adj, c, devs, &wanted, &optional)?;
    remove_unchosen(&mut adj, claims, &wanted, &shared_nodes);
    if !claims.any_gpu_from_cdi() {
        set_gpu_env(&mut adj, a, claims, &chosen);
    }
    set_device_map_env(&mut adj, a);
    let record = decision_record(a);
    adj.env.insert(DECISION_ENV.into(), record.clone());
    adj.annotations.insert(DECISION_KEY.into(), record);
    Ok(adj)
}

/// The chosen GPUs in topology (index) order, which is the order CUDA enumerates them in; a
/// chosen GPU the topology does not have is an error.
fn chosen_gpus<'t>(a: &Assignment, topo: &'t Topology) -> Result<Vec<&'t Gpu>, AdjustError> {
    let mut chosen: Vec<_> = topo
        .gpus
        .iter()
        .filter(|g| a.gpus.contains(&g.pci_bus_id))
        .collect();
    chosen.sort_by_key(|g| g.index);
    if let Some(missing) = a
        .gpus
        .iter()
        .find(|b| !chosen.iter().any(|g| &&g.pci_bus_id == b))
    {
        return Err(AdjustError::GpuWithoutNode(missing.clone()));
    }
    Ok(chosen)
}

/// The device nodes the decision needs (`/dev/nvidiaN` of the chosen GPUs, every uverbs node
/// of the chosen NICs) and those added only where the host has them (the NVIDIA control
/// nodes with any GPU, `rdma_cm` with any RDMA node).
fn wanted_nodes(
    a: &Assignment,
    topo: &Topology,
    chosen: &[&Gpu],
    claims: &DeviceClaims,
) -> Result<(Vec<String>, Vec<&'static str>), AdjustError> {
    let mut wanted: Vec<String> = Vec::new();
    for g in chosen {
        let minor = g
            .minor
            .ok_or_else(|| AdjustError::GpuWithoutNode(g.pci_bus_id.clone()))?;
        wanted.push(format!("/dev/nvidia{minor}"));
    }
    let mut optional: Vec<&'static str> = Vec::new();
    if !chosen.is_empty() {
        optional.extend(NVIDIA_CONTROL_NODES);
    }
    // RDMA: every uverbs node of the chosen NICs, plus rdma_cm.
    let mut any_rdma = false;
    let given =
        |n: &&crate::topology::Nic| a.nics.contains(&n.name) && !claims.nic_from_cdi(&n.name);
    for nic in topo.nics.iter().filter(given) {
        wanted.extend(nic.uverbs.iter().map(|u| format!("/dev/infiniband/{u}")));
        any_rdma |= !nic.uverbs.is_empty();
    }
    if any_rdma {
        optional.push(RDMA_CM);
    }
    Ok((wanted, optional))
}

/// GPUs used shared (replicas of a time-sliced GPU, MIG parents) that arrive as device nodes
/// are the device plugin's: they stay, and the container sees them beside the chosen ones.
fn shared_gpu_nodes(
    a: &Assignment,
    topo: &Topology,
    claims: &DeviceClaims,
    wanted: &[String],
) -> Vec<String> {
    topo.gpus
        .iter()
        .filter(|g| a.shared_gpus.contains(&g.pci_bus_id))
        .filter_map(|g| g.minor)
        .map(|m| format!("/dev/nvidia{m}"))
        .filter(|p| claims.spec.nodes.iter().any(|d| &d.path == p) && !wanted.contains(p))
        .collect()
}

/// Whether the spec of `c` already has the device node `path`.
fn in_spec(c: &ContainerView, path: &str) -> bool {
    c.devices.iter().any(|d| d.path == path)
}

/// Adds every wanted node (one the host lacks is an error) and the optional ones the host has.
fn add_nodes(
    adj: &mut Adjustment,
    c: &ContainerView,
    devs: &dyn DeviceLookup,
    wanted: &[String],
    optional: &[&str],
) -> Result<(), AdjustError> {
    for path in wanted {
        let node = devs
            .lookup(path)
            .ok_or_else(|| AdjustError::MissingNode(path.clone()))?;
        add_node(adj, node, in_spec(c, path));
    }
    for path in optional {
        if let Some(node) = devs.lookup(path) {
            add_node(adj, node, in_spec(c, path));
        }
    }
    Ok(())
}

/// Allocated but not chosen (remap mode): remove the node and deny its cgroup access.
/// Runtimes up to NRI v0.12 apply neither to a device of the original spec (removals of
/// such devices are dropped, adjustment device rules ignored: containerd/nri#216), so the
/// engine never remaps GPUs that arrive as device nodes; this only matters for runtimes
/// that honour both.
fn remove_unchosen(
    adj: &mut Adjustment,
    claims: &DeviceClaims,
    wanted: &[String],
    shared_nodes: &[String],
) {
    // The spec's GPU and RDMA nodes, as `inputs` read them; a CDI device's are the runtime's.
    for d in &claims.spec.nodes {
        let cdi = claims.spec.cdi_node_paths.contains(&d.path);
        if !cdi && !wanted.contains(&d.path) && !shared_nodes.contains(&d.path) {
            adj.remove_devices.push(d.path.clone());
            adj.device_rules.push(DeviceRule {
                allow: false,
                kind: d.kind.clone(),
                major: Some(d.major),
                minor: Some(d.minor),
                access: "rwm".into(),
            });
        }
    }
}

/// `CUDA_VISIBLE_DEVICES` and `NVIDIA_VISIBLE_DEVICES` for the chosen GPUs.
///
/// GPUs used shared (MIG parents, replicas, GPUs only the env named) are the runtime's and
/// the device plugin's to give: their env and nodes stay as they are. Otherwise a container
/// that names GPUs in its env without holding any (`all` from a CUDA base image) sees none:
/// only an authoritative allocation ever adds a device, since the pod's own env could name any.
/// A MIG device the kubelet or CDI gave that NVML does not list (reconfigured since start-up)
/// was placed without alignment, fail open: the container keeps it.
///
/// Whether the env names GPUs, and whether those are MIG devices an authoritative source
/// allocated (`SpecDevices::env_allocated_mig`), `inputs` read once.
fn set_gpu_env(adj: &mut Adjustment, a: &Assignment, claims: &DeviceClaims, chosen: &[&Gpu]) {
    let env = &claims.spec;
    let env_names_gpus = env.env_names_gpus && !env.env_allocated_mig;
    if chosen.is_empty() && !(a.shared_gpus.is_empty() && env_names_gpus) {
        return;
    }
    // Inside the container only the chosen nodes exist, so CUDA numbers them 0..n-1.
    let cuda: Vec<String> = (0..chosen.len()).map(|i| i.to_string()).collect();
    let nvidia: Vec<String> = chosen
        .iter()
        .map(|g| g.uuid.clone().unwrap_or_else(|| g.index.to_string()))
        .collect();
    let or_none = |v: Vec<String>| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(",")
        }
    };
    adj.env.insert("CUDA_VISIBLE_DEVICES".into(), or_none(cuda));
    adj.env
        .insert("NVIDIA_VISIBLE_DEVICES".into(), or_none(nvidia));
}

fn add_node(adj: &mut Adjustment, node: DeviceNode, already_in_spec: bool) {
    adj.device_rules.push(DeviceRule {
        allow: true,
        kind: node.kind.clone(),
        major: Some(node.major),
        minor: Some(node.minor),
        access: "rwm".into(),
    });
    // Re-adding a node the spec already has would be a conflicting edit; its rule is enough.
    if !already_in_spec {
        adj.add_devices.push(node);
    }
}

#[cfg(test)]
#[path = "adjust_tests.rs"]
mod tests;
