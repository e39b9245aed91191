//! The DaemonSet of `packaging/kubernetes/` read as the node agent it describes: image,
//! arguments, environment, security context and every volume mount with its source, from the
//! kustomization as `kubectl kustomize` renders it (with components, for the GPU one). The
//! image test (tests/e2e/image.rs) runs the image through CRI from exactly this, and the
//! manifest test (tests/packaging/kubernetes.rs) checks it, so the manifest and what was proven
//! cannot drift.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

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

/// The objects `kubectl kustomize` renders for `packaging/kubernetes` with `components` (paths
/// relative to it, e.g. `components/gpu`), through an overlay outside the repository as an
/// operator's is. `Ok(None)` when no kubectl is installed (it is no dependency of the
/// project); any other failure is an error.
pub fn render(components: &[&str]) -> HResult<Option<Vec<Value>>> {
    let dir = tempfile::tempdir().map_err(|e| HarnessError(format!("tempdir: {e}")))?;
    // kustomize takes relative paths only: from the overlay up to `/`, then down to the repo.
    let up = "../".repeat(dir.path().components().count().saturating_sub(1));
    let base = format!(
        "{up}{}",
        manifests_dir()
            .display()
            .to_string()
            .trim_start_matches('/')
    );
    let mut text = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{base}]\n"
    );
    if !components.is_empty() {
        let list: Vec<String> = components.iter().map(|c| format!("{base}/{c}")).collect();
        text.push_str(&format!("components: [{}]\n", list.join(", ")));
    }
    fs::write(dir.path().join("kustomization.yaml"), text)
        .map_err(|e| HarnessError(format!("write overlay: {e}")))?;
    kustomize(dir.path())
}

