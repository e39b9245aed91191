//! Pod and container configs in crictl's JSON format (proto field names), as tests describe them,
//! with what the kubelet always adds: the `io.kubernetes.*` labels (CRI-O names a container to
//! NRI from `io.kubernetes.container.name`), the namespace options repeated in each container's
//! security context, and the image as the user specified it (CRI-O checks its signature policy
//! against `user_specified_image`).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

use super::Pod;

/// The kubelet's pod namespace options for a host-network pod: NamespaceMode NODE (2) for the
/// network (this machine has no CNI), CONTAINER (1) for PIDs (no shareProcessNamespace), POD
/// (0) for IPC. The kubelet sends them for the sandbox and again in every container.
fn namespace_options() -> Value {
    json!({"network": 2, "pid": 1, "ipc": 0})
}

/// What goes into a pod config (host network always: this machine has no CNI).
#[derive(Debug, Clone, Default)]
pub struct PodSpec {
    /// metadata.name (also used for uid when `uid` is empty).
    pub name: String,
    /// metadata.namespace (default "default").
    pub namespace: String,
    /// metadata.uid.
    pub uid: String,
    /// Pod annotations.
    pub annotations: BTreeMap<String, String>,
    /// Pod labels.
    pub labels: BTreeMap<String, String>,
    /// linux.resources (pod-level, the sum kubelet would send).
    pub resources: Option<Value>,
    /// linux.cgroup_parent, when the test picks it (the kubelet's pod cgroup, e.g. a systemd
    /// slice); `None`: the harness instance's own parent.
    pub cgroup_parent: Option<String>,
}

impl PodSpec {
    /// A pod named `name` in namespace "default".
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            namespace: "default".into(),
            ..Default::default()
        }
    }

    /// Adds an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// Sets the namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = ns.into();
        self
    }

    /// Sets metadata.uid.
    pub fn uid(mut self, uid: &str) -> Self {
        self.uid = uid.into();
        self
    }

    /// Puts the pod under `parent` instead of the harness instance's cgroup parent.
    pub fn cgroup_parent(mut self, parent: &str) -> Self {
        self.cgroup_parent = Some(parent.into());
        self
    }

    /// metadata.uid: `uid`, or `uid-NAME` when none was set.
    pub fn metadata_uid(&self) -> String {
        if self.uid.is_empty() {
            format!("uid-{}", self.name)
        } else {
            self.uid.clone()
        }
    }

    /// crictl's JSON for this pod under `cgroup_parent`, logging into `log_dir`.
    pub fn to_json(&self, cgroup_parent: &str, log_dir: &Path) -> Value {
        let uid = self.metadata_uid();
        let mut linux = json!({
            "cgroup_parent": cgroup_parent,
            "security_context": {"namespace_options": namespace_options()}
        });
        if let Some(r) = &self.resources {
            linux["resources"] = r.clone();
        }
        // The labels the kubelet puts on every sandbox.
        let mut labels = self.labels.clone();
        labels.insert("io.kubernetes.pod.name".into(), self.name.clone());
        labels.insert("io.kubernetes.pod.namespace".into(), self.namespace.clone());
        labels.insert("io.kubernetes.pod.uid".into(), uid.clone());
        json!({
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": uid, "attempt": 0},
            "log_directory": log_dir,
            "annotations": self.annotations,
            "labels": labels,
            "linux": linux
        })
    }
}

/// What goes into a container config.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    /// metadata.name.
    pub name: String,
    /// Image (default: the instance's TEST_IMAGE).
    pub image: Option<String>,
    /// command (default: sleep for an hour, and exit at once on TERM: it runs as PID 1 of its
    /// own PID namespace, where an untrapped TERM is ignored and a stop would wait out the
    /// runtime's grace period).
    pub command: Vec<String>,
    /// Environment.
    pub envs: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// linux.resources fields (cpuset_cpus, cpu_quota, memory_limit_in_bytes...).
    pub resources: serde_json::Map<String, Value>,
    /// Devices: (container_path, host_path, permissions).
    pub devices: Vec<(String, String, String)>,
    /// Capabilities added to the runtime's default set (`securityContext.capabilities.add`).
    pub add_capabilities: Vec<String>,
    /// metadata.attempt: the kubelet's restart count (0 for the first run; a restarted
    /// container is a new one of the same name and the next attempt).
    pub attempt: u32,
}

