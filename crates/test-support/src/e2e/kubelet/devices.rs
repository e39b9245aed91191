//! Device plugin `Allocate` answers (`ContainerAllocateResponse`) as the NVIDIA device plugin
//! and the RDMA shared device plugin build them, and the kubelet's merge of them into the
//! container's `envs`, `mounts`, `devices`, `annotations` and `CDI_devices`.
//!
//! Sources: NVIDIA/k8s-device-plugin v0.17-v0.20 `internal/plugin/server.go`
//! (`getAllocateResponse`, `updateResponseForCDI`, `updateResponseForDeviceMounts`,
//! `apiDeviceSpecs`), `internal/plugin/mps.go`, `internal/rm/nvml_manager.go` (control nodes),
//! `nvml_devices.go` (MIG capability nodes); Mellanox/k8s-rdma-shared-dev-plugin
//! `pkg/resources/server.go` (`Allocate`), Mellanox/rdmamap (`GetRdmaCharDevices`);
//! kubernetes `pkg/kubelet/cm/devicemanager/pod_devices.go` (`deviceRunContainerOptions`).

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// The CDI kind the device plugin names its GPUs with (`plugin-manager.go`:
/// `cdi.WithVendor("k8s.device-plugin.nvidia.com")`, `server.go`: `QualifiedName("gpu", id)`).
pub const CDI_KIND: &str = "k8s.device-plugin.nvidia.com/gpu";

/// One device plugin's answer for one container and the ids the kubelet allocated (what
/// PodResources later reports for the container).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allocation {
    /// Extended resource name (`nvidia.com/gpu`, `rdma/hca_shared_devices_a`).
    pub resource: String,
    /// Device plugin ids the kubelet picked (`GPU-...`, `GPU-...::2`, `17`).
    pub ids: Vec<String>,
    /// NUMA node of each id as the plugin reports it (None: no topology).
    pub numa: Vec<Option<i64>>,
    /// `envs`.
    pub envs: BTreeMap<String, String>,
    /// `mounts`: (container_path, host_path, read_only).
    pub mounts: Vec<(String, String, bool)>,
    /// `devices`: (container_path, host_path, permissions).
    pub devices: Vec<(String, String, String)>,
    /// `annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `cdi_devices` names.
    pub cdi_devices: Vec<String>,
}

/// The NVIDIA device plugin's `deviceListStrategy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListStrategy {
    /// `envvar` (the default): `NVIDIA_VISIBLE_DEVICES=<ids>`.
    EnvVar,
    /// `volume-mounts`: `/dev/null` mounted at `/var/run/nvidia-container-devices/<id>`.
    VolumeMounts,
    /// `cdi-annotations`: `cdi.k8s.io/nvidia-device-plugin_<response uuid>`.
    CdiAnnotations,
    /// `cdi-cri`: the CRI `CDI_devices` field.
    CdiCri,
}

/// One device the NVIDIA plugin manages (as NVML enumerates it).
#[derive(Debug, Clone, PartialEq)]
pub enum NvidiaDevice {
    /// A whole GPU.
    Gpu {
        /// `GPU-...`.
        uuid: String,
        /// NVML index.
        index: u32,
        /// Minor of `/dev/nvidiaN`.
        minor: u32,
        /// NUMA node (None when sysfs says -1).
        numa: Option<i64>,
    },
    /// A MIG device (`mig-strategy` single or mixed).
    Mig {
        /// `MIG-...`.
        uuid: String,
        /// Parent GPU index and MIG index (`"<gpu>:<mig>"` under the index id strategy).
        index: (u32, u32),
        /// Parent's `/dev/nvidiaN` minor.
        parent_minor: u32,
        /// `/dev/nvidia-caps/nvidia-capN` minors of its GPU instance and compute instance.
        caps: (u32, u32),
        /// Parent's NUMA node.
        numa: Option<i64>,
    },
}

