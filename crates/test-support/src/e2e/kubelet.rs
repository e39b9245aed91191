//! CRI requests shaped exactly as a kubelet 1.33/1.34 builds them, in crictl's JSON form (proto
//! field names, as `e2e::spec` writes them): `RunPodSandbox` and `CreateContainer` configs
//! with the kubelet's labels and annotations, QoS class, cgroup parent for either cgroup driver,
//! `linux.resources` by the kubelet's formulas (pod level and per container), init and sidecar
//! containers, and device plugin allocations per strategy (NVIDIA envvar, volume-mounts,
//! cdi-annotations, cdi-cri, device specs, MIG, time-slicing, MPS; the RDMA shared device plugin).
//!
//! Sources (kubernetes/kubernetes 1.33/1.34): `pkg/kubelet/kuberuntime/kuberuntime_sandbox.go`
//! (`generatePodSandboxConfig`, `generatePodSandboxLinuxConfig`), `kuberuntime_container.go`
//! (`generateContainerConfig`, `makeDevices`, `makeCDIDevices`, `makeMounts`), `labels.go`,
//! `pkg/kubelet/cm/cgroup_manager_linux.go` (`ToCgroupfs`, `ToSystemd`, `ExpandSlice`),
//! `pod_container_manager_linux.go` (`GetPodContainerName`), `pkg/kubelet/types/pod_update.go`
//! (`kubernetes.io/config.*`); the arithmetic is in [`resources`], device plugins in [`devices`].
//! `docs/kubernetes-node.md` walks one pod through all of it.
//!
//! What differs from a real kubelet, on purpose: the container hash is a hex FNV-1a of our own
//! description of the container (same shape, not the bit pattern of Go's hash of its
//! `v1.Container` JSON); the image is sent by name (the harness has no registry to resolve
//! digests); security context, DNS and service-account mounts are left out (they do not touch
//! placement).

pub mod devices;
pub mod quantity;
pub mod resources;
mod sends;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

pub use devices::{
    merge, rdma_shared_allocate, Allocation, ClaimDevice, DraClaim, Hca, ListStrategy,
    NvidiaDevice, NvidiaPlugin,
};
pub use resources::{Machine, Qos, Resources};

use super::{Containerd, HResult, HarnessError};

/// The kubelet's `--cgroup-driver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupDriver {
    /// `cgroupfs`: `/kubepods/burstable/pod<uid>`.
    Cgroupfs,
    /// `systemd`: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`.
    Systemd,
}

/// The node as the kubelet sees it.
#[derive(Debug, Clone)]
pub struct Node {
    /// Cgroup driver.
    pub driver: CgroupDriver,
    /// `--cgroup-root` (`/` on a real node; the harness instance's CGROUP_PARENT in tests).
    pub cgroup_root: String,
    /// Facts the arithmetic needs (cgroup version, swap, hugepages, memory).
    pub machine: Machine,
    /// `--pod-logs-dir` (`/var/log/pods`).
    pub pod_logs_dir: PathBuf,
    /// Directory for termination-log files (`/var/lib/kubelet/pods`); `None` leaves the
    /// `/dev/termination-log` mount out.
    pub pods_dir: Option<PathBuf>,
}

impl Node {
    /// A kubelet with default flags on a host with these facts.
    pub fn new(driver: CgroupDriver, machine: Machine) -> Self {
        Self {
            driver,
            cgroup_root: "/".into(),
            machine,
            pod_logs_dir: "/var/log/pods".into(),
            pods_dir: None,
        }
    }

