//! Which GPUs and RDMA NICs a container was given, read from the sources a Kubernetes node
//! really uses, in order of authority:
//!
//! 1. the kubelet's PodResources answer for the container (`ContainerView::kubelet_devices`);
//! 2. CDI devices: the CRI `CDI_devices` field, `cdi.k8s.io/` annotations and the kubelet's
//!    DRA claims, resolved through the CDI spec registry where it knows them (`cdi.rs`);
//! 3. device nodes in the spec (`/dev/nvidiaN`, `uverbsN`) and the volume-mounts strategy's
//!    `/var/run/nvidia-container-devices/<id>` mounts;
//! 4. `NVIDIA_VISIBLE_DEVICES` lists of indices or UUIDs, only when the kubelet was not asked
//!    or did not answer.
//!
//! The first three are authoritative: the kubelet or the device plugin put them there, and the
//! runtime gives the container those devices whatever nri-align does. A GPU they name that the
//! host does not have is an error (the container would use a device nri-align cannot align).
//! The environment is not: the pod's own `env` overrides the device plugin's (the kubelet puts
//! the plugin's first), and CUDA base images set `NVIDIA_VISIBLE_DEVICES=all` in their ENV. So
//! GPUs named only there are aligned to as shared GPUs (never held alone, remapped, or given
//! device nodes), and what cannot be read there is noted, never refused. `all`, `none`,
//! `void`, empty and `CUDA_VISIBLE_DEVICES` in any form are never allocations.
//!
//! A GPU is used *shared* rather than held alone when it is the parent of a MIG device, when
//! the kubelet reports a replica id (`<uuid>::<n>`, time-slicing or MPS) or a `.shared`
//! resource, and when only the environment names it.

use k8s_devices::nvidia::{self, MountedDevice, NvidiaNode, VisibleDevices, VISIBLE_DEVICES_ENV};
use k8s_devices::rdma;

use super::found::{resolve_ref, unknown_gpu, Found, GpuSource, Resolved};
use super::RequestError;
use crate::enforce::container::{ContainerView, KubeletDevices};
use crate::topology::Topology;

/// Reads the GPUs and NICs of `c` on `topo`. `Err` only for an authoritative source that
/// names a GPU this host does not have. `trust_env`: the node administrator vouches that no
/// pod can set `NVIDIA_VISIBLE_DEVICES` itself (config `trust_visible_devices_env`), so its
/// lists are allocations like the other sources'.
///
/// The sources are read in order of authority, and the GPUs of the first one that names any
/// are the container's (each later source only adds its RDMA NICs and notes):
///
/// 1. the kubelet's PodResources answer (`kubelet_gpus`): the kubelet's own record of what
///    it allocated, so nothing the runtime was handed can say otherwise;
/// 2. CDI device names, from the CRI field and the `cdi.k8s.io/` annotations (`cdi_devices`):
///    what the device plugin asked the runtime to inject, which it injects whatever nri-align
///    does;
/// 3. device nodes in the spec (`node_devices`), then the volume-mounts strategy's mounts
///    (`mounted_gpus`, read only while no GPU is known): the device plugin's older ways of
///    handing devices over, equally out of nri-align's hands;
/// 4. `NVIDIA_VISIBLE_DEVICES` (`env_gpus`), only when no source above named a GPU and the
///    kubelet was not asked: the pod's own env can set it, so it is no allocation unless
///    `trust_env` says so.
///
/// An error of an authoritative source ends the reading at once, whatever an earlier source
/// found: the container would use a device nri-align cannot align.
pub fn find(topo: &Topology, c: &ContainerView, trust_env: bool) -> Result<Found, RequestError> {
    let mut f = Found::default();
    kubelet_gpus(topo, c, &mut f)?;
    let cdi = super::cdi::cdi_devices(topo, c, &mut f)?;
    f.adopt(cdi, GpuSource::Cdi);
    if super::privileged::privileged_shaped(topo, c) {
        // Every host device is in its spec: none of them was allocated to it.
        f.note(
            "device nodes",
            "a privileged container's: it is given every host device, none is held",
        );
    } else {
        let nodes = node_devices(topo, c, &mut f)?;
        f.adopt(nodes, GpuSource::DeviceNodes);
    }
    if !f.any_gpu() {
        let mounted = mounted_gpus(topo, c, &mut f)?;
        f.adopt(mounted, GpuSource::VolumeMounts);
    }
    if !f.any_gpu() && c.kubelet_devices.is_none() {
        env_gpus(topo, c, &mut f, trust_env);
    }
    Ok(f)
}

/// Source 1: the GPUs of the kubelet's PodResources answer (RDMA resources are not GPUs), into `f`.
fn kubelet_gpus(topo: &Topology, c: &ContainerView, f: &mut Found) -> Result<(), RequestError> {
    let Some(kd) = &c.kubelet_devices else {
        return Ok(());
    };
    for res in kd.iter().filter(|r| !rdma::is_rdma_resource(&r.resource)) {
        let shared_resource = res.resource.ends_with(".shared");
        for id in &res.ids {
            let (device, replica) = nvidia::split_replica_id(id);
            let origin = format!("kubelet PodResources {}", res.resource);
            let Ok(r) = nvidia::parse_gpu_ref(device) else {
                f.note(origin, format!("device id {id:?} is no NVIDIA id"));
                continue;
            };
            match resolve_ref(topo, &r) {
                Resolved::Whole(b) => f.push(&b, shared_resource || replica.is_some()),
                Resolved::MigParent(b) => f.push(&b, true),
                Resolved::MigUnknownParent => {
                    // The kubelet's answer holds no parent; another source may name it.
                    f.note(
                        origin,
                        format!("MIG device {id}: parent GPU not named by its id"),
                    )
                }
                Resolved::Unknown => return Err(unknown_gpu(c, &origin, id)),
            }
        }
    }
    if f.any_gpu() {
        f.source = Some(GpuSource::Kubelet);
    }
    Ok(())
}

