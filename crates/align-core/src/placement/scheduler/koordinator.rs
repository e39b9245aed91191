//! Koordinator's placement annotations, as koord-scheduler writes them before binding.
//!
//! The shapes model, field for field, `ResourceStatus`/`NUMANodeResource` of
//! koordinator-sh/koordinator `apis/extension/numa_aware.go` and `DeviceAllocations`/
//! `DeviceAllocation`/`DeviceAllocationExtension`/`VirtualFunction` of
//! `apis/extension/device_share.go`. Fields those files do not have are ignored, as Go's
//! decoder does (older releases wrote `cpuSharedPools` into the same annotation); the fields
//! they do have are typed strictly: a wrong type, a negative minor or node, a malformed cpuset
//! or PCI address refuses the container instead of placing it somewhere the scheduler did not
//! say.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{
    invalid, is_pci_bus_id, json, node_id, value, Scheduler, SchedulerChoice, MAX_ENTRIES,
};
use crate::placement::error::PlacementError;
use crate::topology::CpuSet;

/// `AnnotationResourceStatus` (`SchedulingDomainPrefix + "/resource-status"`).
pub const RESOURCE_STATUS: &str = "scheduling.koordinator.sh/resource-status";

/// `AnnotationDeviceAllocated` (`SchedulingDomainPrefix + "/device-allocated"`).
pub const DEVICE_ALLOCATED: &str = "scheduling.koordinator.sh/device-allocated";

/// Koordinator's `koordinator.sh/gpu-core` resource: 100 is a whole GPU.
const GPU_CORE: &str = "koordinator.sh/gpu-core";

/// `ResourceStatus` of `numa_aware.go`.
#[derive(Debug, Deserialize)]
struct ResourceStatus {
    /// `CPUSet string json:"cpuset,omitempty"`: a Linux CPU list.
    #[serde(default)]
    cpuset: String,
    /// `NUMANodeResources []NUMANodeResource json:"numaNodeResources,omitempty"`.
    #[serde(default, rename = "numaNodeResources")]
    numa_node_resources: Option<Vec<NumaNodeResource>>,
}

/// `NUMANodeResource` of `numa_aware.go`.
#[derive(Debug, Deserialize)]
struct NumaNodeResource {
    /// `Node int32 json:"node"`.
    node: i64,
    /// `Resources corev1.ResourceList json:"resources,omitempty"`.
    #[serde(default)]
    resources: Option<BTreeMap<String, Quantity>>,
}

/// A `resource.Quantity` in JSON: a string (`"8Gi"`), or a number, which its decoder also
/// accepts (the device annotation's own example writes `100`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Quantity {
    Text(String),
    Number(serde_json::Number),
}

impl Quantity {
    /// An integer value (`100`, `"100"`), `None` for any other form.
    fn integer(&self) -> Option<i64> {
        match self {
            Quantity::Text(s) => s.trim().parse().ok(),
            Quantity::Number(n) => n.as_i64(),
        }
    }
}

/// `DeviceAllocation` of `device_share.go`.
#[derive(Debug, Deserialize)]
struct DeviceAllocation {
    /// `Minor int32 json:"minor"`.
    minor: i64,
    /// `Resources corev1.ResourceList json:"resources"`.
    #[serde(default)]
    resources: Option<BTreeMap<String, Quantity>>,
    /// `ID string json:"id,omitempty"`: the PCI address for RDMA.
    #[serde(default)]
    id: String,
    /// `Extension *DeviceAllocationExtension json:"extension,omitempty"`.
    #[serde(default)]
    extension: Option<Extension>,
}

/// `DeviceAllocationExtension` of `device_share.go`.
#[derive(Debug, Deserialize)]
struct Extension {
    /// `VirtualFunctions []VirtualFunction json:"vfs,omitempty"`.
    #[serde(default)]
    vfs: Option<Vec<VirtualFunction>>,
}

/// `VirtualFunction` of `device_share.go`.
#[derive(Debug, Deserialize)]
struct VirtualFunction {
    /// `Minor int json:"minor,omitempty"` (unused: VFs are named by bus id).
    #[serde(default)]
    #[allow(dead_code)]
    minor: i64,
    /// `BusID string json:"busID,omitempty"`.
    #[serde(default, rename = "busID")]
    bus_id: String,
}