    /// The facts of the machine this test runs on (cgroup version, swap controller, hugepage
    /// sizes, memory), read as the kubelet reads them.
    pub fn this_machine() -> Machine {
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let swap = if v2 {
            Path::new("/sys/fs/cgroup/memory.swap.max").exists()
                || fs::read_to_string("/proc/self/cgroup")
                    .ok()
                    .and_then(|c| {
                        c.lines()
                            .find_map(|l| l.strip_prefix("0::").map(str::to_string))
                    })
                    .is_some_and(|p| {
                        Path::new(&format!("/sys/fs/cgroup{p}/memory.swap.max")).exists()
                    })
        } else {
            Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists()
        };
        // libcontainer's HugePageSizes: /sys/kernel/mm/hugepages/hugepages-<N>kB.
        let mut sizes: Vec<(i64, String)> = fs::read_dir("/sys/kernel/mm/hugepages")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        let kb: i64 = n
                            .strip_prefix("hugepages-")?
                            .strip_suffix("kB")?
                            .parse()
                            .ok()?;
                        Some((kb, resources::hugepage_unit(kb * 1024)?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        sizes.sort();
        let mem_kb: i64 = fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0);
        Machine {
            cgroup_v2: v2,
            single_process_oom_kill: None,
            swap_controller: swap,
            hugepage_sizes: sizes.into_iter().map(|(_, s)| s).collect(),
            memory_capacity: mem_kb * 1024,
        }
    }

    /// The node behind a harness instance: cgroupfs (the harness config), pods under the
    /// instance's CGROUP_PARENT, logs and termination-log files in the instance directory.
    pub fn for_instance(cd: &Containerd) -> HResult<Self> {
        let mut n = Self::new(CgroupDriver::Cgroupfs, Self::this_machine());
        n.cgroup_root = cd.var("CGROUP_PARENT")?.to_string();
        n.pod_logs_dir = cd.dir().join("pod-logs");
        n.pods_dir = Some(cd.dir().join("kubelet-pods"));
        Ok(n)
    }

    /// The pod's cgroup parent (`GetPodContainerName`'s literal name for the driver).
    pub fn cgroup_parent(&self, qos: Qos, uid: &str) -> String {
        let mut parts: Vec<String> = self
            .cgroup_root
            .split('/')
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect();
        parts.push("kubepods".into());
        parts.extend(qos.cgroup_level().map(String::from));
        parts.push(format!("pod{uid}"));
        match self.driver {
            CgroupDriver::Cgroupfs => format!("/{}", parts.join("/")),
            CgroupDriver::Systemd => {
                let escaped: Vec<String> = parts.iter().map(|p| p.replace('-', "_")).collect();
                expand_slice(&format!("{}.slice", escaped.join("-")))
            }
        }
    }
}

/// systemd's slice expansion: `a-b-c.slice` -> `/a.slice/a-b.slice/a-b-c.slice`.
pub fn expand_slice(slice: &str) -> String {
    let name = slice.strip_suffix(".slice").unwrap_or(slice);
    let mut path = String::new();
    let mut prefix = String::new();
    for part in name.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        path.push('/');
        path.push_str(&prefix);
        path.push_str(".slice");
    }
    path
}

/// One container of a pod spec.
#[derive(Debug, Clone, Default)]
pub struct KubeContainer {
    /// `name`.
    pub name: String,
    /// `image` (default: the instance's TEST_IMAGE).
    pub image: Option<String>,
    /// `command` (default: sleep for an hour).
    pub command: Vec<String>,
    /// `env`, in order.
    pub env: Vec<(String, String)>,
    /// `resources`.
    pub resources: Resources,
    /// An init container with `restartPolicy: Always` (a sidecar).
    pub sidecar: bool,
    /// Device plugin answers for this container.
    pub allocations: Vec<Allocation>,
    /// DRA claims it references (reported by PodResources only: the CDI names reach the
    /// runtime as the test says, through an [`Allocation`] or not at all).
    pub claims: Vec<DraClaim>,
}

impl KubeContainer {
    /// A container named `name` that sleeps.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            ..Default::default()
        }
    }
    /// With these resources.
    pub fn resources(mut self, r: Resources) -> Self {
        self.resources = r;
        self
    }
    /// With a device plugin allocation.
    pub fn allocation(mut self, a: Allocation) -> Self {
        self.allocations.push(a);
        self
    }
    /// Referencing a DRA claim.
    pub fn claim(mut self, c: DraClaim) -> Self {
        self.claims.push(c);
        self
    }
    /// With an env entry from the pod spec.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
    /// With this command.
    pub fn command(mut self, cmd: &[&str]) -> Self {
        self.command = cmd.iter().map(|s| s.to_string()).collect();
        self
    }
}

