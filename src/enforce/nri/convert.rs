//! Conversions between the generated NRI messages (`nri_protocol::api`, field names from
//! containerd/nri `pkg/api/api.proto`) and enforcement's own structs: the only file of `enforce`
//! that sees generated types.

use nri_protocol::api::{self, MessageField};

use crate::enforce::adjust::Adjustment;
use crate::enforce::container::{
    sorted, ContainerState, ContainerView, DeviceNode, DeviceRule, MountView, PodView,
    ResourcesView,
};
use crate::placement::{MemPolicy, MemoryPolicy};

/// `PodSandbox` -> [`PodView`].
pub fn pod_view(p: &api::PodSandbox) -> PodView {
    PodView {
        id: p.id.clone(),
        uid: p.uid.clone(),
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        annotations: sorted(&p.annotations),
        resources: p
            .linux
            .as_ref()
            .and_then(|l| l.pod_resources.as_ref())
            .map(|r| resources_view(Some(r))),
    }
}

/// `LinuxResources` -> [`ResourcesView`].
pub fn resources_view(r: Option<&api::LinuxResources>) -> ResourcesView {
    let Some(r) = r else {
        return ResourcesView::default();
    };
    let cpu = r.cpu.as_ref();
    ResourcesView {
        cpu_shares: cpu.and_then(|c| c.shares.as_ref()).map(|v| v.value),
        cpu_quota: cpu.and_then(|c| c.quota.as_ref()).map(|v| v.value),
        cpu_period: cpu.and_then(|c| c.period.as_ref()).map(|v| v.value),
        cpuset_cpus: cpu.map(|c| c.cpus.as_str()).unwrap_or_default().into(),
        cpuset_mems: cpu.map(|c| c.mems.as_str()).unwrap_or_default().into(),
        memory_limit: r
            .memory
            .as_ref()
            .and_then(|m| m.limit.as_ref())
            .map(|v| v.value),
        device_rules: r
            .devices
            .iter()
            .map(|d| DeviceRule {
                allow: d.allow,
                kind: d.type_.clone(),
                major: d.major.as_ref().map(|v| v.value),
                minor: d.minor.as_ref().map(|v| v.value),
                access: d.access.clone(),
            })
            .collect(),
        hugepage_limits: r
            .hugepage_limits
            .iter()
            .map(|h| (h.page_size.clone(), h.limit))
            .collect(),
    }
}