/// Koordinator's choice from `annotations`: `None` when neither annotation is there.
pub(super) fn read(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<SchedulerChoice>, PlacementError> {
    let status = value(annotations, RESOURCE_STATUS)?;
    let devices = value(annotations, DEVICE_ALLOCATED)?;
    if status.is_none() && devices.is_none() {
        return Ok(None);
    }
    let mut choice = SchedulerChoice::new(Scheduler::Koordinator);
    if let Some(v) = status {
        read_status(v, &mut choice)?;
    }
    if let Some(v) = devices {
        read_devices(v, &mut choice)?;
    }
    Ok(Some(choice))
}

fn read_status(v: &str, choice: &mut SchedulerChoice) -> Result<(), PlacementError> {
    let key = RESOURCE_STATUS;
    let status: ResourceStatus = json(key, v)?;
    if !status.cpuset.trim().is_empty() {
        let cpus = CpuSet::parse_list(status.cpuset.trim())
            .map_err(|e| invalid(key, v, format!("cpuset: {e}")))?;
        choice.cpus = Some(cpus);
    }
    let nodes = status.numa_node_resources.unwrap_or_default();
    if nodes.len() > MAX_ENTRIES {
        return Err(invalid(
            key,
            v,
            format!("{} NUMA nodes listed; at most {MAX_ENTRIES}", nodes.len()),
        ));
    }
    for n in &nodes {
        let id = node_id(key, v, n.node)?;
        if choice.nodes.contains(id) {
            return Err(invalid(key, v, format!("NUMA node {id} is listed twice")));
        }
        if n.resources.as_ref().is_some_and(|r| r.len() > MAX_ENTRIES) {
            return Err(invalid(
                key,
                v,
                format!("NUMA node {id} lists too many resources"),
            ));
        }
        choice.nodes.insert(id);
    }
    Ok(())
}

fn read_devices(v: &str, choice: &mut SchedulerChoice) -> Result<(), PlacementError> {
    let key = DEVICE_ALLOCATED;
    // `DeviceAllocations map[DeviceType][]*DeviceAllocation`; a null entry is no allocation.
    let all: BTreeMap<String, Option<Vec<Option<DeviceAllocation>>>> = json(key, v)?;
    if all.len() > MAX_ENTRIES {
        return Err(invalid(key, v, "too many device types"));
    }
    for (kind, list) in &all {
        let list = list.as_deref().unwrap_or_default();
        if list.len() > MAX_ENTRIES {
            return Err(invalid(
                key,
                v,
                format!("{} {kind} devices; at most {MAX_ENTRIES}", list.len()),
            ));
        }
        for d in list.iter().flatten() {
            match kind.as_str() {
                "gpu" => gpu(key, v, d, choice)?,
                "rdma" => rdma(key, v, d, choice)?,
                // FPGAs, NPUs and other kinds: nri-align neither models nor holds them.
                _ => {}
            }
        }
    }
    Ok(())
}

fn gpu(
    key: &str,
    v: &str,
    d: &DeviceAllocation,
    choice: &mut SchedulerChoice,
) -> Result<(), PlacementError> {
    let minor = u32::try_from(d.minor)
        .ok()
        .filter(|m| *m < 256)
        .ok_or_else(|| {
            invalid(
                key,
                v,
                format!("GPU minor {} is not from 0 to 255", d.minor),
            )
        })?;
    // A GPU given in part (gpu-core under 100) is shared with other pods: aligned to, not held.
    let core = d
        .resources
        .as_ref()
        .and_then(|r| r.get(GPU_CORE))
        .map(|q| {
            q.integer()
                .filter(|c| (0..=100).contains(c))
                .ok_or_else(|| {
                    invalid(
                        key,
                        v,
                        format!("{GPU_CORE} of GPU minor {minor} is not from 0 to 100"),
                    )
                })
        })
        .transpose()?;
    let list = if core.is_some_and(|c| c < 100) {
        &mut choice.shared_gpu_minors
    } else {
        &mut choice.gpu_minors
    };
    if !list.contains(&minor) {
        list.push(minor);
    }
    Ok(())
}

fn rdma(
    key: &str,
    v: &str,
    d: &DeviceAllocation,
    choice: &mut SchedulerChoice,
) -> Result<(), PlacementError> {
    let id = d.id.trim().to_ascii_lowercase();
    if !is_pci_bus_id(&id) {
        return Err(invalid(
            key,
            v,
            format!(
                "RDMA minor {}: id {:?} is not a PCI address (0000:09:00.0)",
                d.minor,
                crate::untrusted::excerpt(&d.id)
            ),
        ));
    }
    if !choice.rdma.contains(&id) {
        choice.rdma.push(id.clone());
    }
    let vfs = d
        .extension
        .as_ref()
        .and_then(|e| e.vfs.as_deref())
        .unwrap_or_default();
    if choice.vfs.len() + vfs.len() > MAX_ENTRIES {
        return Err(invalid(key, v, format!("more than {MAX_ENTRIES} VFs")));
    }
    for vf in vfs {
        let bus = vf.bus_id.trim().to_ascii_lowercase();
        if !is_pci_bus_id(&bus) {
            return Err(invalid(
                key,
                v,
                format!(
                    "a VF of RDMA {id}: busID {:?} is not a PCI address",
                    crate::untrusted::excerpt(&vf.bus_id)
                ),
            ));
        }
        if !choice.vfs.contains(&bus) {
            choice.vfs.push(bus);
        }
    }
    Ok(())
}