/// A pod spec, as far as the CRI requests depend on it.
#[derive(Debug, Clone, Default)]
pub struct KubePod {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.uid` (a UUID on a real cluster).
    pub uid: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations` (the kubelet adds `kubernetes.io/config.source`/`config.seen`).
    pub annotations: BTreeMap<String, String>,
    /// `spec.initContainers`, in order.
    pub init_containers: Vec<KubeContainer>,
    /// `spec.containers`.
    pub containers: Vec<KubeContainer>,
    /// `spec.resources` (pod-level resources, PodLevelResources gate).
    pub pod_resources: Option<Resources>,
    /// `spec.overhead` (from a RuntimeClass).
    pub overhead: Option<Resources>,
    /// `spec.terminationGracePeriodSeconds` (API default 30).
    pub termination_grace_period: i64,
    /// `spec.hostNetwork` (the harness has no CNI: true by default).
    pub host_network: bool,
}

impl KubePod {
    /// A pod in `namespace` with a UID derived from its name (a valid UUID shape).
    pub fn new(namespace: &str, name: &str) -> Self {
        let h = fnv(name.as_bytes()) ^ fnv(namespace.as_bytes()).rotate_left(17);
        Self {
            name: name.into(),
            namespace: namespace.into(),
            uid: format!(
                "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                h >> 32,
                (h >> 16) & 0xffff,
                h & 0xfff,
                (h >> 20) & 0xfff,
                h & 0xffff_ffff_ffff
            ),
            termination_grace_period: 30,
            host_network: true,
            ..Default::default()
        }
    }
    /// Adds an app container.
    pub fn container(mut self, c: KubeContainer) -> Self {
        self.containers.push(c);
        self
    }
    /// Adds an init container (`sidecar` marks `restartPolicy: Always`).
    pub fn init_container(mut self, mut c: KubeContainer, sidecar: bool) -> Self {
        c.sidecar = sidecar;
        self.init_containers.push(c);
        self
    }
    /// Adds a pod annotation.
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.annotations.insert(k.into(), v.into());
        self
    }
    /// Adds a pod label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }

    fn all(&self) -> impl Iterator<Item = &KubeContainer> {
        self.init_containers.iter().chain(&self.containers)
    }

    /// The named container (init or app).
    pub fn find(&self, name: &str) -> HResult<&KubeContainer> {
        self.all()
            .find(|c| c.name == name)
            .ok_or_else(|| HarnessError(format!("pod {} has no container {name}", self.name)))
    }

    /// The QoS class (`GetPodQOS` over the API-defaulted resources).
    pub fn qos(&self) -> Qos {
        let defaulted: Vec<Resources> = self.all().map(|c| c.resources.defaulted()).collect();
        resources::pod_qos(
            &defaulted,
            self.pod_resources
                .as_ref()
                .map(Resources::defaulted)
                .as_ref(),
        )
    }

    /// The kubelet's three pod labels.
    pub fn kube_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("io.kubernetes.pod.name".to_string(), self.name.clone()),
            (
                "io.kubernetes.pod.namespace".to_string(),
                self.namespace.clone(),
            ),
            ("io.kubernetes.pod.uid".to_string(), self.uid.clone()),
        ])
    }

    /// `RunPodSandboxRequest.config` in crictl's JSON.
    pub fn sandbox_config(&self, node: &Node) -> Value {
        let mut labels = self.labels.clone();
        labels.extend(self.kube_labels());
        let mut annotations = self.annotations.clone();
        annotations
            .entry("kubernetes.io/config.source".into())
            .or_insert_with(|| "api".into());
        annotations
            .entry("kubernetes.io/config.seen".into())
            .or_insert_with(|| "2025-11-23T15:47:00.000000000Z".into());
        let apps: Vec<Resources> = self
            .containers
            .iter()
            .map(|c| c.resources.defaulted())
            .collect();
        let inits: Vec<(Resources, bool)> = self
            .init_containers
            .iter()
            .map(|c| (c.resources.defaulted(), c.sidecar))
            .collect();
        let app_refs: Vec<&Resources> = apps.iter().collect();
        let init_refs: Vec<(&Resources, bool)> = inits.iter().map(|(r, s)| (r, *s)).collect();
        let mut reqs = resources::pod_total(&app_refs, &init_refs, |r| &r.requests);
        let mut lims = resources::pod_total(&app_refs, &init_refs, |r| &r.limits);
        if let Some(p) = &self.pod_resources {
            for (k, v) in &p.requests {
                if k == "cpu" || k == "memory" {
                    reqs.insert(k.clone(), quantity::q(v));
                }
            }
            for (k, v) in &p.limits {
                if k == "cpu" || k == "memory" {
                    lims.insert(k.clone(), quantity::q(v));
                }
            }
        }
        let m = &node.machine;
        let sandbox = resources::calculate(
            m,
            reqs.get("cpu").copied(),
            Some(lims.get("cpu").copied().unwrap_or(quantity::Quantity::ZERO)),
            lims.get("memory").copied(),
        );
        let overhead = match &self.overhead {
            Some(o) => {
                let cpu = o.req("cpu").or(o.lim("cpu"));
                Value::Object(resources::calculate(
                    m,
                    cpu,
                    cpu,
                    o.req("memory").or(o.lim("memory")),
                ))
            }
            None => json!({}),
        };
        json!({
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid, "attempt": 0},
            "log_directory": node.pod_logs_dir.join(format!("{}_{}_{}", self.namespace, self.name, self.uid)),
            "labels": labels,
            "annotations": annotations,
            "linux": {
                "cgroup_parent": node.cgroup_parent(self.qos(), &self.uid),
                "security_context": {
                    // NamespaceMode: POD 0, CONTAINER 1, NODE 2.
                    "namespace_options": {"network": if self.host_network { 2 } else { 0 }, "pid": 1, "ipc": 0},
                    "privileged": false,
                    // SecurityProfile.ProfileType RuntimeDefault = 0.
                    "seccomp": {"profile_type": 0}
                },
                "sysctls": {},
                "resources": Value::Object(sandbox),
                "overhead": overhead
            }
        })
    }

    /// `LinuxContainerResources` of `container` (`generateLinuxContainerResources`).
    pub fn container_resources(
        &self,
        node: &Node,
        container: &KubeContainer,
    ) -> Map<String, Value> {
        let m = &node.machine;
        let r = container.resources.defaulted();
        let pod = self.pod_resources.as_ref().map(Resources::defaulted);
        // getCPULimit / getMemoryLimit: the pod-level limit stands in for a missing one.
        let pick = |name: &str| {
            let own = r.lim(name).filter(|q| !q.is_zero());
            own.or_else(|| pod.as_ref().and_then(|p| p.lim(name)))
        };
        let cpu_limit = pick("cpu").unwrap_or(quantity::Quantity::ZERO);
        let mut out = resources::calculate(m, r.req("cpu"), Some(cpu_limit), pick("memory"));
        let qos = self.qos();
        let adj = match qos {
            Qos::Guaranteed => resources::GUARANTEED_OOM_SCORE_ADJ,
            Qos::BestEffort => resources::BESTEFFORT_OOM_SCORE_ADJ,
            Qos::Burstable => {
                let apps: Vec<Option<i64>> = self
                    .containers
                    .iter()
                    .map(|c| c.resources.defaulted().req("memory").map(|v| v.value()))
                    .collect();
                resources::burstable_oom_score_adj(m, &r, container.sidecar, &apps)
            }
        };
        out.insert("oom_score_adj".into(), json!(adj));
        out.insert(
            "hugepage_limits".into(),
            json!(resources::hugepage_limits(m, &r)),
        );
        resources::apply_no_swap(m, &mut out);
        out
    }

    /// `CreateContainerRequest.config` for `name` at `restart_count` (also its `attempt`), in
    /// crictl's JSON; `image` is used when the container names none; `termination_log` is the
    /// host file to mount at `/dev/termination-log` (None: no such mount).
    pub fn container_config(
        &self,
        node: &Node,
        name: &str,
        restart_count: u32,
        image: &str,
        termination_log: Option<&Path>,
    ) -> HResult<Value> {
        let c = self.find(name)?;
        let merged = merge(&c.allocations);
        let mut envs: Vec<Value> = merged
            .envs
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect();
        envs.extend(c.env.iter().map(|(k, v)| json!({"key": k, "value": v})));
        let mut mounts = merged.mounts.clone();
        if let Some(log) = termination_log {
            mounts.push(json!({"container_path": "/dev/termination-log", "host_path": log}));
        }
        let mut labels = self.kube_labels();
        labels.insert("io.kubernetes.container.name".into(), c.name.clone());
        let mut annotations: BTreeMap<String, String> =
            merged.annotations.iter().cloned().collect();
        let hash = fnv(format!("{c:?}").as_bytes());
        for (k, v) in [
            ("io.kubernetes.container.hash", format!("{hash:x}")),
            (
                "io.kubernetes.container.restartCount",
                restart_count.to_string(),
            ),
            (
                "io.kubernetes.container.terminationMessagePath",
                "/dev/termination-log".into(),
            ),
            (
                "io.kubernetes.container.terminationMessagePolicy",
                "File".into(),
            ),
            (
                "io.kubernetes.pod.terminationGracePeriod",
                self.termination_grace_period.to_string(),
            ),
        ] {
            // The kubelet's own keys win over device plugin annotations.
            annotations.insert(k.into(), v);
        }
        let command: Vec<String> = if c.command.is_empty() {
            vec!["/bin/sleep".into(), "3600".into()]
        } else {
            c.command.clone()
        };
        let image = c.image.clone().unwrap_or_else(|| image.to_string());
        Ok(json!({
            "metadata": {"name": c.name, "attempt": restart_count},
            "image": {"image": image, "user_specified_image": image},
            "command": command,
            "envs": envs,
            "mounts": mounts,
            "devices": merged.devices,
            "CDI_devices": merged.cdi_devices,
            "labels": labels,
            "annotations": annotations,
            "log_path": format!("{}/{restart_count}.log", c.name),
            "linux": {
                "resources": Value::Object(self.container_resources(node, c)),
                "security_context": {"namespace_options": {"network": if self.host_network { 2 } else { 0 }, "pid": 1, "ipc": 0}}
            }
        }))
    }
}

