use super::*;
use crate::proto::{ContainerConfig, NamespaceMode, PodSandboxConfig};

const POD: &str = r#"{
        "metadata": {"name": "p1", "namespace": "default", "uid": "u-1", "attempt": 1},
        "log_directory": "/tmp/logs",
        "annotations": {"cpu.nri-align.io/policy": "single-numa-node"},
        "labels": {"app": "x"},
        "linux": {
            "cgroup_parent": "/nri-align-test",
            "security_context": {"namespace_options": {"network": 2, "pid": 1}}
        }
    }"#;

#[test]
fn pod_config_with_proto_names() {
    let loaded: Loaded<PodSandboxConfig> =
        parse_config(POD, false, Path::new("pod.json")).expect("parse");
    assert!(loaded.ignored_unknown.is_none());
    let pod = loaded.message;
    assert_eq!(pod.metadata.name, "p1");
    assert_eq!(pod.metadata.attempt, 1);
    assert_eq!(pod.log_directory, "/tmp/logs");
    assert_eq!(
        pod.annotations
            .get("cpu.nri-align.io/policy")
            .map(String::as_str),
        Some("single-numa-node")
    );
    assert_eq!(pod.linux.cgroup_parent, "/nri-align-test");
    let ns = &pod.linux.security_context.namespace_options;
    assert_eq!(ns.network.enum_value(), Ok(NamespaceMode::NODE));
    assert_eq!(ns.pid.enum_value(), Ok(NamespaceMode::CONTAINER));
}

#[test]
fn container_config_resources_envs_devices() {
    let text = r#"{
            "metadata": {"name": "c1"},
            "image": {"image": "localhost/nri-align/busybox:1"},
            "command": ["/bin/sh", "-c", "sleep 1000"],
            "envs": [{"key": "A", "value": "1"}],
            "devices": [{"container_path": "/dev/nvidia0", "host_path": "/dev/null", "permissions": "rw"}],
            "linux": {"resources": {"cpuset_cpus": "0-1", "cpu_quota": 50000, "memory_limit_in_bytes": "67108864"}},
            "log_path": "c1.log",
            "CDI_devices": [{"name": "vendor.com/gpu=0"}]
        }"#;
    let c: ContainerConfig = parse_config(text, false, Path::new("c.json"))
        .expect("parse")
        .message;
    assert_eq!(c.command, vec!["/bin/sh", "-c", "sleep 1000"]);
    assert_eq!(c.envs[0].key, "A");
    assert_eq!(c.devices[0].container_path, "/dev/nvidia0");
    assert_eq!(c.linux.resources.cpuset_cpus, "0-1");
    assert_eq!(c.linux.resources.cpu_quota, 50000);
    assert_eq!(c.linux.resources.memory_limit_in_bytes, 64 << 20);
    assert_eq!(c.CDI_devices[0].name, "vendor.com/gpu=0");
}

#[test]
fn yaml_config() {
    let text = "metadata:\n  name: y1\nimage:\n  image: busybox\nargs: [a, b]\n";
    let c: ContainerConfig = parse_config(text, true, Path::new("c.yaml"))
        .expect("parse")
        .message;
    assert_eq!(c.metadata.name, "y1");
    assert_eq!(c.args, vec!["a", "b"]);
}

#[test]
fn unknown_fields_are_ignored_but_reported() {
    let text = r#"{"metadata": {"name": "c"}, "future_field": {"x": 1}}"#;
    let loaded: Loaded<ContainerConfig> =
        parse_config(text, false, Path::new("c.json")).expect("lenient");
    assert_eq!(loaded.message.metadata.name, "c");
    assert!(loaded.ignored_unknown.is_some());
}

#[test]
fn malformed_config_names_file_and_type() {
    let err =
        parse_config::<PodSandboxConfig>("{\"metadata\": 3}", false, Path::new("/x/pod.json"))
            .expect_err("must fail");
    let msg = err.to_string();
    assert!(
        msg.contains("/x/pod.json") && msg.contains("PodSandboxConfig"),
        "{msg}"
    );
    let err =
        load_config::<PodSandboxConfig>(Path::new("/nonexistent/pod.json")).expect_err("missing");
    assert!(matches!(err, JsonError::Read { .. }));
}

#[test]
fn inspect_document_parses_info() {
    let pod: PodSandboxConfig = parse_config(POD, false, Path::new("p"))
        .expect("parse")
        .message;
    let mut info = std::collections::HashMap::new();
    info.insert(
        "info".to_string(),
        r#"{"pid": 42, "runtimeSpec": {"linux": {}}}"#.to_string(),
    );
    info.insert("raw".to_string(), "not json".to_string());
    let doc = status_with_info(Some(&pod), &info).expect("doc");
    assert_eq!(doc["info"]["pid"], 42);
    assert_eq!(doc["raw"], "not json");
    // Output uses proto3 JSON names (lowerCamelCase), like crictl.
    assert_eq!(doc["status"]["logDirectory"], "/tmp/logs");
    assert_eq!(doc["status"]["linux"]["cgroupParent"], "/nri-align-test");
}