/// `Container` -> [`ContainerView`].
pub fn container_view(c: &api::Container) -> ContainerView {
    let linux = c.linux.as_ref();
    let state = match c.state.enum_value() {
        Ok(api::ContainerState::CONTAINER_CREATED) => ContainerState::Created,
        Ok(api::ContainerState::CONTAINER_PAUSED) => ContainerState::Paused,
        Ok(api::ContainerState::CONTAINER_RUNNING) => ContainerState::Running,
        Ok(api::ContainerState::CONTAINER_STOPPED) => ContainerState::Stopped,
        _ => ContainerState::Unknown,
    };
    ContainerView {
        id: c.id.clone(),
        pod_sandbox_id: c.pod_sandbox_id.clone(),
        // CRI-O names a container to NRI from the kubelet's `io.kubernetes.container.name`
        // label; a request without it arrives nameless, so the label is the fallback too.
        name: if c.name.is_empty() {
            c.labels
                .get("io.kubernetes.container.name")
                .cloned()
                .unwrap_or_default()
        } else {
            c.name.clone()
        },
        state,
        annotations: sorted(&c.annotations),
        env: c.env.clone(),
        devices: linux
            .map(|l| {
                l.devices
                    .iter()
                    .map(|d| DeviceNode {
                        path: d.path.clone(),
                        kind: d.type_.clone(),
                        major: d.major,
                        minor: d.minor,
                        file_mode: d.file_mode.as_ref().map(|v| v.value),
                        uid: d.uid.as_ref().map(|v| v.value),
                        gid: d.gid.as_ref().map(|v| v.value),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        cdi_devices: c.CDI_devices.iter().map(|d| d.name.clone()).collect(),
        mounts: c
            .mounts
            .iter()
            .map(|m| MountView {
                destination: m.destination.clone(),
                source: m.source.clone(),
            })
            .collect(),
        kubelet_devices: None,
        kubelet_claims: Vec::new(),
        cdi_resolved: Vec::new(),
        kubelet_allocatable: None,
        resources: resources_view(linux.and_then(|l| l.resources.as_ref())),
        cgroups_path: linux.map(|l| l.cgroups_path.clone()).unwrap_or_default(),
        pid: c.pid,
    }
}

fn cpuset_resources(cpus: String, mems: Option<String>) -> api::LinuxResources {
    let cpu = api::LinuxCPU {
        cpus,
        mems: mems.unwrap_or_default(),
        ..Default::default()
    };
    api::LinuxResources {
        cpu: MessageField::some(cpu),
        ..Default::default()
    }
}

/// [`Adjustment`] -> `ContainerAdjustment`.
pub fn container_adjustment(a: &Adjustment) -> api::ContainerAdjustment {
    // The only place an adjustment's sets become text; an empty one is an empty field, which
    // the runtime leaves as it is.
    let mut resources =
        cpuset_resources(a.cpuset_cpus.to_string(), Some(a.cpuset_mems.to_string()));
    if let (Some(q), Some(cpu)) = (a.cpu_quota, resources.cpu.as_mut()) {
        cpu.quota = MessageField::some(optional_i64(q));
    }
    resources.devices = a.device_rules.iter().map(device_cgroup).collect();
    let mut devices: Vec<api::LinuxDevice> = a.add_devices.iter().map(linux_device).collect();
    // NRI's removal convention: the key (here the path) prefixed with '-'.
    devices.extend(a.remove_devices.iter().map(|p| api::LinuxDevice {
        path: format!("-{p}"),
        ..Default::default()
    }));
    api::ContainerAdjustment {
        annotations: a
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        env: a
            .env
            .iter()
            .map(|(k, v)| api::KeyValue {
                key: k.clone(),
                value: v.clone(),
                ..Default::default()
            })
            .collect(),
        linux: MessageField::some(api::LinuxContainerAdjustment {
            devices,
            resources: MessageField::some(resources),
            memory_policy: a.memory_policy.as_ref().map(memory_policy).into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// [`MemoryPolicy`] -> `LinuxMemoryPolicy` (NRI v0.12; the engine sends one only to a runtime
/// that carries it). No flags: the nodes are inside the container's `cpuset.mems`, and the
/// kernel remaps them with it when the cpuset changes.
fn memory_policy(p: &MemoryPolicy) -> api::LinuxMemoryPolicy {
    let mode = match p.mode {
        // `none` never reaches an adjustment; the kernel's default is what it means.
        MemPolicy::None => api::MpolMode::MPOL_DEFAULT,
        MemPolicy::Bind => api::MpolMode::MPOL_BIND,
        MemPolicy::Interleave => api::MpolMode::MPOL_INTERLEAVE,
        MemPolicy::PreferredMany => api::MpolMode::MPOL_PREFERRED_MANY,
        MemPolicy::WeightedInterleave => api::MpolMode::MPOL_WEIGHTED_INTERLEAVE,
    };
    api::LinuxMemoryPolicy {
        mode: mode.into(),
        nodes: p.nodes.to_string(),
        ..Default::default()
    }
}

/// [`DeviceRule`] -> `LinuxDeviceCgroup`.
fn device_cgroup(r: &DeviceRule) -> api::LinuxDeviceCgroup {
    api::LinuxDeviceCgroup {
        allow: r.allow,
        type_: r.kind.clone(),
        major: r
            .major
            .map(|value| api::OptionalInt64 {
                value,
                ..Default::default()
            })
            .into(),
        minor: r
            .minor
            .map(|value| api::OptionalInt64 {
                value,
                ..Default::default()
            })
            .into(),
        access: r.access.clone(),
        ..Default::default()
    }
}

/// [`DeviceNode`] -> `LinuxDevice`.
fn linux_device(d: &DeviceNode) -> api::LinuxDevice {
    api::LinuxDevice {
        path: d.path.clone(),
        type_: d.kind.clone(),
        major: d.major,
        minor: d.minor,
        file_mode: d
            .file_mode
            .map(|value| api::OptionalFileMode {
                value,
                ..Default::default()
            })
            .into(),
        uid: d
            .uid
            .map(|value| api::OptionalUInt32 {
                value,
                ..Default::default()
            })
            .into(),
        gid: d
            .gid
            .map(|value| api::OptionalUInt32 {
                value,
                ..Default::default()
            })
            .into(),
        ..Default::default()
    }
}

/// A cpuset update of container `id` as a `ContainerUpdate` touching `cpu.cpus` only (see
/// `adjust.rs` on why this keeps device rules); `cpus` is the list text, made once for the
/// updates of one pool move (they share it).
pub fn container_update_to(id: &str, cpus: String) -> api::ContainerUpdate {
    api::ContainerUpdate {
        container_id: id.to_string(),
        linux: MessageField::some(api::LinuxContainerUpdate {
            resources: MessageField::some(cpuset_resources(cpus, None)),
            ..Default::default()
        }),
        // A shared container that exits meanwhile must not fail the whole response.
        ignore_failure: true,
        ..Default::default()
    }
}

/// `v` as NRI's optional integer.
fn optional_i64(v: i64) -> api::OptionalInt64 {
    api::OptionalInt64 {
        value: v,
        ..Default::default()
    }
}

/// Sets the CFS quota of update `u` (any other field it carries stays).
pub fn set_update_quota(u: &mut api::ContainerUpdate, quota: i64) {
    let linux = u.linux.mut_or_insert_default();
    let resources = linux.resources.mut_or_insert_default();
    let cpu = resources.cpu.mut_or_insert_default();
    cpu.quota = MessageField::some(optional_i64(quota));
}

/// A quota-only update of container `id`: no cpuset field, so the runtime changes nothing else
/// (an empty `cpus` or `mems` is no change) and no other plugin's field is claimed.
pub fn container_update_quota(id: &str, quota: i64) -> api::ContainerUpdate {
    let mut u = api::ContainerUpdate {
        container_id: id.to_string(),
        // A container that exits meanwhile must not fail the whole response.
        ignore_failure: true,
        ..Default::default()
    };
    set_update_quota(&mut u, quota);
    u
}

/// A memory-node update of container `id` as a `ContainerUpdate` touching `cpu.mems` only: an
/// empty `cpus` is no change for the runtime (containerd's `WithResources` and runc's update
/// skip empty cpuset fields) and claims nothing in NRI's adaptation, so it never contends with
/// the plugin that owns the cpuset.
pub fn container_update_mems(id: &str, mems: String) -> api::ContainerUpdate {
    api::ContainerUpdate {
        container_id: id.to_string(),
        linux: MessageField::some(api::LinuxContainerUpdate {
            resources: MessageField::some(cpuset_resources(String::new(), Some(mems))),
            ..Default::default()
        }),
        ignore_failure: true,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hugepage_limits_pass_from_the_runtime_as_given() {
        let mut r = api::LinuxResources::new();
        for (size, limit) in [("2MB", 4u64 << 20), ("1GB", 0)] {
            let mut h = api::HugepageLimit::new();
            h.page_size = size.into();
            h.limit = limit;
            r.hugepage_limits.push(h);
        }
        assert_eq!(
            resources_view(Some(&r)).hugepage_limits,
            vec![("2MB".to_string(), 4 << 20), ("1GB".to_string(), 0)]
        );
    }
}
