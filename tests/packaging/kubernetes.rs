//! The Kubernetes manifests of `packaging/kubernetes/`, offline. Every
//! resource validates strictly against the Kubernetes OpenAPI schemas (hack/kube-validate:
//! kubernetes-validate from PyPI, pinned, in a venv under .cache/), and a broken copy does not;
//! the kustomization lists exactly the resource files (and `kubectl kustomize`, where a kubectl
//! is installed, renders exactly them); the DaemonSet has what a node agent needs and agrees with
//! the ConfigMap's config and the mounts the image test runs with (the image: image_tag.rs); the
//! rendered DaemonSet is unprivileged and opt-in (kubernetes_security.rs), and the GPU
//! component adds NVML's devices on GPU nodes only.

use std::collections::BTreeSet;
use std::fs;
use std::process::Command;

use serde_json::{json, Value};
use test_support::e2e::daemonset::{
    load_documents, load_one, manifests_dir, render, unrendered, NodeAgent, Source,
};
use test_support::e2e::repo_root;

/// The resource files of `dir` (relative to packaging/kubernetes; "" for itself).
fn resource_files_in(dir: &str) -> BTreeSet<String> {
    fs::read_dir(manifests_dir().join(dir))
        .expect("packaging/kubernetes")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect()
}

/// The base's resource files: its own and its DaemonSet directory's.
fn resource_files() -> BTreeSet<String> {
    let mut files = resource_files_in("");
    files.extend(
        resource_files_in("daemonset")
            .into_iter()
            .map(|f| format!("daemonset/{f}")),
    );
    files
}

/// hack/kube-validate on `files`, against `versions` (None: the script's default list).
fn kube_validate(files: &[std::path::PathBuf], versions: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(repo_root().join("hack/kube-validate"));
    if let Some(v) = versions {
        cmd.env("NRI_ALIGN_KUBE_VERSIONS", v);
    }
    cmd.args(files).output().expect("run hack/kube-validate")
}

