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
#[path = "jsonconf_tests.rs"]
mod tests;
