//! CDI spec files: the JSON or YAML documents a device driver writes into `/etc/cdi` or
//! `/var/run/cdi` to tell a runtime what injecting `vendor/class=name` means.
//!
//! The model follows cncf-tags/container-device-interface `specs-go/config.go` (spec 1.1.0)
//! field for field, with the JSON/YAML names it declares; `specs-go/version.go` gives the
//! versions and which fields need which version. nri-align reads the parts that say which host
//! devices a container gets (device nodes, net devices) and keeps env and mounts for the
//! record; hooks, `intelRdt` and `additionalGids` are accepted and ignored.
//!
//! Parsing is pure: bytes in, a validated [`Spec`] or a [`SpecError`] out.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::cdi::{validate_device_name, validate_vendor_or_class};
use crate::excerpt;

/// Largest spec file read (the NVIDIA driver's spec of 8 GPUs with MIG is a few tens of KiB).
pub const MAX_SPEC_BYTES: usize = 1024 * 1024;

/// Most devices one spec may declare.
pub const MAX_SPEC_DEVICES: usize = 4096;

/// The spec versions accepted: the reference library's cache reads `0.3.0` (its earliest
/// supported) to `1.1.0` (current), with an optional leading `v`.
pub const VERSIONS: [&str; 8] = [
    "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
];

/// One spec file (`Spec`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Spec {
    /// `cdiVersion`.
    #[serde(rename = "cdiVersion")]
    pub version: String,
    /// `kind`: `vendor/class`.
    pub kind: String,
    /// Spec annotations (0.6.0).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// The devices.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// Edits applied with every device of the spec.
    #[serde(default, rename = "containerEdits")]
    pub container_edits: ContainerEdits,
}

/// One device (`Device`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Device {
    /// Name within the spec's kind.
    pub name: String,
    /// Device annotations (0.6.0).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Its own edits.
    #[serde(default, rename = "containerEdits")]
    pub container_edits: ContainerEdits,
}

/// `ContainerEdits`: what a runtime changes in the OCI spec for a device.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ContainerEdits {
    /// `KEY=VALUE` entries.
    #[serde(default)]
    pub env: Vec<String>,
    /// Device nodes.
    #[serde(default, rename = "deviceNodes")]
    pub device_nodes: Vec<DeviceNode>,
    /// Network devices moved into the container (1.1.0).
    #[serde(default, rename = "netDevices")]
    pub net_devices: Vec<NetDevice>,
    /// Mounts.
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// Hooks: only whether there are any is kept (nri-align never runs them).
    #[serde(default)]
    pub hooks: Vec<serde::de::IgnoredAny>,
    /// `intelRdt` (0.7.0): only whether it is set.
    #[serde(default, rename = "intelRdt")]
    pub intel_rdt: Option<serde::de::IgnoredAny>,
    /// `additionalGids` (0.7.0).
    #[serde(default, rename = "additionalGids")]
    pub additional_gids: Vec<u32>,
}

/// `DeviceNode`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct DeviceNode {
    /// Path in the container.
    pub path: String,
    /// Path on the host (0.5.0); `path` when empty.
    #[serde(default, rename = "hostPath")]
    pub host_path: String,
    /// `c`, `b`, `u` or `p`; empty when the runtime is to stat the node.
    #[serde(default, rename = "type")]
    pub kind: String,
    /// Major number; 0 when the runtime is to stat the node.
    #[serde(default)]
    pub major: i64,
    /// Minor number.
    #[serde(default)]
    pub minor: i64,
    /// Permissions (`rwm`).
    #[serde(default)]
    pub permissions: String,
}

impl DeviceNode {
    /// The node's path on the host: `hostPath` when set, else `path`.
    pub fn host(&self) -> &str {
        if self.host_path.is_empty() {
            &self.path
        } else {
            &self.host_path
        }
    }
}

/// `LinuxNetDevice` (1.1.0).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct NetDevice {
    /// Interface on the host.
    #[serde(rename = "hostInterfaceName")]
    pub host_interface_name: String,
    /// Its name in the container.
    #[serde(default)]
    pub name: String,
}

/// `Mount`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Mount {
    /// Source on the host.
    #[serde(rename = "hostPath")]
    pub host_path: String,
    /// Destination in the container.
    #[serde(rename = "containerPath")]
    pub container_path: String,
    /// Mount options.
    #[serde(default)]
    pub options: Vec<String>,
    /// File system type (0.4.0).
    #[serde(default, rename = "type")]
    pub kind: String,
}

/// The two encodings a spec file may have, told by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `.json`.
    Json,
    /// `.yaml` or `.yml`.
    Yaml,
}

impl Format {
    /// The format of a file named `name`, `None` for anything that is no spec file.
    pub fn of(name: &str) -> Option<Format> {
        if name.ends_with(".json") {
            Some(Format::Json)
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            Some(Format::Yaml)
        } else {
            None
        }
    }
}