#[test]
fn manifests_validate_against_the_kubernetes_schemas() {
    let files: Vec<_> = resource_files()
        .iter()
        .map(|f| manifests_dir().join(f))
        .collect();
    let out = kube_validate(&files, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains(&format!("{} file(s)", files.len())),
        "{stderr}"
    );

    // The validator rejects what the API server would: a misspelt field, a wrong type.
    let dir = tempfile::tempdir().expect("tmp");
    let text = fs::read_to_string(manifests_dir().join("daemonset/daemonset.yaml")).expect("read");
    for (what, broken) in [
        (
            "unknown field",
            text.replace(
                "hostNetwork: true",
                "hostNetwork: true\n      hostNetwrk: true",
            ),
        ),
        (
            "wrong type",
            text.replace("containerPort: 9464", "containerPort: metrics"),
        ),
    ] {
        assert_ne!(broken, text, "{what}: the edit must apply");
        let path = dir.path().join("daemonset.yaml");
        fs::write(&path, broken).expect("write");
        let out = kube_validate(&[path], Some("1.37.0"));
        assert!(
            !out.status.success(),
            "{what} passed validation: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn kustomization_lists_every_resource_file() {
    let k = load_one("kustomization.yaml", "Kustomization").expect("kustomization");
    assert_eq!(k["namespace"], "nri-align");
    let listed: BTreeSet<String> = k["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect();
    // The files beside it, and the DaemonSet's directory (a kustomization of its own, so that
    // components/gpu can make its DaemonSet from the same file), which lists all of its files.
    let mut want = resource_files_in("");
    want.insert("daemonset".into());
    assert_eq!(listed, want);
    let sub = load_one("daemonset/kustomization.yaml", "Kustomization").expect("daemonset/");
    let sub_listed: BTreeSet<String> = sub["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect();
    assert_eq!(sub_listed, resource_files_in("daemonset"));

    // Every namespaced object already names the namespace, so kustomize's namespace
    // transformer changes nothing and `kubectl apply -f` of one file means the same.
    let objects = unrendered().expect("the resource files parse");
    assert_eq!(
        objects.len(),
        resource_files()
            .iter()
            .map(|f| load_documents(f).expect("parse").len())
            .sum::<usize>()
    );
    for o in &objects {
        let cluster_scoped = matches!(
            o["kind"].as_str(),
            Some("Namespace" | "ClusterRole" | "ClusterRoleBinding")
        );
        if !cluster_scoped {
            assert_eq!(o["metadata"]["namespace"], "nri-align", "{o}");
        }
    }

    // The real kustomize (built into kubectl) renders exactly these objects, where installed.
    // kubectl is no dependency of the project; without it the listing check above stands.
    let Some(rendered) = render(&[]).expect("kubectl kustomize") else {
        test_support::skip::skip(
            "kustomization_lists_every_resource_file",
            "kubectl not installed: kustomize rendering not compared",
        );
        return;
    };
    let key = |v: &Value| format!("{}/{}", v["kind"], v["metadata"]["name"]);
    let mut want: Vec<_> = objects.iter().map(|o| (key(o), o.clone())).collect();
    let mut got: Vec<_> = rendered.iter().map(|o| (key(o), o.clone())).collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, want, "kubectl kustomize renders something else");
}

#[test]
fn daemonset_is_a_node_agent_that_matches_config_image_and_image_test() {
    let agent = NodeAgent::load().expect("daemonset");
    let spec = &agent.daemonset["spec"]["template"]["spec"];
    assert_eq!(spec["priorityClassName"], "system-node-critical");
    assert_eq!(spec["tolerations"], json!([{"operator": "Exists"}]));
    assert_eq!(spec["serviceAccountName"], "nri-align");
    assert!(agent.host_network && !agent.host_pid);
    assert_eq!(
        agent.daemonset["spec"]["updateStrategy"]["type"],
        "RollingUpdate"
    );
    assert!(
        agent.daemonset["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"].is_number()
    );

    // The image and its tag: image_tag.rs.

    // The mounts the image test stands in for, each with its access.
    let mounts: Vec<(String, String, bool)> = agent
        .mounts
        .iter()
        .map(|m| {
            let src = match &m.source {
                Source::HostPath(p) => p.clone(),
                Source::ConfigMap { name, .. } => format!("configmap:{name}"),
            };
            (src, m.container_path.clone(), m.readonly)
        })
        .collect();
    let want: Vec<(String, String, bool)> = [
        ("/var/run/nri", "/var/run/nri", true),
        ("/sys/fs/cgroup", "/sys/fs/cgroup", false),
        ("/dev", "/dev", true),
        ("/dev/char", "/dev/char", false),
        ("/var/lib/nri-align", "/var/lib/nri-align", false),
        (
            "/var/lib/kubelet/pod-resources",
            "/var/lib/kubelet/pod-resources",
            true,
        ),
        ("configmap:nri-align-config", "/etc/nri-align", true),
        ("/etc/cdi", "/etc/cdi", true),
        ("/var/run/cdi", "/var/run/cdi", true),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), *c))
    .collect();
    assert_eq!(mounts, want);

    // The arguments point into those mounts: the socket into the NRI socket dir, the state
    // dir at its mount, the config at the ConfigMap's mount.
    assert_eq!(agent.args.first().map(String::as_str), Some("run"));
    assert_eq!(agent.arg("--socket"), Some("/var/run/nri/nri.sock"));
    assert_eq!(agent.arg("--state-dir"), Some("/var/lib/nri-align"));
    let config_path = agent.arg("--config").expect("--config");
    let Some(Source::ConfigMap { data, .. }) = agent.mount("/etc/nri-align").map(|m| &m.source)
    else {
        panic!("no ConfigMap at /etc/nri-align");
    };
    // The whole ConfigMap as a directory of sections: every node reads `default` unless a
    // `group.`/`node.` key names it.
    assert_eq!(
        config_path, "/etc/nri-align",
        "--config is the ConfigMap's directory"
    );
    let key = "default";
    let config = &data.iter().find(|(k, _)| k == key).expect("config key").1;

    // The ConfigMap's config is packaging/config/nri-align.yaml, metrics on the node's
    // addresses at the port the DaemonSet declares and probes.
    let shipped =
        fs::read_to_string(repo_root().join("packaging/config/nri-align.yaml")).expect("config");
    let port = agent.metrics_port.expect("metrics port");
    assert_eq!(
        *config,
        shipped.replace(
            "metrics_address: null",
            &format!("metrics_address: \"0.0.0.0:{port}\"")
        ),
        "configmap.yaml and packaging/config/nri-align.yaml differ"
    );
    let c = &spec["containers"][0];
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{probe}");
    }
    // Requests and a memory limit; no CPU limit (throttling would time NRI calls out).
    assert!(c["resources"]["requests"]["cpu"].is_string());
    assert!(c["resources"]["requests"]["memory"].is_string());
    assert!(c["resources"]["limits"]["memory"].is_string());
    assert!(c["resources"]["limits"].get("cpu").is_none());
}

