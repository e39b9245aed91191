//! The Kubernetes manifests of `packaging/kubernetes/`, offline. Every
//! resource validates strictly against the Kubernetes OpenAPI schemas (hack/kube-validate:
//! kubernetes-validate from PyPI, pinned, in a venv under .cache/), and a broken copy does not;
//! the kustomization lists exactly the resource files (and `kubectl kustomize`, where a kubectl
//! is installed, renders exactly them); the DaemonSet has what a node agent needs and agrees with
//! the ConfigMap's config, the image version and the mounts the image test runs with.

use std::collections::BTreeSet;
use std::fs;
use std::process::Command;

use serde_json::{json, Value};
use test_support::e2e::daemonset::{load_documents, load_one, manifests_dir, NodeAgent, Source};
use test_support::e2e::repo_root;

fn resource_files() -> BTreeSet<String> {
    fs::read_dir(manifests_dir())
        .expect("packaging/kubernetes")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect()
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
    let text = fs::read_to_string(manifests_dir().join("daemonset.yaml")).expect("read");
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
    assert_eq!(listed, resource_files());

    // Every namespaced object already names the namespace, so kustomize's namespace
    // transformer changes nothing and `kubectl apply -f` of one file means the same.
    let mut objects = Vec::new();
    for f in &listed {
        objects.extend(load_documents(f).expect("parse"));
    }
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
    let Ok(out) = Command::new("kubectl")
        .args(["kustomize"])
        .arg(manifests_dir())
        .output()
    else {
        eprintln!("kubectl not installed: kustomize rendering not compared");
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut rendered = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_slice(&out.stdout) {
        let v: Value = serde::Deserialize::deserialize(doc).expect("kustomize output");
        rendered.push(v);
    }
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

    // The image is this version's.
    assert_eq!(
        agent.image,
        format!("localhost/nri-align:{}", env!("CARGO_PKG_VERSION"))
    );

    // uid 0 and privileged, for the reasons in docs/install.md; the image alone is not root.
    assert!(agent.privileged);
    assert_eq!(agent.run_as_user, Some(0));
    assert!(agent.readonly_rootfs);

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
        ("/var/run/nri", "/var/run/nri", false),
        ("/sys", "/sys", true),
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
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), *c))
    .collect();
    assert_eq!(mounts, want);

    // The arguments point into those mounts: the socket into the NRI socket dir, the state
    // dir at its mount, the config at the ConfigMap's key.
    assert_eq!(agent.args.first().map(String::as_str), Some("run"));
    assert_eq!(agent.arg("--socket"), Some("/var/run/nri/nri.sock"));
    assert_eq!(agent.arg("--state-dir"), Some("/var/lib/nri-align"));
    let config_path = agent.arg("--config").expect("--config");
    let Some(Source::ConfigMap { data, .. }) = agent.mount("/etc/nri-align").map(|m| &m.source)
    else {
        panic!("no ConfigMap at /etc/nri-align");
    };
    let key = config_path
        .strip_prefix("/etc/nri-align/")
        .expect("config under the ConfigMap mount");
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
    // Exactly what the publisher calls (src/nrt/publish.rs: get_opt, create, replace), nothing
    // more: no list, watch, patch or delete, and nothing outside the NRT resource.
    assert_eq!(
        role["rules"],
        json!([{
            "apiGroups": ["topology.node.k8s.io"],
            "resources": ["noderesourcetopologies"],
            "verbs": ["get", "create", "update"],
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
    let script = fs::read_to_string(repo_root().join("hack/apiserver-up")).expect("apiserver-up");
    let subject = format!(
        "user:system:serviceaccount:{}:{}",
        sa["metadata"]["namespace"].as_str().expect("namespace"),
        sa["metadata"]["name"].as_str().expect("name")
    );
    let granted: Vec<Value> = script
        .lines()
        .filter(|l| l.starts_with(&subject))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "rule line {l:?}");
            json!({
                "apiGroups": [f[2]],
                "resources": [f[3]],
                "verbs": f[1].split(',').collect::<Vec<_>>(),
            })
        })
        .collect();
    assert_eq!(
        Value::Array(granted),
        role["rules"],
        "hack/apiserver-up's authorization rules for {subject} differ from rbac.yaml"
    );
}

/// `kubectl kustomize` of an overlay (outside the repository, as an operator's is).
fn kustomize_overlay(text: &str) -> Option<Vec<Value>> {
    let dir = tempfile::tempdir().expect("tmp");
    // kustomize takes relative paths only: from the overlay up to `/`, then down to the repo.
    let up = "../".repeat(dir.path().components().count() - 1);
    let repo = format!(
        "{up}{}",
        repo_root().display().to_string().trim_start_matches('/')
    );
    fs::write(
        dir.path().join("kustomization.yaml"),
        text.replace("REPO", &repo),
    )
    .expect("write overlay");
    let Ok(out) = Command::new("kubectl")
        .args(["kustomize"])
        .arg(dir.path())
        .output()
    else {
        eprintln!("kubectl not installed: kustomize rendering not checked");
        return None;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        serde_yaml_ng::Deserializer::from_slice(&out.stdout)
            .map(|doc| serde::Deserialize::deserialize(doc).expect("kustomize output"))
            .collect(),
    )
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

    let Some(with) = kustomize_overlay(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources: [REPO/packaging/kubernetes]\n\
         components: [REPO/packaging/kubernetes/components/nrt-crd]\n",
    ) else {
        return;
    };
    let Some(without) = kustomize_overlay(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources: [REPO/packaging/kubernetes]\n",
    ) else {
        return;
    };
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
