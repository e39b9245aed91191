//! The kubelet PodResources settings: the socket, the resource names read and the deadline of
//! one lookup, with their bounds.

use std::path::PathBuf;

use super::RawConfig;
use crate::untrusted;

/// Where and how the kubelet's PodResources API is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodResourcesConfig {
    /// The kubelet's socket.
    pub socket: PathBuf,
    /// Resource names read (a trailing `*` matches any rest).
    pub resources: Vec<String>,
    /// Deadline of one lookup (connect and Get together).
    pub timeout: std::time::Duration,
}

impl Default for PodResourcesConfig {
    fn default() -> Self {
        Self {
            socket: PathBuf::from(podresources::DEFAULT_SOCKET),
            resources: podresources::DEFAULT_RESOURCES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            timeout: std::time::Duration::from_millis(DEFAULT_PODRESOURCES_TIMEOUT_MS),
        }
    }
}

/// Default deadline of a PodResources lookup: well inside the 2 s a runtime gives an NRI call,
/// with room for the decision itself.
pub const DEFAULT_PODRESOURCES_TIMEOUT_MS: u64 = 300;
/// Longest deadline accepted.
pub const MAX_PODRESOURCES_TIMEOUT_MS: u64 = 1500;

pub(super) fn podresources_config(raw: &RawConfig) -> Result<Option<PodResourcesConfig>, String> {
    let defaults = PodResourcesConfig::default();
    let socket = match &raw.podresources_socket {
        None => defaults.socket,
        Some(p) if p.as_os_str().is_empty() => return Ok(None),
        Some(p) if p.is_absolute() => p.clone(),
        Some(p) => {
            return Err(format!(
                "podresources_socket {} must be an absolute path (or \"\" to turn it off)",
                p.display()
            ))
        }
    };
    let resources = raw
        .podresources_resources
        .clone()
        .unwrap_or(defaults.resources);
    if let Some(r) = resources
        .iter()
        .find(|r| r.trim().is_empty() || r.len() > 253)
    {
        return Err(format!(
            "podresources_resources has a bad entry {}",
            untrusted::quoted(r)
        ));
    }
    let ms = raw
        .podresources_timeout_ms
        .unwrap_or(DEFAULT_PODRESOURCES_TIMEOUT_MS);
    if ms == 0 || ms > MAX_PODRESOURCES_TIMEOUT_MS {
        return Err(format!(
            "podresources_timeout_ms {ms} must be 1 to {MAX_PODRESOURCES_TIMEOUT_MS} (a runtime \
             gives a whole NRI call 2 s)"
        ));
    }
    Ok(Some(PodResourcesConfig {
        socket,
        resources,
        timeout: std::time::Duration::from_millis(ms),
    }))
}