#[test]
fn rbac_grants_the_node_resource_topology_verbs_to_the_service_account() {
    let role = load_one("rbac.yaml", "ClusterRole").expect("role");
    // Exactly what the publisher calls (src/nrt/publish.rs: get_opt, create, replace) and the
    // read of the node's own labels at start (src/cli/run/fleet.rs: get), nothing more: no
    // list, watch, patch or delete, and nothing outside those two resources.
    assert_eq!(
        role["rules"],
        json!([{
            "apiGroups": ["topology.node.k8s.io"],
            "resources": ["noderesourcetopologies"],
            "verbs": ["get", "create", "update"],
        }, {
            "apiGroups": [""],
            "resources": ["nodes"],
            "verbs": ["get"],
        }])
    );
    let binding = load_one("rbac.yaml", "ClusterRoleBinding").expect("binding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let sa = load_one("serviceaccount.yaml", "ServiceAccount").expect("sa");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}])
    );

    // The test API server (hack/apiserver-up) authorizes that service account with exactly
    // these rules, so the tests that publish with its token (tests/e2e/nrt.rs,
    // tests/daemon/nrt_apiserver.rs) prove the shipped role is enough.
    let (granted, _) = harness_rules(&sa);
    assert_eq!(
        Value::Array(granted),
        role["rules"],
        "hack/apiserver-up's authorization rules for the service account differ from rbac.yaml"
    );
}

/// API groups of the test API server's stand-ins (hack/apiserver/stand-ins/) and the core
/// resource each stands for: (group, resource, upstream group, upstream resource).
const STAND_INS: [(&str, &str, &str, &str); 2] = [
    ("core.k8s.io", "pods", "", "pods"),
    ("policy.k8s.io", "evictions", "", "pods/eviction"),
];

/// hack/apiserver-up's authorization rules for service account `sa`, as RBAC rules: those on
/// real resources, and those on the stand-ins written as the resources they stand for.
fn harness_rules(sa: &Value) -> (Vec<Value>, Vec<Value>) {
    let script = fs::read_to_string(repo_root().join("hack/apiserver-up")).expect("apiserver-up");
    let subject = format!(
        "user:system:serviceaccount:{}:{}",
        sa["metadata"]["namespace"].as_str().expect("namespace"),
        sa["metadata"]["name"].as_str().expect("name")
    );
    let (mut real, mut stand_in) = (Vec::new(), Vec::new());
    for l in script.lines().filter(|l| l.starts_with(&subject)) {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(f.len(), 4, "rule line {l:?}");
        // The webhook's rules file writes the core API group as "".
        let group = if f[2] == "\"\"" { "" } else { f[2] };
        let verbs = f[1].split(',').collect::<Vec<_>>();
        match STAND_INS.iter().find(|s| s.0 == group && s.1 == f[3]) {
            Some(&(_, _, g, r)) => stand_in.push(json!({
                "apiGroups": [g], "resources": [r], "verbs": verbs,
            })),
            None => real.push(json!({
                "apiGroups": [group], "resources": [f[3]], "verbs": verbs,
            })),
        }
    }
    (real, stand_in)
}

