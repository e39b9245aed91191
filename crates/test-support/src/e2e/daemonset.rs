//! The DaemonSet of `packaging/kubernetes/` read as the node agent it describes: image,
//! arguments, environment, security settings and every volume mount with its source. The image
//! test (tests/e2e/image.rs) runs the image through CRI from exactly this, and the manifest test
//! (tests/packaging/kubernetes.rs) checks it, so the manifest and what was proven cannot drift.

use std::fs;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::{err, Containerd, HResult, HarnessError, Pod};

/// `packaging/kubernetes/`.
pub fn manifests_dir() -> PathBuf {
    super::repo_root().join("packaging/kubernetes")
}

/// Every document of a (multi-document) YAML manifest file, as JSON values.
pub fn load_documents(file: &str) -> HResult<Vec<Value>> {
    let path = manifests_dir().join(file);
    let text = fs::read_to_string(&path)
        .map_err(|e| HarnessError(format!("read {}: {e}", path.display())))?;
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc)
            .map_err(|e| HarnessError(format!("{}: {e}", path.display())))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// The one document of `file` of this kind.
pub fn load_one(file: &str, kind: &str) -> HResult<Value> {
    let mut found: Vec<Value> = load_documents(file)?
        .into_iter()
        .filter(|d| d["kind"] == kind)
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        n => err(format!("{file}: {n} documents of kind {kind}, want 1")),
    }
}

/// Where a mounted volume comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A host directory.
    HostPath(String),
    /// A ConfigMap: each key is a file holding that key's text.
    ConfigMap {
        /// ConfigMap name.
        name: String,
        /// key -> text, from the ConfigMap in the manifests.
        data: Vec<(String, String)>,
    },
}

/// One volume mount of the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Volume name.
    pub volume: String,
    /// Its source.
    pub source: Source,
    /// Where it appears in the container.
    pub container_path: String,
    /// Mounted read-only.
    pub readonly: bool,
}

/// The nri-align container of the DaemonSet, with its pod-level settings.
#[derive(Debug, Clone)]
pub struct NodeAgent {
    /// Image reference.
    pub image: String,
    /// `args` (the image's ENTRYPOINT stays).
    pub args: Vec<String>,
    /// Environment variable names (values may come from the downward API).
    pub env: Vec<String>,
    /// Every volume mount, in manifest order.
    pub mounts: Vec<Mount>,
    /// securityContext.privileged.
    pub privileged: bool,
    /// securityContext.runAsUser.
    pub run_as_user: Option<i64>,
    /// securityContext.runAsGroup.
    pub run_as_group: Option<i64>,
    /// securityContext.readOnlyRootFilesystem.
    pub readonly_rootfs: bool,
    /// spec.hostNetwork.
    pub host_network: bool,
    /// spec.hostPID.
    pub host_pid: bool,
    /// The `metrics` container port.
    pub metrics_port: Option<u64>,
    /// The whole DaemonSet document.
    pub daemonset: Value,
}