impl NvidiaDevice {
    fn uuid(&self) -> &str {
        match self {
            NvidiaDevice::Gpu { uuid, .. } | NvidiaDevice::Mig { uuid, .. } => uuid,
        }
    }
    fn index(&self) -> String {
        match self {
            NvidiaDevice::Gpu { index, .. } => index.to_string(),
            NvidiaDevice::Mig { index, .. } => format!("{}:{}", index.0, index.1),
        }
    }
    fn numa(&self) -> Option<i64> {
        match self {
            NvidiaDevice::Gpu { numa, .. } | NvidiaDevice::Mig { numa, .. } => *numa,
        }
    }
    fn paths(&self) -> Vec<String> {
        match self {
            NvidiaDevice::Gpu { minor, .. } => vec![format!("/dev/nvidia{minor}")],
            NvidiaDevice::Mig {
                parent_minor, caps, ..
            } => vec![
                format!("/dev/nvidia{parent_minor}"),
                format!("/dev/nvidia-caps/nvidia-cap{}", caps.0),
                format!("/dev/nvidia-caps/nvidia-cap{}", caps.1),
            ],
        }
    }
}

/// The NVIDIA device plugin's settings that shape an answer.
#[derive(Debug, Clone)]
pub struct NvidiaPlugin {
    /// Resource name: `nvidia.com/gpu`, `nvidia.com/gpu.shared` (sharing renamed),
    /// `nvidia.com/mig-1g.10gb` (mixed MIG strategy).
    pub resource: String,
    /// `deviceListStrategy` (several may be on).
    pub strategies: Vec<ListStrategy>,
    /// `deviceIDStrategy` index instead of uuid.
    pub index_ids: bool,
    /// `passDeviceSpecs`.
    pub pass_device_specs: bool,
    /// Which optional control nodes exist on the host (`/dev/nvidiactl`, `/dev/nvidia-uvm`,
    /// `/dev/nvidia-uvm-tools`, `/dev/nvidia-modeset`): the plugin skips missing ones.
    pub control_nodes: Vec<String>,
    /// `nvidiaDevRoot` (host side of device nodes).
    pub dev_root: String,
    /// Sharing replicas per device (time-slicing or MPS), 0 = not shared.
    pub replicas: u32,
    /// MPS root on the host (`mps.root`, default `/run/nvidia/mps`) when MPS sharing is on.
    pub mps_root: Option<String>,
    /// The random UUID the plugin makes per response for its CDI annotation key.
    pub response_id: String,
}

impl NvidiaPlugin {
    /// The plugin's defaults (v0.17+): `nvidia.com/gpu`, envvar, uuid ids, no device specs.
    pub fn new() -> Self {
        Self {
            resource: "nvidia.com/gpu".into(),
            strategies: vec![ListStrategy::EnvVar],
            index_ids: false,
            pass_device_specs: false,
            control_nodes: [
                "/dev/nvidiactl",
                "/dev/nvidia-uvm",
                "/dev/nvidia-uvm-tools",
                "/dev/nvidia-modeset",
            ]
            .map(String::from)
            .to_vec(),
            dev_root: "/".into(),
            replicas: 0,
            mps_root: None,
            response_id: "3b1d6b9e-1c1e-4a53-9a57-6f3f0c2b8d11".into(),
        }
    }

    /// With these list strategies.
    pub fn strategies(mut self, s: &[ListStrategy]) -> Self {
        self.strategies = s.to_vec();
        self
    }

    /// Shared by time-slicing with `n` replicas, renamed `<resource>.shared` (`renameByDefault`).
    pub fn time_sliced(mut self, n: u32) -> Self {
        self.replicas = n;
        self.resource = format!("{}.shared", self.resource);
        self
    }

    /// Shared by MPS with `n` replicas (resource name kept, as MPS' default).
    pub fn mps(mut self, n: u32) -> Self {
        self.replicas = n;
        self.mps_root = Some("/run/nvidia/mps".into());
        self
    }

    /// The answer for the kubelet's pick: `picks` are (device, replica number when shared).
    /// In the plugin's order: the CDI names, MPS' mounts, and unless every strategy is CDI, the
    /// env, the volume mounts and the device nodes.
    pub fn allocate(&self, picks: &[(&NvidiaDevice, Option<u32>)]) -> Allocation {
        let mut a = Allocation {
            resource: self.resource.clone(),
            ..Default::default()
        };
        for (d, replica) in picks {
            a.ids.push(match replica {
                Some(n) => format!("{}::{n}", d.uuid()),
                None => d.uuid().to_string(),
            });
            a.numa.push(d.numa());
        }
        let ids = self.unique_ids(picks);
        self.list_cdi(&mut a, &ids);
        self.add_mps(&mut a);
        let all_cdi = self
            .strategies
            .iter()
            .all(|s| matches!(s, ListStrategy::CdiAnnotations | ListStrategy::CdiCri));
        if all_cdi {
            return a;
        }
        self.list_env_and_mounts(&mut a, &ids);
        if self.pass_device_specs {
            self.add_device_specs(&mut a, picks);
        }
        a
    }