/// The optional evict component grants exactly what src/evict/api.rs calls (get a pod, create
/// its eviction) to the service account, adds nothing else to what the kustomization renders,
/// validates against the schemas, and is what the test API server grants on its stand-ins.
#[test]
fn the_evict_component_grants_the_pod_read_and_the_eviction_and_nothing_else() {
    let file = "components/evict/rbac.yaml";
    let role = load_one(file, "ClusterRole").expect("role");
    assert_eq!(
        role["rules"],
        json!([{
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["get"],
        }, {
            "apiGroups": [""],
            "resources": ["pods/eviction"],
            "verbs": ["create"],
        }])
    );
    let binding = load_one(file, "ClusterRoleBinding").expect("binding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let sa = load_one("serviceaccount.yaml", "ServiceAccount").expect("sa");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}])
    );
    let (_, stand_in) = harness_rules(&sa);
    assert_eq!(
        Value::Array(stand_in),
        role["rules"],
        "hack/apiserver-up's rules on the stand-ins differ from components/evict"
    );
    let out = kube_validate(&[manifests_dir().join(file)], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let component =
        load_one("components/evict/kustomization.yaml", "Component").expect("component");
    assert_eq!(component["resources"], json!(["rbac.yaml"]));

    let Some(with) = render(&["components/evict"]).expect("kustomize") else {
        test_support::skip::skip(
            "the_evict_component_grants_the_pod_read_and_the_eviction_and_nothing_else",
            "kubectl not installed: kustomize rendering not checked",
        );
        return;
    };
    let without = render(&[]).expect("kustomize").expect("rendered");
    let (added, rest): (Vec<Value>, Vec<Value>) = with
        .into_iter()
        .partition(|o| o["metadata"]["name"] == "nri-align-evict");
    assert_eq!(rest, without, "the component changes nothing else");
    let kinds: Vec<&Value> = added.iter().map(|o| &o["kind"]).collect();
    assert_eq!(kinds, [&json!("ClusterRole"), &json!("ClusterRoleBinding")]);
    assert_eq!(added[1]["subjects"], binding["subjects"]);
}

/// The optional component adds the NodeResourceTopology CRD, unchanged and without a
/// namespace (it is cluster-scoped), to exactly what the kustomization renders without it;
/// the component's files validate against the schemas like the rest.
#[test]
fn the_nrt_crd_component_adds_the_crd_and_nothing_else() {
    let crd_file = "crd/noderesourcetopology-v1alpha2.yaml";
    let crd = load_one(crd_file, "CustomResourceDefinition").expect("crd");
    let out = kube_validate(&[manifests_dir().join(crd_file)], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let component =
        load_one("components/nrt-crd/kustomization.yaml", "Component").expect("component");
    assert_eq!(component["resources"], json!(["../../crd"]));

    let Some(with) = render(&["components/nrt-crd"]).expect("kustomize") else {
        test_support::skip::skip(
            "the_nrt_crd_component_adds_the_crd_and_nothing_else",
            "kubectl not installed: kustomize rendering not checked",
        );
        return;
    };
    let without = render(&[]).expect("kustomize").expect("rendered");
    let (crds, rest): (Vec<Value>, Vec<Value>) = with
        .into_iter()
        .partition(|o| o["kind"] == "CustomResourceDefinition");
    assert_eq!(rest, without, "the component changes nothing else");
    assert_eq!(crds.len(), 1);
    assert_eq!(crds[0]["metadata"]["name"], crd["metadata"]["name"]);
    assert!(
        crds[0]["metadata"].get("namespace").is_none(),
        "{}",
        crds[0]["metadata"]
    );
    assert_eq!(crds[0]["spec"], crd["spec"], "the CRD as upstream ships it");
}