impl KubePod {
    /// What the kubelet's PodResources `List`/`Get` reports for this pod: its sidecar init
    /// containers, then its app containers (plain init containers never), each device once per
    /// NUMA node its plugin reported (`server_v1.go`, `containerDevicesFromResourceDeviceInstances`),
    /// and each DRA claim it references with its prepared devices (`dynamic_resources`, feature
    /// gate `KubeletPodResourcesDynamicResources`, on by default from 1.34).
    pub fn pod_resources(&self) -> podresources::proto::PodResources {
        let listed = self
            .init_containers
            .iter()
            .filter(|c| c.sidecar)
            .chain(&self.containers);
        let containers = listed
            .map(|c| {
                let devs = c
                    .allocations
                    .iter()
                    .flat_map(|a| {
                        let ids: Vec<(&str, Option<i64>)> = a
                            .ids
                            .iter()
                            .enumerate()
                            .map(|(i, id)| (id.as_str(), a.numa.get(i).copied().flatten()))
                            .collect();
                        podresources::build::devices(&a.resource, &ids)
                    })
                    .collect();
                let mut r = podresources::build::container(&c.name, devs);
                r.dynamic_resources = c.claims.iter().map(DraClaim::dynamic_resource).collect();
                r
            })
            .collect();
        podresources::build::pod(&self.namespace, &self.name, containers)
    }
}

/// 64-bit FNV-1a.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