/// Why a spec file was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Over [`MAX_SPEC_BYTES`] or [`MAX_SPEC_DEVICES`].
    #[error("spec too large: {what} {len} (limit {limit})")]
    TooLarge {
        /// What was counted.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// YAML whose aliases expand beyond the size the file may reach.
    #[error("spec refused: {0}")]
    Expansion(#[from] align_core::untrusted::yaml::ExpansionError),
    /// Not JSON or YAML of the spec's shape.
    #[error("spec does not parse: {0}")]
    Parse(String),
    /// A version the reference library does not accept, or one older than a field it uses.
    #[error("spec version {given:?}: {why}")]
    Version {
        /// The version given (shortened).
        given: String,
        /// What is wrong with it.
        why: String,
    },
    /// A kind, a device name or a device node breaks a rule.
    #[error("spec invalid: {0}")]
    Invalid(String),
}

/// Parses and validates a spec file's bytes.
pub fn parse(bytes: &[u8], format: Format) -> Result<Spec, SpecError> {
    if bytes.len() > MAX_SPEC_BYTES {
        return Err(SpecError::TooLarge {
            what: "bytes",
            len: bytes.len(),
            limit: MAX_SPEC_BYTES,
        });
    }
    let spec: Spec = match format {
        Format::Json => serde_json::from_slice(bytes).map_err(|e| SpecError::Parse(short(&e)))?,
        Format::Yaml => {
            // The size cap above does not bound what aliases expand to.
            align_core::untrusted::yaml::check_bytes(bytes)?;
            serde_yaml_ng::from_slice(bytes).map_err(|e| SpecError::Parse(short(&e)))?
        }
    };
    validate(&spec)?;
    Ok(spec)
}

fn short(e: &dyn std::fmt::Display) -> String {
    excerpt(&e.to_string())
}

/// The `(vendor, class)` of a spec's kind.
pub fn split_kind(kind: &str) -> Option<(&str, &str)> {
    let (vendor, class) = kind.split_once('/')?;
    (!vendor.is_empty() && !class.is_empty()).then_some((vendor, class))
}

/// The checks the reference library's `validateSpec` makes that matter to a reader: a known
/// version not older than the fields used, a valid kind and device names, device nodes with
/// absolute paths.
pub fn validate(spec: &Spec) -> Result<(), SpecError> {
    check_version(spec)?;
    let Some((vendor, class)) = split_kind(&spec.kind) else {
        return Err(SpecError::Invalid(format!(
            "kind {:?} is not vendor/class",
            excerpt(&spec.kind)
        )));
    };
    for (part, value) in [("vendor", vendor), ("class", class)] {
        validate_vendor_or_class(value)
            .map_err(|rule| SpecError::Invalid(format!("{part} {:?} {rule}", excerpt(value))))?;
    }
    if spec.devices.len() > MAX_SPEC_DEVICES {
        return Err(SpecError::TooLarge {
            what: "devices",
            len: spec.devices.len(),
            limit: MAX_SPEC_DEVICES,
        });
    }
    if spec.devices.is_empty() {
        return Err(SpecError::Invalid("no devices".into()));
    }
    for d in &spec.devices {
        validate_device_name(&d.name).map_err(|rule| {
            SpecError::Invalid(format!("device name {:?} {rule}", excerpt(&d.name)))
        })?;
        check_nodes(&d.container_edits)?;
    }
    check_nodes(&spec.container_edits)
}

fn check_nodes(edits: &ContainerEdits) -> Result<(), SpecError> {
    for n in &edits.device_nodes {
        if !n.path.starts_with('/') || !n.host().starts_with('/') {
            return Err(SpecError::Invalid(format!(
                "device node {:?} is not an absolute path",
                excerpt(n.host())
            )));
        }
    }
    Ok(())
}

/// `ValidateVersion`: a known version, and not older than what its fields need
/// (`requiresV040` ... `requiresV110` of `specs-go/version.go`, for the fields modelled here).
fn check_version(spec: &Spec) -> Result<(), SpecError> {
    let given = spec.version.strip_prefix('v').unwrap_or(&spec.version);
    let Some(index) = VERSIONS.iter().position(|v| *v == given) else {
        return Err(SpecError::Version {
            given: excerpt(&spec.version),
            why: format!("not one of {}", VERSIONS.join(", ")),
        });
    };
    let required = required_version(spec);
    let needed = VERSIONS.iter().position(|v| *v == required).unwrap_or(0);
    if index < needed {
        return Err(SpecError::Version {
            given: excerpt(&spec.version),
            why: format!("the fields used need at least {required}"),
        });
    }
    Ok(())
}

/// The oldest version that has every field `spec` uses.
pub fn required_version(spec: &Spec) -> &'static str {
    let edits = || {
        std::iter::once(&spec.container_edits)
            .chain(spec.devices.iter().map(|d| &d.container_edits))
    };
    if edits().any(|e| !e.net_devices.is_empty()) {
        return "1.1.0";
    }
    if edits().any(|e| e.intel_rdt.is_some() || !e.additional_gids.is_empty()) {
        return "0.7.0";
    }
    // 0.6.0 added annotations and dots in a class.
    let dotted_class = split_kind(&spec.kind).is_some_and(|(_, c)| c.contains('.'));
    if !spec.annotations.is_empty()
        || spec.devices.iter().any(|d| !d.annotations.is_empty())
        || dotted_class
    {
        return "0.6.0";
    }
    // 0.5.0 added `hostPath` and device names starting with a digit.
    let digit_name = spec
        .devices
        .iter()
        .any(|d| d.name.as_bytes().first().is_some_and(u8::is_ascii_digit));
    if digit_name || edits().any(|e| e.device_nodes.iter().any(|n| !n.host_path.is_empty())) {
        return "0.5.0";
    }
    if edits().any(|e| e.mounts.iter().any(|m| !m.kind.is_empty())) {
        return "0.4.0";
    }
    "0.3.0"
}

#[cfg(test)]
#[path = "cdi_spec_tests.rs"]
mod tests;
