//! The DaemonSet as `kubectl kustomize` renders it: unprivileged (every capability dropped, no
//! privilege escalation, the runtime's seccomp profile, a read-only root, each host path
//! read-only unless written), on opt-in nodes only, and the GPU component: NVML's device nodes
//! through the NVIDIA runtime on GPU nodes, and on no other node.

use std::collections::BTreeMap;
use std::fs;
use std::process::Command;

use serde_json::{json, Value};
use test_support::e2e::daemonset::{find_object, render, NodeAgent};
use test_support::e2e::repo_root;

/// The node label that opts a node in.
const ENABLED: (&str, &str) = ("nri-align.io/enabled", "true");
/// GPU feature discovery's label of a node with NVIDIA GPUs.
const GPU_PRESENT: (&str, &str) = ("nvidia.com/gpu.present", "true");

#[test]
fn the_rendered_daemonset_is_unprivileged_and_opt_in() {
    let agent = NodeAgent::load().expect("the DaemonSet");
    let c = &agent.daemonset["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["securityContext"],
        json!({
            "privileged": false,
            "allowPrivilegeEscalation": false,
            // Nothing added back: uid 0 owns what it writes (docs/install.md says what for).
            "capabilities": {"drop": ["ALL"]},
            "runAsUser": 0,
            "runAsGroup": 0,
            "readOnlyRootFilesystem": true,
            "seccompProfile": {"type": "RuntimeDefault"},
        })
    );
    // As the runtime gets it from the kubelet (what the image test runs with).
    let cri = agent.cri_security_context().expect("translates");
    assert_eq!(cri["privileged"], false);
    assert_eq!(cri["no_new_privs"], true);
    assert_eq!(cri["capabilities"]["drop_capabilities"], json!(["ALL"]));
    assert_eq!(cri["capabilities"]["add_capabilities"], json!([]));
    assert_eq!(cri["seccomp"]["profile_type"], "RuntimeDefault");
    assert_eq!(cri["namespace_options"], json!({"network": 2, "pid": 1}));

    let spec = &agent.daemonset["spec"]["template"]["spec"];
    assert_eq!(
        spec["nodeSelector"],
        json!({"kubernetes.io/os": "linux", ENABLED.0: ENABLED.1})
    );
    assert!(spec.get("hostIPC").is_none() && spec.get("runtimeClassName").is_none());
    // No NVIDIA device or library on the default DaemonSet.
    assert!(!c.to_string().contains("NVIDIA_"), "{c}");
    // Each host path read-only unless nri-align writes there (the mount list itself is
    // checked against the image test in kubernetes.rs).
    for m in &agent.mounts {
        let written = ["/sys/fs/cgroup", "/var/lib/nri-align", "/dev/char"]
            .contains(&m.container_path.as_str());
        assert_eq!(!m.readonly, written, "{m:?}");
    }
    assert!(
        agent.mount("/sys").is_none(),
        "the host's /sys brings its writable submounts (debugfs, bpf...)"
    );
}