/// The objects `kubectl kustomize DIR` renders (any kustomization: an overlay hack/build-image
/// wrote, say). `Ok(None)` when no kubectl is installed; any other failure is an error.
pub fn kustomize(dir: &std::path::Path) -> HResult<Option<Vec<Value>>> {
    let out = match Command::new("kubectl").arg("kustomize").arg(dir).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return err(format!("run kubectl kustomize: {e}")),
    };
    if !out.status.success() {
        return err(format!(
            "kubectl kustomize: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut objects = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_slice(&out.stdout) {
        let v: Value = serde::Deserialize::deserialize(doc)
            .map_err(|e| HarnessError(format!("kustomize output: {e}")))?;
        if !v.is_null() {
            objects.push(v);
        }
    }
    Ok(Some(objects))
}

/// The resource files of the kustomization read as they are, for hosts without kubectl: the
/// same objects as the rendering without components (the manifest test compares them where
/// kubectl is installed).
pub fn unrendered() -> HResult<Vec<Value>> {
    let k = load_one("kustomization.yaml", "Kustomization")?;
    let mut objects = Vec::new();
    for r in k["resources"].as_array().cloned().unwrap_or_default() {
        let r = r.as_str().unwrap_or_default();
        if manifests_dir().join(r).is_dir() {
            let sub = load_one(&format!("{r}/kustomization.yaml"), "Kustomization")?;
            for f in sub["resources"].as_array().cloned().unwrap_or_default() {
                objects.extend(load_documents(&format!(
                    "{r}/{}",
                    f.as_str().unwrap_or_default()
                ))?);
            }
        } else {
            objects.extend(load_documents(r)?);
        }
    }
    Ok(objects)
}

/// The one object of `kind` named `name` among `objects`.
pub fn find_object<'a>(objects: &'a [Value], kind: &str, name: &str) -> HResult<&'a Value> {
    let found: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
        other => err(format!("{} objects {kind}/{name}, want 1", other.len())),
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
    /// The container's whole securityContext, as rendered.
    pub security_context: Value,
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
    /// The default DaemonSet as `kubectl kustomize packaging/kubernetes` renders it, or, without
    /// kubectl, as its files say (see [`unrendered`]).
    pub fn load() -> HResult<Self> {
        let objects = match render(&[])? {
            Some(objects) => objects,
            None => {
                eprintln!("kubectl not installed: the DaemonSet is read from its files");
                unrendered()?
            }
        };
        Self::from_objects(&objects, "nri-align")
    }

    /// The DaemonSet `name` among rendered `objects`, with the ConfigMap it mounts from the
    /// same objects; every volume mount must resolve to a hostPath or a ConfigMap of them
    /// (anything else is an error, so no mount can be left out of the image test silently).
    pub fn from_objects(objects: &[Value], name: &str) -> HResult<Self> {
        let ds = find_object(objects, "DaemonSet", name)?.clone();
        let spec = &ds["spec"]["template"]["spec"];
        let containers = spec["containers"].as_array().cloned().unwrap_or_default();
        let [c] = containers.as_slice() else {
            return err(format!(
                "the DaemonSet has {} containers, want 1",
                containers.len()
            ));
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
                let doc = find_object(objects, "ConfigMap", cm)?;
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
            args: string_array(&c["args"]),
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
            security_context: sc.clone(),
            host_network: spec["hostNetwork"].as_bool().unwrap_or(false),
            host_pid: spec["hostPID"].as_bool().unwrap_or(false),
            metrics_port,
            daemonset: ds.clone(),
        })
    }

    /// The container's securityContext as the kubelet hands it to the runtime in CRI's
    /// `LinuxContainerSecurityContext` (crictl's JSON, proto field names), for the fields the
    /// manifest sets: kubernetes/kubernetes `pkg/kubelet/kuberuntime/security_context.go`
    /// (`determineEffectiveSecurityContext`, `convertToRuntimeSecurityContext`: capability names
    /// passed as written, `no_new_privs` from `allowPrivilegeEscalation: false`, the seccomp
    /// profile as a `SecurityProfile`) and `security_context_others.go` for seccomp types.
    /// `namespace_options` (host network and PID) come from the pod spec. A field this does
    /// not translate is an error, so the test never runs with less than the manifest says.
    pub fn cri_security_context(&self) -> HResult<Value> {
        const KNOWN: &[&str] = &[
            "privileged",
            "allowPrivilegeEscalation",
            "capabilities",
            "runAsUser",
            "runAsGroup",
            "readOnlyRootFilesystem",
            "seccompProfile",
        ];
        let sc = &self.security_context;
        if let Some(unknown) = sc
            .as_object()
            .and_then(|o| o.keys().find(|k| !KNOWN.contains(&k.as_str())))
        {
            return err(format!(
                "securityContext.{unknown} has no CRI translation in test-support"
            ));
        }
        let mut out = json!({
            "privileged": self.privileged,
            "readonly_rootfs": self.readonly_rootfs,
            // NamespaceMode: CONTAINER = 1, NODE = 2.
            "namespace_options": {
                "network": if self.host_network { 2 } else { 1 },
                "pid": if self.host_pid { 2 } else { 1 },
            },
            "capabilities": {
                "add_capabilities": string_array(&sc["capabilities"]["add"]),
                "drop_capabilities": string_array(&sc["capabilities"]["drop"]),
            },
            // The kubelet sets no_new_privs exactly when privilege escalation is forbidden.
            "no_new_privs": sc["allowPrivilegeEscalation"] == json!(false),
        });
        if let Some(uid) = self.run_as_user {
            out["run_as_user"] = json!({"value": uid});
        }
        if let Some(gid) = self.run_as_group {
            out["run_as_group"] = json!({"value": gid});
        }
        match sc["seccompProfile"]["type"].as_str() {
            None => {}
            // SecurityProfile.ProfileType: RuntimeDefault = 0, Unconfined = 1.
            Some("RuntimeDefault") => out["seccomp"] = json!({"profile_type": "RuntimeDefault"}),
            Some("Unconfined") => out["seccomp"] = json!({"profile_type": "Unconfined"}),
            Some(other) => return err(format!("seccompProfile.type {other} not translated")),
        }
        Ok(out)
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
    /// containerd: `ctr images import` of [`super::UpOptions::images`] into the CRI namespace (the
    /// archive's own reference annotation names the image, as hack/build-image wrote it).
    pub(super) fn import_images(&self) -> HResult<()> {
        let ctr = PathBuf::from(self.var("CONTAINERD_BIN_DIR")?).join("ctr");
        let address = self.var("CONTAINERD_ADDRESS")?;
        for (archive, reference) in &self.options.images {
            let out = super::run_cmd(
                Command::new(&ctr)
                    .args([
                        "--address",
                        address,
                        "--namespace",
                        "k8s.io",
                        "images",
                        "import",
                    ])
                    .arg(archive),
                "ctr images import",
            )?;
            if !out.status.success() {
                return err(format!(
                    "ctr images import {} ({reference}): {}",
                    archive.display(),
                    super::describe(&out)
                ));
            }
        }
        Ok(())
    }

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

/// The strings of a JSON array (none when `v` is not one; other elements skipped).
fn string_array(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
