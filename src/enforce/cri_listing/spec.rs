//! What the runtime's CRI says of one container, in the engine's terms: the OCI runtime spec
//! that `ContainerStatus` with `verbose` carries in its `info` map (the same spec NRI would have
//! described in a Synchronize), else the CRI status's own resources.
//!
//! Only the fields the engine reads are declared; every one defaults when absent, so a runtime
//! that leaves a part out (or adds its own) still converts. The `oci-spec` crate's complete
//! types were not used: their enums and required fields would refuse a whole spec over a field
//! nri-align never reads, and a refused spec loses the container's devices. Field names are the OCI runtime
//! spec's (config.md, config-linux.md) and the verbose `info` document's keys as containerd
//! (`sandboxID`, `pid`, `runtimeSpec`) and CRI-O write them.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::enforce::container::{
    sorted, ContainerState, ContainerView, DeviceRule, MountView, PodView, ResourcesView,
};
use crate::host::devices::DeviceNode;
use cri_client::proto as cri;

/// The verbose `info` document (the value of its `info` key).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct VerboseInfo {
    pid: u32,
    #[serde(rename = "runtimeSpec")]
    runtime_spec: Option<OciSpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OciSpec {
    process: Option<OciProcess>,
    mounts: Vec<OciMount>,
    annotations: BTreeMap<String, String>,
    linux: Option<OciLinux>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OciProcess {
    env: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OciMount {
    destination: String,
    source: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OciLinux {
    resources: Option<OciResources>,
    devices: Vec<OciDevice>,
    #[serde(rename = "cgroupsPath")]
    cgroups_path: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OciResources {
    cpu: Option<OciCpu>,
    memory: Option<OciMemory>,
    devices: Vec<OciDeviceRule>,
    #[serde(rename = "hugepageLimits")]
    hugepage_limits: Vec<OciHugepageLimit>,
}

/// `linux.resources.hugepageLimits[]` of the OCI runtime spec.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OciHugepageLimit {
    #[serde(rename = "pageSize")]
    page_size: String,
    limit: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OciCpu {
    shares: Option<u64>,
    quota: Option<i64>,
    period: Option<u64>,
    cpus: String,
    mems: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OciMemory {
    limit: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OciDevice {
    path: String,
    #[serde(rename = "type")]
    kind: String,
    major: i64,
    minor: i64,
    #[serde(rename = "fileMode")]
    file_mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OciDeviceRule {
    allow: bool,
    #[serde(rename = "type")]
    kind: Option<String>,
    major: Option<i64>,
    minor: Option<i64>,
    access: Option<String>,
}

/// Where a container's view came from: the runtime spec (complete), or the CRI status alone
/// (cpuset and limits, no device nodes, environment or mounts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The OCI runtime spec of the verbose status.
    RuntimeSpec,
    /// `ContainerStatus.resources`: the runtime gave no spec (or one that did not parse).
    StatusOnly,
}

/// The engine's view of a pod sandbox as `ListPodSandbox` lists it.
pub fn pod_view(p: &cri::PodSandbox) -> PodView {
    let meta = p.metadata.as_ref();
    PodView {
        id: p.id.clone(),
        uid: meta.map(|m| m.uid.clone()).unwrap_or_default(),
        name: meta.map(|m| m.name.clone()).unwrap_or_default(),
        namespace: meta.map(|m| m.namespace.clone()).unwrap_or_default(),
        annotations: sorted(&p.annotations),
        resources: None,
    }
}

/// The engine's state for a CRI container state; `None` for the ones that hold nothing
/// (exited, unknown).
pub fn live_state(s: cri::ContainerState) -> Option<ContainerState> {
    match s {
        cri::ContainerState::CONTAINER_CREATED => Some(ContainerState::Created),
        cri::ContainerState::CONTAINER_RUNNING => Some(ContainerState::Running),
        _ => None,
    }
}

/// The engine's view of a listed container from its verbose status.
pub fn container_view(
    listed: &cri::Container,
    state: ContainerState,
    status: &cri::ContainerStatusResponse,
) -> (ContainerView, Source) {
    let info: VerboseInfo = status
        .info
        .get("info")
        .and_then(|doc| serde_json::from_str(doc).ok())
        .unwrap_or_default();
    let st = status.status.as_ref();
    let name = listed
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .or_else(|| st.and_then(|s| s.metadata.as_ref()).map(|m| m.name.clone()))
        .unwrap_or_default();
    let mut view = ContainerView {
        id: listed.id.clone(),
        pod_sandbox_id: listed.pod_sandbox_id.clone(),
        name,
        state,
        annotations: sorted(&listed.annotations),
        env: Vec::new(),
        devices: Vec::new(),
        cdi_devices: Vec::new(),
        mounts: Vec::new(),
        kubelet_devices: None,
        kubelet_claims: Vec::new(),
        cdi_resolved: Vec::new(),
        kubelet_allocatable: None,
        resources: ResourcesView::default(),
        cgroups_path: String::new(),
        pid: info.pid,
    };
    let Some(spec) = info.runtime_spec else {
        if let Some(linux) = st
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.linux.as_ref())
        {
            view.resources = status_resources(linux);
        }
        return (view, Source::StatusOnly);
    };
    // NRI gives the spec's annotations. containerd keeps only its `io.kubernetes.cri.*` ones
    // there and the container's own in the CRI status; CRI-O has both in the spec. Both
    // sources, the spec's winning where they differ.
    if let Some(st) = st {
        view.annotations
            .extend(st.annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    view.annotations.extend(spec.annotations);
    view.env = spec.process.map(|p| p.env).unwrap_or_default();
    view.mounts = spec
        .mounts
        .into_iter()
        .map(|m| MountView {
            destination: m.destination,
            source: m.source,
        })
        .collect();
    if let Some(linux) = spec.linux {
        view.cgroups_path = linux.cgroups_path;
        view.devices = linux
            .devices
            .into_iter()
            .map(|d| DeviceNode {
                path: d.path,
                kind: d.kind,
                major: d.major,
                minor: d.minor,
                file_mode: d.file_mode,
                uid: d.uid,
                gid: d.gid,
            })
            .collect();
        if let Some(r) = linux.resources {
            view.resources = spec_resources(r);
        }
    }
    (view, Source::RuntimeSpec)
}

fn spec_resources(r: OciResources) -> ResourcesView {
    let cpu = r.cpu.unwrap_or_default();
    ResourcesView {
        cpu_shares: cpu.shares,
        cpu_quota: cpu.quota,
        cpu_period: cpu.period,
        cpuset_cpus: cpu.cpus.into(),
        cpuset_mems: cpu.mems.into(),
        memory_limit: r.memory.and_then(|m| m.limit),
        device_rules: r
            .devices
            .into_iter()
            .map(|d| DeviceRule {
                allow: d.allow,
                kind: d.kind.unwrap_or_else(|| "a".to_string()),
                major: d.major,
                minor: d.minor,
                access: d.access.unwrap_or_default(),
            })
            .collect(),
        hugepage_limits: r
            .hugepage_limits
            .into_iter()
            .map(|h| (h.page_size, h.limit))
            .collect(),
    }
}

/// `LinuxContainerResources` of the CRI status; zero means unset there.
fn status_resources(l: &cri::LinuxContainerResources) -> ResourcesView {
    let set_u = |v: i64| u64::try_from(v).ok().filter(|v| *v > 0);
    let set_i = |v: i64| (v != 0).then_some(v);
    ResourcesView {
        cpu_shares: set_u(l.cpu_shares),
        cpu_quota: set_i(l.cpu_quota),
        cpu_period: set_u(l.cpu_period),
        cpuset_cpus: l.cpuset_cpus.as_str().into(),
        cpuset_mems: l.cpuset_mems.as_str().into(),
        memory_limit: set_i(l.memory_limit_in_bytes),
        device_rules: Vec::new(),
        hugepage_limits: l
            .hugepage_limits
            .iter()
            .map(|h| (h.page_size.clone(), h.limit))
            .collect(),
    }
}