impl ContainerSpec {
    /// A container named `name` that sleeps.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            ..Default::default()
        }
    }

    /// Adds a capability (`MKNOD`) as a pod's `securityContext.capabilities.add` does: the
    /// runtimes' default sets differ (containerd keeps CAP_MKNOD, CRI-O drops it).
    pub fn capability(mut self, name: &str) -> Self {
        self.add_capabilities.push(name.into());
        self
    }

    /// Command to run instead of the default sleep.
    pub fn command(mut self, cmd: &[&str]) -> Self {
        self.command = cmd.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.envs.insert(k.into(), v.into());
        self
    }

    /// Adds an annotation.
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.annotations.insert(k.into(), v.into());
        self
    }

    /// Sets one linux.resources field (proto name, e.g. "cpuset_cpus", "cpu_quota").
    pub fn resource(mut self, field: &str, value: Value) -> Self {
        self.resources.insert(field.into(), value);
        self
    }

    /// Explicit cpuset.
    pub fn cpuset(self, cpus: &str) -> Self {
        self.resource("cpuset_cpus", json!(cpus))
    }

    /// Kubelet-style CPU request/limit in millicores: shares, and a CFS quota over 100 ms.
    pub fn cpu_millis(self, request: i64, limit: Option<i64>) -> Self {
        let s = self.resource("cpu_shares", json!((request * 1024 / 1000).max(2)));
        match limit {
            Some(l) => s
                .resource("cpu_period", json!(100_000))
                .resource("cpu_quota", json!(l * 100)),
            None => s,
        }
    }

    /// Memory limit in bytes.
    pub fn memory(self, bytes: i64) -> Self {
        self.resource("memory_limit_in_bytes", json!(bytes))
    }

    /// Adds a device.
    pub fn device(mut self, container_path: &str, host_path: &str, perms: &str) -> Self {
        self.devices
            .push((container_path.into(), host_path.into(), perms.into()));
        self
    }

    /// crictl's JSON for this container in `pod` (`default_image` when none was set).
    pub fn to_json(&self, default_image: &str, pod: &Pod) -> Value {
        let command: Vec<String> = if self.command.is_empty() {
            ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
                .map(String::from)
                .to_vec()
        } else {
            self.command.clone()
        };
        let image = self
            .image
            .clone()
            .unwrap_or_else(|| default_image.to_string());
        // The labels the kubelet puts on every container.
        let mut labels = self.labels.clone();
        labels.insert("io.kubernetes.container.name".into(), self.name.clone());
        labels.insert("io.kubernetes.pod.name".into(), pod.name.clone());
        labels.insert("io.kubernetes.pod.namespace".into(), pod.namespace.clone());
        labels.insert("io.kubernetes.pod.uid".into(), pod.uid.clone());
        let envs: Vec<Value> = self
            .envs
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect();
        let devices: Vec<Value> = self
            .devices
            .iter()
            .map(|(c, h, p)| json!({"container_path": c, "host_path": h, "permissions": p}))
            .collect();
        json!({
            "metadata": {"name": self.name, "attempt": self.attempt},
            "image": {"image": image, "user_specified_image": image},
            "command": command,
            "envs": envs,
            "devices": devices,
            "annotations": self.annotations,
            "labels": labels,
            "log_path": format!("{}.log", self.name),
            "linux": {
                "resources": Value::Object(self.resources.clone()),
                "security_context": {
                    "namespace_options": namespace_options(),
                    "capabilities": {"add_capabilities": self.add_capabilities}
                }
            }
        })
    }
}
