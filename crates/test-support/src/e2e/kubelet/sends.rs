//! The kubelet's side of the CRI conversation: [`KubePod`]'s sandbox and containers sent to a
//! runtime as the kubelet sends them (the directories it makes first, its termination-log
//! file), with the two concessions this project's VMs need for CRI-O.

use std::fs;
use std::path::Path;

use serde_json::{json, Value};

use super::super::{Containerd, HResult, HarnessError, Pod, Runtime};
use super::{fnv, KubePod, Node};

impl Containerd {
    /// Runs `pod`'s sandbox as a kubelet would on `node`.
    pub fn run_kube_pod(&self, pod: &KubePod, node: &Node) -> HResult<Pod> {
        let config = pod.sandbox_config(node);
        if let Some(dir) = config["log_directory"].as_str() {
            fs::create_dir_all(dir).map_err(|e| HarnessError(format!("mkdir {dir}: {e}")))?;
        }
        let path = self.config_file("kube-pod", &config)?;
        let id = self.cri().ok(&["runp", &path.to_string_lossy()])?;
        Ok(Pod {
            id,
            config_path: path,
            name: pod.name.clone(),
            namespace: pod.namespace.clone(),
            uid: pod.uid.clone(),
        })
    }

    /// Creates container `name` of `pod` (restart count `restart_count`) in `sandbox` as a
    /// kubelet would; `Err` carries the runtime's message.
    pub fn create_kube_container(
        &self,
        sandbox: &Pod,
        pod: &KubePod,
        node: &Node,
        name: &str,
        restart_count: u32,
    ) -> HResult<String> {
        let image = self.env.get("TEST_IMAGE").cloned().unwrap_or_default();
        let log = match &node.pods_dir {
            Some(dir) => {
                // The kubelet's termination-log file: pods/<uid>/containers/<name>/<random>.
                let d = dir.join(&pod.uid).join("containers").join(name);
                fs::create_dir_all(&d)
                    .map_err(|e| HarnessError(format!("mkdir {}: {e}", d.display())))?;
                let f = d.join(format!(
                    "{:08x}",
                    fnv(format!("{name}{restart_count}").as_bytes()) as u32
                ));
                fs::write(&f, b"")
                    .map_err(|e| HarnessError(format!("write {}: {e}", f.display())))?;
                Some(f)
            }
            None => None,
        };
        // The kubelet creates the container's log directory (`BuildContainerLogsDirectory`,
        // then `MkdirAll`) before CreateContainer; containerd would create it, CRI-O's conmon
        // does not and the creation fails.
        let logs = pod.sandbox_config(node)["log_directory"]
            .as_str()
            .map(|d| Path::new(d).join(name));
        if let Some(d) = logs {
            fs::create_dir_all(&d)
                .map_err(|e| HarnessError(format!("mkdir {}: {e}", d.display())))?;
        }
        let mut config = pod.container_config(node, name, restart_count, &image, log.as_deref())?;
        if self.runtime == Runtime::Crio {
            clamp_oom_score_adj(&mut config);
            drop_unmounted_hugetlb(&mut config);
        }
        let path = self.config_file("kube-container", &config)?;
        self.cri().ok(&[
            "create",
            &sandbox.id,
            &path.to_string_lossy(),
            &sandbox.config_path.to_string_lossy(),
        ])
    }
}

/// Without CAP_SYS_RESOURCE (this project's VMs run without it) no process may lower its
/// `oom_score_adj`, so runc fails to apply a Guaranteed pod's -997. containerd clamps the value
/// to its own (`restrict_oom_score_adj`, set by hack/containerd-up); CRI-O has no such setting,
/// so for CRI-O the harness clamps the request the same way. A real node's runtime has the
/// capability and receives the kubelet's value unchanged.
fn clamp_oom_score_adj(config: &mut Value) {
    const CAP_SYS_RESOURCE: u32 = 24;
    let can_lower = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0);
    if can_lower {
        return;
    }
    let own: i64 = fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    if let Some(adj) = config.pointer_mut("/linux/resources/oom_score_adj") {
        if adj.as_i64().is_some_and(|v| v < own) {
            *adj = json!(own);
        }
    }
}

/// This project's VMs run cgroup v1 with the hugetlb controller enabled but mounted nowhere
/// (it sits on the unified hierarchy, which holds no controller runc uses in v1 mode).
/// containerd sends no hugepage limits when the controller is missing; CRI-O passes them to
/// runc, which then fails ("cannot set hugetlb limit"). For CRI-O on such a host the harness
/// leaves them out, as containerd does; where hugetlb is mounted they are kept.
fn drop_unmounted_hugetlb(config: &mut Value) {
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    if v2 || Path::new("/sys/fs/cgroup/hugetlb").exists() {
        return;
    }
    if let Some(resources) = config
        .pointer_mut("/linux/resources")
        .and_then(Value::as_object_mut)
    {
        resources.remove("hugepage_limits");
    }
}