impl NodeAgent {
    /// Reads `daemonset.yaml` and `configmap.yaml`; every volume mount must resolve to a
    /// hostPath or a ConfigMap of the manifests (anything else is an error, so no mount can be
    /// left out of the image test silently).
    pub fn load() -> HResult<Self> {
        let ds = load_one("daemonset.yaml", "DaemonSet")?;
        let spec = &ds["spec"]["template"]["spec"];
        let containers = spec["containers"].as_array().cloned().unwrap_or_default();
        let [c] = containers.as_slice() else {
            return err(format!(
                "the DaemonSet has {} containers, want 1",
                containers.len()
            ));
        };
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
        let mut mounts = Vec::new();
        for m in c["volumeMounts"].as_array().cloned().unwrap_or_default() {
            let name = m["name"].as_str().unwrap_or_default().to_string();
            let Some(vol) = volumes.iter().find(|v| v["name"] == name.as_str()) else {
                return err(format!("volumeMount {name} has no volume"));
            };
            let source = if let Some(p) = vol["hostPath"]["path"].as_str() {
                Source::HostPath(p.to_string())
            } else if let Some(cm) = vol["configMap"]["name"].as_str() {
                let doc = load_one("configmap.yaml", "ConfigMap")?;
                if doc["metadata"]["name"] != cm {
                    return err(format!(
                        "volume {name} names ConfigMap {cm}, not in configmap.yaml"
                    ));
                }
                let data = doc["data"]
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                            .collect()
                    })
                    .unwrap_or_default();
                Source::ConfigMap {
                    name: cm.to_string(),
                    data,
                }
            } else {
                return err(format!(
                    "volume {name}: neither hostPath nor configMap: {vol}"
                ));
            };
            mounts.push(Mount {
                volume: name,
                source,
                container_path: m["mountPath"].as_str().unwrap_or_default().to_string(),
                readonly: m["readOnly"].as_bool().unwrap_or(false),
            });
        }
        let sc = &c["securityContext"];
        let metrics_port = c["ports"].as_array().and_then(|ps| {
            ps.iter()
                .find(|p| p["name"] == "metrics")
                .and_then(|p| p["containerPort"].as_u64())
        });
        Ok(NodeAgent {
            image: c["image"].as_str().unwrap_or_default().to_string(),
            args: strings(&c["args"]),
            env: c["env"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e["name"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            mounts,
            privileged: sc["privileged"].as_bool().unwrap_or(false),
            run_as_user: sc["runAsUser"].as_i64(),
            run_as_group: sc["runAsGroup"].as_i64(),
            readonly_rootfs: sc["readOnlyRootFilesystem"].as_bool().unwrap_or(false),
            host_network: spec["hostNetwork"].as_bool().unwrap_or(false),
            host_pid: spec["hostPID"].as_bool().unwrap_or(false),
            metrics_port,
            daemonset: ds.clone(),
        })
    }

    /// The mount at `container_path`.
    pub fn mount(&self, container_path: &str) -> Option<&Mount> {
        self.mounts
            .iter()
            .find(|m| m.container_path == container_path)
    }

    /// The value following `flag` in the arguments.
    pub fn arg(&self, flag: &str) -> Option<&str> {
        let at = self.args.iter().position(|a| a == flag)?;
        self.args.get(at + 1).map(String::as_str)
    }
}

impl Containerd {
    /// Runs a pod sandbox from a full CRI config (crictl's JSON), e.g. a privileged one.
    pub fn run_pod_value(&self, name: &str, config: &Value) -> HResult<Pod> {
        let path = self.config_file("pod", config)?;
        let id = self.cri().ok(&["runp", &path.to_string_lossy()])?;
        let meta = &config["metadata"];
        Ok(Pod {
            id,
            config_path: path,
            name: name.to_string(),
            namespace: meta["namespace"].as_str().unwrap_or("default").to_string(),
            uid: meta["uid"].as_str().unwrap_or_default().to_string(),
        })
    }

    /// Creates and starts a container from a full CRI container config (crictl's JSON).
    pub fn run_container_value(&self, pod: &Pod, config: &Value) -> HResult<String> {
        let path = self.config_file("container", config)?;
        let id = self.cri().ok(&[
            "create",
            &pod.id,
            &path.to_string_lossy(),
            &pod.config_path.to_string_lossy(),
        ])?;
        self.cri().ok(&["start", &id])?;
        Ok(id)
    }

    /// A pod sandbox config like [`super::PodSpec::to_json`]'s (host network, the instance's
    /// cgroup parent), privileged when `privileged` (a runtime refuses a privileged container in
    /// an unprivileged sandbox).
    pub fn pod_value(&self, spec: &super::PodSpec, privileged: bool) -> HResult<Value> {
        let parent = self.env.get("CGROUP_PARENT").cloned().unwrap_or_default();
        let logs = self.dir().join("logs").join(&spec.name);
        fs::create_dir_all(&logs)
            .map_err(|e| HarnessError(format!("mkdir {}: {e}", logs.display())))?;
        let mut v = spec.to_json(&parent, &logs);
        if privileged {
            v["linux"]["security_context"]["privileged"] = json!(true);
        }
        Ok(v)
    }
}