/// The GPUs (indices in `topo.gpus`) that the kubelet's allocatable devices name whole: an
/// id of a GPU resource that is neither a replica (`GPU-x::3`) nor of a `.shared` resource nor
/// a MIG device. Ids this host does not have are left out.
pub fn allocatable_gpus(
    topo: &Topology,
    allocatable: &[KubeletDevices],
) -> std::collections::BTreeSet<usize> {
    let mut out = std::collections::BTreeSet::new();
    let whole = allocatable
        .iter()
        .filter(|r| !rdma::is_rdma_resource(&r.resource) && !r.resource.ends_with(".shared"));
    for res in whole {
        for id in &res.ids {
            let (device, replica) = nvidia::split_replica_id(id);
            if replica.is_some() {
                continue;
            }
            let Ok(r) = nvidia::parse_gpu_ref(device) else {
                continue;
            };
            if let Resolved::Whole(bus) = resolve_ref(topo, &r) {
                if let Some(i) = topo.gpus.iter().position(|g| g.pci_bus_id == bus) {
                    out.insert(i);
                }
            }
        }
    }
    out
}

/// Source 3, device nodes in the spec: `uverbsN` NICs go into `f`; the GPUs of `/dev/nvidiaN` nodes
/// are returned, for [`find`] to take when no earlier source named any.
fn node_devices(topo: &Topology, c: &ContainerView, f: &mut Found) -> Result<Found, RequestError> {
    // MIG capability nodes beside a GPU node: the GPU node is a MIG device's parent.
    let has_mig_caps = c.devices.iter().any(|d| {
        matches!(
            nvidia::parse_device_node(&d.path),
            Some(NvidiaNode::Capability(_))
        )
    });
    let mut nodes = Found::default();
    for d in &c.devices {
        match nvidia::parse_device_node(&d.path) {
            Some(NvidiaNode::Gpu(minor)) => {
                match topo.gpus.iter().find(|g| g.minor == Some(minor)) {
                    Some(g) => nodes.push(&g.pci_bus_id, has_mig_caps),
                    None => {
                        let origin = format!("device {}", d.path);
                        return Err(unknown_gpu(c, &origin, &minor.to_string()));
                    }
                }
            }
            _ => {
                if let Some(name) = crate::host::devices::uverbs_name(&d.path) {
                    if let Some(nic) = topo
                        .nics
                        .iter()
                        .find(|n| n.uverbs.iter().any(|u| u == name))
                    {
                        if !f.nics.contains(&nic.name) {
                            f.nics.push(nic.name.clone());
                        }
                    }
                }
            }
        }
    }
    Ok(nodes)
}

/// Source 3, continued: the volume-mounts strategy's `/var/run/nvidia-container-devices/<id>`
/// mounts: their GPUs are returned, what cannot be used is noted in `f`.
fn mounted_gpus(topo: &Topology, c: &ContainerView, f: &mut Found) -> Result<Found, RequestError> {
    let mut mounted = Found::default();
    for m in &c.mounts {
        let origin = format!("mount {}", m.destination);
        match nvidia::parse_volume_mount(&m.destination) {
            None | Some(Ok(MountedDevice::ImexChannel(_))) => {}
            Some(Err(e)) => f.note(origin, e.to_string()),
            Some(Ok(MountedDevice::Gpu(r))) => match resolve_ref(topo, &r) {
                Resolved::Whole(b) => mounted.push(&b, false),
                Resolved::MigParent(b) => mounted.push(&b, true),
                Resolved::MigUnknownParent => {
                    f.note(origin, format!("MIG device {r}: parent GPU not named"))
                }
                Resolved::Unknown => return Err(unknown_gpu(c, &origin, &r.to_string())),
            },
        }
    }
    Ok(mounted)
}

/// Source 4: `NVIDIA_VISIBLE_DEVICES` as shared GPUs (whole ones held alone when `trusted`); what it
/// cannot give is noted.
fn env_gpus(topo: &Topology, c: &ContainerView, f: &mut Found, trusted: bool) {
    let origin = VISIBLE_DEVICES_ENV;
    let list = match nvidia::parse_visible_devices(c.env_var(VISIBLE_DEVICES_ENV)) {
        Ok(VisibleDevices::List(l)) => l,
        // Not allocations: no GPU container, the driver only, the image's `all`, or the
        // volume-mounts marker whose mounts were read above.
        Ok(_) => return,
        Err(e) => {
            f.note(origin, e.to_string());
            return;
        }
    };
    for r in &list {
        match resolve_ref(topo, r) {
            Resolved::Whole(b) => f.push(&b, !trusted),
            Resolved::MigParent(b) => f.push(&b, true),
            Resolved::MigUnknownParent => f.note(
                origin,
                format!("MIG device {r}: parent GPU not named by its id"),
            ),
            Resolved::Unknown => f.note(
                origin,
                format!("names GPU {r:?}, which this host does not have"),
            ),
        }
    }
    if f.any_gpu() {
        f.source = Some(if trusted {
            GpuSource::TrustedEnv
        } else {
            GpuSource::Env
        });
    }
}

#[cfg(test)]
#[path = "devices_tests.rs"]
mod tests;