    /// The ids the plugin lists for `picks` (uniqueDeviceIDsFromAnnotatedDeviceIDs: replicas
    /// collapse onto their device), by index or UUID as configured.
    fn unique_ids(&self, picks: &[(&NvidiaDevice, Option<u32>)]) -> Vec<String> {
        let mut ids: Vec<String> = Vec::new();
        for (d, _) in picks {
            let id = if self.index_ids {
                d.index()
            } else {
                d.uuid().to_string()
            };
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }

    /// The CDI names of `ids`, as annotations and/or the CRI field, per the strategies.
    fn list_cdi(&self, a: &mut Allocation, ids: &[String]) {
        let any_cdi = self
            .strategies
            .iter()
            .any(|s| matches!(s, ListStrategy::CdiAnnotations | ListStrategy::CdiCri));
        if !any_cdi {
            return;
        }
        let names: Vec<String> = ids.iter().map(|id| format!("{CDI_KIND}={id}")).collect();
        if self.strategies.contains(&ListStrategy::CdiAnnotations) {
            a.annotations.insert(
                format!("cdi.k8s.io/nvidia-device-plugin_{}", self.response_id),
                names.join(","),
            );
        }
        if self.strategies.contains(&ListStrategy::CdiCri) {
            a.cdi_devices = names;
        }
    }

    /// MPS' pipe directory and shared memory, when shared by MPS.
    fn add_mps(&self, a: &mut Allocation) {
        let Some(root) = &self.mps_root else {
            return;
        };
        let pipe = format!("/mps/{}/pipe", self.resource);
        a.envs
            .insert("CUDA_MPS_PIPE_DIRECTORY".into(), pipe.clone());
        a.mounts
            .push((pipe, format!("{root}/{}/pipe", self.resource), false));
        a.mounts
            .push(("/dev/shm".into(), format!("{root}/shm"), false));
    }

    /// `NVIDIA_VISIBLE_DEVICES` and the volume mounts listing `ids`, per the strategies.
    fn list_env_and_mounts(&self, a: &mut Allocation, ids: &[String]) {
        if self.strategies.contains(&ListStrategy::EnvVar) {
            a.envs
                .insert("NVIDIA_VISIBLE_DEVICES".into(), ids.join(","));
        }
        if self.strategies.contains(&ListStrategy::VolumeMounts) {
            a.envs.insert(
                "NVIDIA_VISIBLE_DEVICES".into(),
                "/var/run/nvidia-container-devices".into(),
            );
            for id in ids {
                a.mounts.push((
                    format!("/var/run/nvidia-container-devices/{id}"),
                    "/dev/null".into(),
                    false,
                ));
            }
        }
    }

    /// The device nodes of `picks` and the control nodes (`PASS_DEVICE_SPECS`).
    fn add_device_specs(&self, a: &mut Allocation, picks: &[(&NvidiaDevice, Option<u32>)]) {
        let mut paths = self.control_nodes.clone();
        for (d, _) in picks {
            paths.extend(d.paths());
        }
        for p in paths {
            let host = format!(
                "{}/{}",
                self.dev_root.trim_end_matches('/'),
                p.trim_start_matches('/')
            );
            a.devices.push((p, host, "rw".into()));
        }
    }
}

impl Default for NvidiaPlugin {
    fn default() -> Self {
        Self::new()
    }
}

/// One HCA as the RDMA shared device plugin finds it (rdmamap reads these from sysfs).
#[derive(Debug, Clone, PartialEq)]
pub struct Hca {
    /// PCI address (`0000:3b:00.0`), the CDI device name in CDI mode.
    pub pci: String,
    /// `ucmN`, if the old userspace CM is there.
    pub ucm: Option<u32>,
    /// `issmN`.
    pub issm: Option<u32>,
    /// `umadN`.
    pub umad: Option<u32>,
    /// `uverbsN`.
    pub uverbs: u32,
}

/// The RDMA shared device plugin's answer: every HCA of the resource to every container.
/// `counter` is the device id the kubelet picked (`0..rdmaHcaMax`), `cdi` the plugin's CDI mode.
pub fn rdma_shared_allocate(resource: &str, hcas: &[Hca], counter: u32, cdi: bool) -> Allocation {
    let mut a = Allocation {
        resource: resource.into(),
        ids: vec![counter.to_string()],
        numa: vec![None],
        ..Default::default()
    };
    if cdi {
        let names: Vec<String> = hcas
            .iter()
            .map(|h| format!("nvidia.com/net-rdma={}", h.pci))
            .collect();
        a.annotations
            .insert("cdi.k8s.io/nvidia.com_net-rdma".into(), names.join(","));
        return a;
    }
    for h in hcas {
        let nodes = [
            h.ucm.map(|n| format!("ucm{n}")),
            h.issm.map(|n| format!("issm{n}")),
            h.umad.map(|n| format!("umad{n}")),
            Some(format!("uverbs{}", h.uverbs)),
            Some("rdma_cm".into()),
        ];
        for n in nodes.into_iter().flatten() {
            let p = format!("/dev/infiniband/{n}");
            a.devices.push((p.clone(), p, "rwm".into()));
        }
    }
    a
}

/// What the kubelet puts into the container from all allocations (`deviceRunContainerOptions`):
/// the first of each env name, device or mount container path, annotation key and CDI name wins.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merged {
    /// Env entries in order.
    pub envs: Vec<(String, String)>,
    /// CRI `mounts` entries.
    pub mounts: Vec<Value>,
    /// CRI `devices` entries.
    pub devices: Vec<Value>,
    /// Annotations in order.
    pub annotations: Vec<(String, String)>,
    /// CRI `CDI_devices` entries.
    pub cdi_devices: Vec<Value>,
}