/// Whether `pod_spec`'s nodeSelector and required node affinity admit a node with `labels`
/// (the scheduler's rules: every selector label equal; one term whose expressions all hold).
fn admits(pod_spec: &Value, labels: &BTreeMap<&str, &str>) -> bool {
    let selector_ok = pod_spec["nodeSelector"]
        .as_object()
        .map(|o| {
            o.iter()
                .all(|(k, v)| labels.get(k.as_str()).copied() == v.as_str())
        })
        .unwrap_or(true);
    let terms = &pod_spec["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    let Some(terms) = terms.as_array() else {
        return selector_ok;
    };
    let holds = |e: &Value| {
        let value = labels.get(e["key"].as_str().unwrap_or_default()).copied();
        let values: Vec<&str> = e["values"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        match e["operator"].as_str() {
            Some("In") => value.is_some_and(|v| values.contains(&v)),
            Some("NotIn") => !value.is_some_and(|v| values.contains(&v)),
            Some("Exists") => value.is_some(),
            Some("DoesNotExist") => value.is_none(),
            other => panic!("operator {other:?} not modelled here"),
        }
    };
    selector_ok
        && terms.iter().any(|t| {
            t["matchExpressions"]
                .as_array()
                .is_some_and(|es| es.iter().all(holds))
        })
}

/// The names of the DaemonSets among `objects` that run on a node with `labels`.
fn daemonsets_on(objects: &[Value], labels: &[(&'static str, &'static str)]) -> Vec<String> {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    objects
        .iter()
        .filter(|o| o["kind"] == "DaemonSet")
        .filter(|o| admits(&o["spec"]["template"]["spec"], &labels))
        .map(|o| {
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn the_gpu_component_gives_nvml_its_devices_on_gpu_nodes_only() {
    let Some(with) = render(&["components/gpu"]).expect("kustomize with components/gpu") else {
        test_support::skip::skip(
            "the_gpu_component_gives_nvml_its_devices_on_gpu_nodes_only",
            "kubectl not installed: kustomize rendering not checked",
        );
        return;
    };
    let without = render(&[]).expect("kustomize").expect("rendered");
    let os = ("kubernetes.io/os", "linux");

    // Which DaemonSet runs where: one per opted-in node, the GPU one exactly on GPU nodes;
    // without the component the default one everywhere opted in; nothing on other nodes.
    for (node, want_with, want_without) in [
        (vec![os, ENABLED], vec!["nri-align"], vec!["nri-align"]),
        (
            vec![os, ENABLED, GPU_PRESENT],
            vec!["nri-align-gpu"],
            vec!["nri-align"],
        ),
        (vec![os, GPU_PRESENT], vec![], vec![]),
        (vec![os], vec![], vec![]),
    ] {
        assert_eq!(daemonsets_on(&with, &node), want_with, "{node:?}");
        assert_eq!(daemonsets_on(&without, &node), want_without, "{node:?}");
    }

    // The GPU DaemonSet is the default one plus NVML's access, and nothing else: no
    // privilege, capability or mount more, no GPU taken from the device plugin.
    let gpu = find_object(&with, "DaemonSet", "nri-align-gpu").expect("nri-align-gpu");
    let base = find_object(&without, "DaemonSet", "nri-align").expect("nri-align");
    let pod = &gpu["spec"]["template"]["spec"];
    assert_eq!(pod["runtimeClassName"], "nvidia");
    let c = &pod["containers"][0];
    let env: Vec<&Value> = c["env"].as_array().expect("env").iter().collect();
    assert!(env.contains(&&json!({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})));
    assert!(env.contains(&&json!({"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"})));
    assert!(
        c["resources"].to_string().find("nvidia.com").is_none(),
        "{c}"
    );
    let mut undone = gpu.clone();
    undone["metadata"]["name"] = json!("nri-align");
    undone["metadata"]["labels"]["app.kubernetes.io/component"] = json!("node-agent");
    undone["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] =
        json!("node-agent");
    let selector = undone["spec"]["selector"]["matchLabels"]
        .as_object_mut()
        .expect("selector");
    selector.remove("app.kubernetes.io/component");
    let undone_pod = &mut undone["spec"]["template"]["spec"];
    undone_pod
        .as_object_mut()
        .expect("pod")
        .remove("runtimeClassName");
    undone_pod["nodeSelector"]
        .as_object_mut()
        .expect("nodeSelector")
        .remove(GPU_PRESENT.0);
    undone_pod["containers"][0]["env"]
        .as_array_mut()
        .expect("env")
        .retain(|e| {
            !e["name"]
                .as_str()
                .unwrap_or_default()
                .starts_with("NVIDIA_")
        });
    assert_eq!(
        &undone, base,
        "nri-align-gpu differs from nri-align elsewhere"
    );

    // Everything else is as without the component, but the default DaemonSet's affinity.
    let others = |objects: &[Value]| -> Vec<Value> {
        objects
            .iter()
            .filter(|o| o["kind"] != "DaemonSet")
            .cloned()
            .collect()
    };
    assert_eq!(others(&with), others(&without));
    let mut default = find_object(&with, "DaemonSet", "nri-align")
        .expect("nri-align")
        .clone();
    default["spec"]["template"]["spec"]
        .as_object_mut()
        .expect("pod")
        .remove("affinity");
    assert_eq!(&default, base);

    // The rendered objects validate like the files.
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("rendered-gpu.yaml");
    let text: Vec<String> = with
        .iter()
        .map(|o| serde_yaml_ng::to_string(o).expect("yaml"))
        .collect();
    fs::write(&path, text.join("---\n")).expect("write");
    let out = Command::new(repo_root().join("hack/kube-validate"))
        .arg(&path)
        .output()
        .expect("run hack/kube-validate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
