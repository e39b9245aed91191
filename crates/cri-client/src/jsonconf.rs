//! crictl's config files (pod sandbox and container configs, JSON or YAML, proto field names)
//! and crictl's JSON output (proto3 JSON with lowerCamelCase names, `inspect`'s status + info).

use std::path::{Path, PathBuf};

use protobuf::MessageFull;
use protobuf_json_mapping::{ParseOptions, PrintOptions};

/// Errors loading or printing configs.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// The file could not be read.
    #[error("read {path}: {source}")]
    Read {
        /// File that failed.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The file is not a valid config of the expected message.
    #[error("{path}: not a valid {message} config: {detail}")]
    Parse {
        /// File that failed.
        path: PathBuf,
        /// Message type expected.
        message: String,
        /// What the parser said.
        detail: String,
    },
    /// A message could not be turned into JSON.
    #[error("print {message} as JSON: {detail}")]
    Print {
        /// Message type printed.
        message: String,
        /// What went wrong.
        detail: String,
    },
}

/// What was parsed, plus the fields the parser had to skip (crictl ignores unknown fields too,
/// but a caller can warn about them).
#[derive(Debug)]
pub struct Loaded<M> {
    /// The message.
    pub message: M,
    /// `Some(reason)` when the strict parse failed and unknown fields were ignored.
    pub ignored_unknown: Option<String>,
}

/// Parses a config from text. `yaml` selects YAML input (converted to JSON first).
pub fn parse_config<M: MessageFull>(
    text: &str,
    yaml: bool,
    path: &Path,
) -> Result<Loaded<M>, JsonError> {
    let name = type_name::<M>();
    let err = |detail: String| JsonError::Parse {
        path: path.to_path_buf(),
        message: name.clone(),
        detail,
    };
    let json = if yaml {
        let v: serde_json::Value = serde_yaml_ng::from_str(text).map_err(|e| err(e.to_string()))?;
        v.to_string()
    } else {
        text.to_string()
    };
    match protobuf_json_mapping::parse_from_str::<M>(&json) {
        Ok(message) => Ok(Loaded {
            message,
            ignored_unknown: None,
        }),
        Err(strict) => {
            let lenient = ParseOptions {
                ignore_unknown_fields: true,
                ..Default::default()
            };
            match protobuf_json_mapping::parse_from_str_with_options::<M>(&json, &lenient) {
                Ok(message) => Ok(Loaded {
                    message,
                    ignored_unknown: Some(strict.to_string()),
                }),
                Err(e) => Err(err(e.to_string())),
            }
        }
    }
}

/// Loads a config file; `.yaml` / `.yml` files are YAML, anything else JSON.
pub fn load_config<M: MessageFull>(path: &Path) -> Result<Loaded<M>, JsonError> {
    let text = std::fs::read_to_string(path).map_err(|source| JsonError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    parse_config(&text, yaml, path)
}

/// Prints a message as proto3 JSON (lowerCamelCase names, like crictl's `-o json`).
pub fn to_json_value<M: MessageFull>(message: &M) -> Result<serde_json::Value, JsonError> {
    let name = type_name::<M>();
    let opts = PrintOptions {
        always_output_default_values: false,
        ..Default::default()
    };
    let text =
        protobuf_json_mapping::print_to_string_with_options(message, &opts).map_err(|e| {
            JsonError::Print {
                message: name.clone(),
                detail: e.to_string(),
            }
        })?;
    serde_json::from_str(&text).map_err(|e| JsonError::Print {
        message: name,
        detail: e.to_string(),
    })
}

/// Builds crictl's `inspect` document: `{"status": ..., KEY: parsed info[KEY]...}`. Info values
/// are JSON strings from the runtime; one that does not parse is kept as a string.
pub fn status_with_info<M: MessageFull>(
    status: Option<&M>,
    info: &std::collections::HashMap<String, String>,
) -> Result<serde_json::Value, JsonError> {
    let mut doc = serde_json::Map::new();
    if let Some(status) = status {
        doc.insert("status".into(), to_json_value(status)?);
    }
    let mut keys: Vec<_> = info.keys().collect();
    keys.sort();
    for key in keys {
        let raw = &info[key];
        let value =
            serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.clone()));
        doc.insert(key.clone(), value);
    }
    Ok(serde_json::Value::Object(doc))
}

fn type_name<M: MessageFull>() -> String {
    M::descriptor().name().to_string()
}

#[cfg(test)]
mod tests {
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
        let err = load_config::<PodSandboxConfig>(Path::new("/nonexistent/pod.json"))
            .expect_err("missing");
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
}
