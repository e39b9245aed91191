//! Containers shaped like privileged ones, whose device nodes are no allocation.
//!
//! A CRI runtime gives a privileged container every device node of the host
//! (containerd's `WithHostDevices`, CRI-O's host devices) and a device-cgroup rule allowing
//! every device (containerd's `WithAllDevicesAllowed`: `{allow: true, access: "rwm"}`, no
//! type, major or minor). NRI's container has no `privileged` flag (proto/nri/api.proto,
//! `Container` and `LinuxContainer`), so the shape is what is read:
//!
//! - the device-cgroup rules of the spec (`LinuxResources.devices`, passed by NRI from the
//!   OCI spec) allow every device: the last rule that covers every device (type `a` or none,
//!   no major, no minor) allows `rwm`; or
//! - where the runtime passes no rules, the spec carries every GPU node of the host together
//!   with a node no device plugin hands out (`/dev/kmsg`, `/dev/mem`, `/dev/port`): what a
//!   host-devices list has and a device plugin's allocation never does.
//!
//! Such a container can open every device whatever nri-align records, so recording its nodes
//! as holdings would only make it the holder of every GPU and NIC and every later
//! device-plugin container its sharer. GPUs the kubelet (PodResources) or CDI names for it
//! are still its own.

use k8s_devices::nvidia::{self, NvidiaNode};

use crate::enforce::container::{ContainerView, DeviceRule};
use crate::topology::Topology;

/// Device nodes every host has and no device plugin gives a container.
const HOST_ONLY_NODES: [&str; 3] = ["/dev/kmsg", "/dev/mem", "/dev/port"];

/// Whether `c` has a privileged container's shape (module doc).
pub fn privileged_shaped(topo: &Topology, c: &ContainerView) -> bool {
    if !c.resources.device_rules.is_empty() {
        return allows_every_device(&c.resources.device_rules);
    }
    carries_every_gpu_node(topo, c)
        && c.devices
            .iter()
            .any(|d| HOST_ONLY_NODES.contains(&d.path.as_str()))
}

/// Whether the last rule covering every device allows read, write and mknod (the rules apply
/// in order; a non-privileged spec starts with a deny-all one and allows devices after it).
fn allows_every_device(rules: &[DeviceRule]) -> bool {
    rules
        .iter()
        .rev()
        .find(|r| (r.kind.is_empty() || r.kind == "a") && r.major.is_none() && r.minor.is_none())
        .is_some_and(|r| r.allow && ['r', 'w', 'm'].iter().all(|x| r.access.contains(*x)))
}

/// Whether the spec has the node of every GPU of the host (and the host has one).
fn carries_every_gpu_node(topo: &Topology, c: &ContainerView) -> bool {
    let minors: Vec<u32> = c
        .devices
        .iter()
        .filter_map(|d| match nvidia::parse_device_node(&d.path) {
            Some(NvidiaNode::Gpu(m)) => Some(m),
            _ => None,
        })
        .collect();
    !topo.gpus.is_empty()
        && topo
            .gpus
            .iter()
            .all(|g| g.minor.is_some_and(|m| minors.contains(&m)))
}

#[cfg(test)]
#[path = "privileged_tests.rs"]
mod tests;