/// Merges the allocations of one container.
pub fn merge(allocs: &[Allocation]) -> Merged {
    let mut m = Merged::default();
    let mut seen_env = std::collections::BTreeSet::new();
    let mut seen_dev = std::collections::BTreeSet::new();
    let mut seen_mount = std::collections::BTreeSet::new();
    let mut seen_ann = std::collections::BTreeSet::new();
    let mut seen_cdi = std::collections::BTreeSet::new();
    for a in allocs {
        for (k, v) in &a.envs {
            if seen_env.insert(k.clone()) {
                m.envs.push((k.clone(), v.clone()));
            }
        }
        for (c, h, p) in &a.devices {
            if seen_dev.insert(c.clone()) {
                m.devices
                    .push(json!({"container_path": c, "host_path": h, "permissions": p}));
            }
        }
        for (c, h, ro) in &a.mounts {
            if seen_mount.insert(c.clone()) {
                // SELinuxRelabel false for device plugin mounts.
                m.mounts
                    .push(json!({"container_path": c, "host_path": h, "readonly": ro}));
            }
        }
        for (k, v) in &a.annotations {
            if seen_ann.insert(k.clone()) {
                m.annotations.push((k.clone(), v.clone()));
            }
        }
        for n in &a.cdi_devices {
            if seen_cdi.insert(n.clone()) {
                m.cdi_devices.push(json!({"name": n}));
            }
        }
    }
    m
}

/// One device a DRA driver prepared for a claim, as the kubelet's PodResources API reports it
/// (`ClaimResource`, proto/podresources/api.proto).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimDevice {
    /// `driver_name` (`gpu.nvidia.com`).
    pub driver: String,
    /// `pool_name` (the NVIDIA driver's pool is the node's name).
    pub pool: String,
    /// `device_name` within the pool (`gpu-1`).
    pub device: String,
    /// `cdi_devices[].name`: the qualified CDI names the driver prepared for it.
    pub cdi_names: Vec<String>,
}

/// A ResourceClaim a container references (`spec.containers[].resources.claims`), with the
/// devices the scheduler allocated and the driver prepared: what the kubelet lists under the
/// container's `dynamic_resources` once the pod was admitted and its claims prepared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DraClaim {
    /// The claim's namespace (the pod's).
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// Its allocated devices.
    pub devices: Vec<ClaimDevice>,
}

impl DraClaim {
    /// The container's `DynamicResource` entry for this claim.
    pub fn dynamic_resource(&self) -> podresources::proto::DynamicResource {
        let resources = self
            .devices
            .iter()
            .map(|d| {
                let names: Vec<&str> = d.cdi_names.iter().map(String::as_str).collect();
                podresources::build::claim_resource(&d.driver, &d.pool, &d.device, &names)
            })
            .collect();
        podresources::build::dynamic(&self.namespace, &self.name, resources)
    }
}
