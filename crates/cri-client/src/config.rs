//! Where the client connects and how long it waits: crictl's flags, environment variables and
//! config file (crictl.yaml), with crictl's precedence (flag, then env, then file, then default).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default runtime endpoint when nothing else names one (containerd's default socket).
pub const DEFAULT_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
/// Default config file crictl reads.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/crictl.yaml";
/// Default per-call timeout (crictl's default is 2 s; containers can take longer to create on a
/// loaded 2-core box, and the config file or flag can lower it).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors reading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file exists but could not be read.
    #[error("read {path}: {source}")]
    Read {
        /// File that failed.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The config file is not valid YAML of the expected shape.
    #[error("parse {path}: {message}")]
    Parse {
        /// File that failed.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// An endpoint is not a unix socket address.
    #[error("unsupported endpoint {0:?}: only unix:// sockets (or plain paths) are supported")]
    Endpoint(String),
    /// A timeout could not be parsed.
    #[error("bad timeout {0:?}: want seconds (\"10\") or a duration (\"500ms\", \"2s\", \"1m\")")]
    Timeout(String),
}

/// The subset of crictl.yaml the client honours.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FileConfig {
    /// `runtime-endpoint`.
    pub runtime_endpoint: Option<String>,
    /// `image-endpoint`.
    pub image_endpoint: Option<String>,
    /// `timeout` (seconds in crictl.yaml; a duration string is accepted too).
    pub timeout: Option<Duration>,
}

impl FileConfig {
    /// Parses crictl.yaml text. Unknown keys (debug, pull-image-on-create...) are ignored like
    /// crictl does.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let parse_err = |message: String| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        };
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let value: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|e| parse_err(e.to_string()))?;
        let map = match value {
            serde_yaml_ng::Value::Mapping(m) => m,
            serde_yaml_ng::Value::Null => return Ok(Self::default()),
            _ => return Err(parse_err("top level is not a mapping".into())),
        };
        let mut cfg = Self::default();
        for (key, val) in map {
            let Some(key) = key.as_str() else { continue };
            match key {
                "runtime-endpoint" | "image-endpoint" => {
                    let s = val
                        .as_str()
                        .ok_or_else(|| parse_err(format!("{key} is not a string")))?
                        .to_string();
                    if key == "runtime-endpoint" {
                        cfg.runtime_endpoint = Some(s).filter(|s| !s.is_empty());
                    } else {
                        cfg.image_endpoint = Some(s).filter(|s| !s.is_empty());
                    }
                }
                "timeout" => {
                    let raw = match &val {
                        serde_yaml_ng::Value::Number(n) => n.to_string(),
                        serde_yaml_ng::Value::String(s) => s.clone(),
                        _ => return Err(parse_err("timeout is not a number".into())),
                    };
                    cfg.timeout = Some(parse_timeout(&raw).map_err(|e| parse_err(e.to_string()))?);
                }
                _ => {}
            }
        }
        Ok(cfg)
    }

    /// Loads `path`; a missing file is an empty config unless `required` (named explicitly).
    pub fn load(path: &Path, required: bool) -> Result<Self, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => Ok(Self::default()),
            Err(source) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }
}

/// Parses a timeout: bare number = seconds; else a number with `ms`, `s`, `m` or `h`.
pub fn parse_timeout(raw: &str) -> Result<Duration, ConfigError> {
    let s = raw.trim();
    let bad = || ConfigError::Timeout(raw.to_string());
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: f64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(bad()),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Turns an endpoint (`unix:///path`, `unix:/path` or a plain absolute path) into a socket path.
pub fn socket_path(endpoint: &str) -> Result<PathBuf, ConfigError> {
    let path = if let Some(rest) = endpoint.strip_prefix("unix://") {
        rest
    } else if let Some(rest) = endpoint.strip_prefix("unix:") {
        rest
    } else if endpoint.starts_with('/') {
        endpoint
    } else {
        return Err(ConfigError::Endpoint(endpoint.to_string()));
    };
    if path.is_empty() {
        return Err(ConfigError::Endpoint(endpoint.to_string()));
    }
    Ok(PathBuf::from(path))
}

/// Values given on the command line or through the environment (clap merges those two).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--runtime-endpoint` / `CONTAINER_RUNTIME_ENDPOINT`.
    pub runtime_endpoint: Option<String>,
    /// `--image-endpoint` / `IMAGE_SERVICE_ENDPOINT`.
    pub image_endpoint: Option<String>,
    /// `--timeout`.
    pub timeout: Option<String>,
    /// `--config` / `CRI_CONFIG_FILE`.
    pub config: Option<PathBuf>,
}

/// The effective settings of one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Socket of the runtime service.
    pub runtime_socket: PathBuf,
    /// Socket of the image service (the runtime's unless set apart).
    pub image_socket: PathBuf,
    /// Deadline of each call.
    pub timeout: Duration,
}

impl Settings {
    /// Resolves the settings with crictl's precedence: flag/env, config file, defaults.
    pub fn resolve(over: &Overrides) -> Result<Self, ConfigError> {
        let file = match &over.config {
            Some(path) => FileConfig::load(path, true)?,
            None => FileConfig::load(Path::new(DEFAULT_CONFIG_FILE), false)?,
        };
        let runtime = over
            .runtime_endpoint
            .clone()
            .filter(|s| !s.is_empty())
            .or(file.runtime_endpoint.clone())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let image = over
            .image_endpoint
            .clone()
            .filter(|s| !s.is_empty())
            .or(file.image_endpoint.clone())
            .unwrap_or_else(|| runtime.clone());
        let timeout = match &over.timeout {
            Some(t) => parse_timeout(t)?,
            None => file.timeout.unwrap_or(DEFAULT_TIMEOUT),
        };
        Ok(Self {
            runtime_socket: socket_path(&runtime)?,
            image_socket: socket_path(&image)?,
            timeout,
        })
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
