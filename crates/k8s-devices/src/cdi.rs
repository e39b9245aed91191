//! CDI qualified device names (`vendor/class=name`) and the `cdi.k8s.io/` container annotations.
//!
//! Rules from cncf-tags/container-device-interface (v1.1.0): `pkg/parser/parser.go`
//! (`ParseQualifiedName`, `ParseDevice`, `ParseQualifier`, the three validators) and
//! `pkg/cdi/annotations.go` (`AnnotationPrefix`, `AnnotationKey`, `ParseAnnotations`).
//!
//! - vendor and class: start with a letter, end with a letter or digit, and in between letters,
//!   digits, `_`, `-`, `.`; one letter alone is valid.
//! - name: starts and ends with a letter or digit, and in between letters, digits, `_`, `-`,
//!   `.`, `:` (so a PCI address `0000:3b:00.0` or a MIG index `0:1` is a valid name).
//! - The device string splits at its first `=` (qualifier / name) and the qualifier at its first
//!   `/` (vendor / class); a string starting with `/` is a path, never a qualified name.
//! - Annotation keys are `cdi.k8s.io/` + `<plugin>_<deviceID>` (every `/` of the device id made
//!   `_`), at most 63 characters after the prefix; values are comma-separated qualified names.
//!   Device plugins set them through the kubelet (`ContainerAllocateResponse.annotations`),
//!   e.g. `cdi.k8s.io/nvidia-device-plugin_<uuid>: nvidia.com/gpu=GPU-...`.

use std::fmt;

use crate::{excerpt, MAX_ENTRIES, MAX_INPUT_LEN};

/// The annotation key prefix that marks a CDI injection request on a container.
pub const ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// Longest `<plugin>_<deviceID>` part of an annotation key (`AnnotationKey`'s maxNameLen).
pub const MAX_ANNOTATION_NAME_LEN: usize = 63;

/// A fully qualified CDI device name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QualifiedName {
    /// Vendor, e.g. `nvidia.com`.
    pub vendor: String,
    /// Device class, e.g. `gpu`, `mig`, `net-rdma`.
    pub class: String,
    /// Device name within vendor/class, e.g. `0`, `GPU-<uuid>`, `all`, `0000:3b:00.0`.
    pub name: String,
}

impl QualifiedName {
    /// `vendor/class`, the kind a CDI spec file declares.
    pub fn kind(&self) -> String {
        format!("{}/{}", self.vendor, self.class)
    }
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}={}", self.vendor, self.class, self.name)
    }
}

impl std::str::FromStr for QualifiedName {
    type Err = CdiError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_qualified_name(s)
    }
}

/// Which part of a qualified name broke a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The vendor (before `/`).
    Vendor,
    /// The class (between `/` and `=`).
    Class,
    /// The device name (after `=`).
    Name,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Vendor => "vendor",
            Part::Class => "class",
            Part::Name => "device name",
        })
    }
}

/// Why a CDI name or annotation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CdiError {
    /// Not of the form `vendor/class=name` (or a part is empty, or it starts with `/`).
    #[error("unqualified CDI device {device:?}: not of the form vendor/class=name")]
    Unqualified {
        /// The input (shortened).
        device: String,
    },
    /// A part has a character the spec does not allow there.
    #[error("invalid CDI device {device:?}: {part} {value:?} {rule}")]
    Invalid {
        /// The input (shortened).
        device: String,
        /// Which part.
        part: Part,
        /// That part (shortened).
        value: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// An annotation key under `cdi.k8s.io/` that `AnnotationKey` would never produce.
    #[error("invalid CDI annotation key {key:?}: {rule}")]
    InvalidKey {
        /// The key (shortened).
        key: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// Input over [`MAX_INPUT_LEN`] bytes or more than [`MAX_ENTRIES`] devices.
    #[error("CDI {what} too large: {len} (limit {limit})")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        limit: usize,
    },
}

/// Splits `device` into (vendor, class, name) without validating the parts, as the CDI
/// `ParseDevice` does; `None` for anything that is not shaped `vendor/class=name`.
pub fn split_device(device: &str) -> Option<(&str, &str, &str)> {
    if device.is_empty() || device.starts_with('/') {
        return None;
    }
    let (qualifier, name) = device.split_once('=')?;
    if qualifier.is_empty() || name.is_empty() {
        return None;
    }
    let (vendor, class) = qualifier.split_once('/')?;
    if vendor.is_empty() || class.is_empty() {
        return None;
    }
    Some((vendor, class, name))
}

/// Parses and validates a qualified CDI device name.
pub fn parse_qualified_name(device: &str) -> Result<QualifiedName, CdiError> {
    if device.len() > MAX_INPUT_LEN {
        return Err(CdiError::TooLarge {
            what: "device name",
            len: device.len(),
            limit: MAX_INPUT_LEN,
        });
    }
    let Some((vendor, class, name)) = split_device(device) else {
        return Err(CdiError::Unqualified {
            device: excerpt(device),
        });
    };
    validate_vendor_or_class(vendor).map_err(|rule| invalid(device, Part::Vendor, vendor, rule))?;
    validate_vendor_or_class(class).map_err(|rule| invalid(device, Part::Class, class, rule))?;
    validate_device_name(name).map_err(|rule| invalid(device, Part::Name, name, rule))?;
    Ok(QualifiedName {
        vendor: vendor.to_string(),
        class: class.to_string(),
        name: name.to_string(),
    })
}

/// Whether `device` is a valid qualified CDI device name.
pub fn is_qualified_name(device: &str) -> bool {
    parse_qualified_name(device).is_ok()
}

fn invalid(device: &str, part: Part, value: &str, rule: &'static str) -> CdiError {
    CdiError::Invalid {
        device: excerpt(device),
        part,
        value: excerpt(value),
        rule,
    }
}

/// Vendor and class rule: a letter first, a letter or digit last, `[A-Za-z0-9_.-]` between.
pub fn validate_vendor_or_class(s: &str) -> Result<(), &'static str> {
    let b = s.as_bytes();
    let (Some(&first), Some(&last)) = (b.first(), b.last()) else {
        return Err("is empty");
    };
    if !first.is_ascii_alphabetic() {
        return Err("should start with a letter");
    }
    if b.len() == 1 {
        return Ok(());
    }
    if !b[1..b.len() - 1]
        .iter()
        .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
    {
        return Err("may only contain letters, digits, '_', '-' and '.'");
    }
    if !last.is_ascii_alphanumeric() {
        return Err("should end with a letter or digit");
    }
    Ok(())
}

/// Device-name rule: a letter or digit first and last, `[A-Za-z0-9_.:-]` between.
pub fn validate_device_name(s: &str) -> Result<(), &'static str> {
    let b = s.as_bytes();
    let (Some(&first), Some(&last)) = (b.first(), b.last()) else {
        return Err("is empty");
    };
    if !first.is_ascii_alphanumeric() {
        return Err("should start with a letter or digit");
    }
    if b.len() == 1 {
        return Ok(());
    }
    if !b[1..b.len() - 1]
        .iter()
        .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b':'))
    {
        return Err("may only contain letters, digits, '_', '-', '.' and ':'");
    }
    if !last.is_ascii_alphanumeric() {
        return Err("should end with a letter or digit");
    }
    Ok(())
}

/// The annotation key a device plugin named `plugin` uses for the allocation `device_id`
/// (`AnnotationKey`): `cdi.k8s.io/<plugin>_<device_id with / as _>`.
pub fn annotation_key(plugin: &str, device_id: &str) -> Result<String, CdiError> {
    if plugin.is_empty() {
        return Err(key_error(plugin, "empty plugin name"));
    }
    if device_id.is_empty() {
        return Err(key_error(device_id, "empty device id"));
    }
    let name = format!("{plugin}_{}", device_id.replace('/', "_"));
    validate_annotation_name(&name).map_err(|rule| key_error(&name, rule))?;
    Ok(format!("{ANNOTATION_PREFIX}{name}"))
}

/// The `<plugin>_<deviceID>` rule of annotation keys: at most 63 characters, a letter or digit
/// first and last, `[A-Za-z0-9_.-]` between.
pub fn validate_annotation_name(name: &str) -> Result<(), &'static str> {
    if name.len() > MAX_ANNOTATION_NAME_LEN {
        return Err("longer than 63 characters");
    }
    let b = name.as_bytes();
    let (Some(&first), Some(&last)) = (b.first(), b.last()) else {
        return Err("empty name after the prefix");
    };
    if !first.is_ascii_alphanumeric() {
        return Err("should start with a letter or digit");
    }
    if b.len() > 2
        && !b[1..b.len() - 1]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
    {
        return Err("may only contain letters, digits, '_', '-' and '.'");
    }
    if !last.is_ascii_alphanumeric() {
        return Err("should end with a letter or digit");
    }
    Ok(())
}

fn key_error(key: &str, rule: &'static str) -> CdiError {
    CdiError::InvalidKey {
        key: excerpt(key),
        rule,
    }
}

/// The value of a CDI annotation for `devices`: the qualified names joined by `,`
/// (`AnnotationValue`; the names are valid by construction).
pub fn annotation_value(devices: &[QualifiedName]) -> String {
    devices
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// One `cdi.k8s.io/` annotation and the devices it asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdiRequest {
    /// The full annotation key.
    pub key: String,
    /// The devices of its value, in order.
    pub devices: Vec<QualifiedName>,
}

/// The CDI device requests among `annotations` (keys under [`ANNOTATION_PREFIX`]; other keys
/// are skipped), in input order. Like `ParseAnnotations`, one device that is not a qualified
/// name fails the whole parse: a runtime would refuse the container for it.
pub fn parse_annotations<'a, I>(annotations: I) -> Result<Vec<CdiRequest>, CdiError>
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let mut requests = Vec::new();
    let mut total = 0usize;
    for (key, value) in annotations {
        if !key.starts_with(ANNOTATION_PREFIX) {
            continue;
        }
        if value.len() > MAX_INPUT_LEN {
            return Err(CdiError::TooLarge {
                what: "annotation value",
                len: value.len(),
                limit: MAX_INPUT_LEN,
            });
        }
        let mut devices = Vec::new();
        for d in value.split(',') {
            total += 1;
            if total > MAX_ENTRIES {
                return Err(CdiError::TooLarge {
                    what: "device count in annotations",
                    len: total,
                    limit: MAX_ENTRIES,
                });
            }
            devices.push(parse_qualified_name(d)?);
        }
        requests.push(CdiRequest {
            key: key.to_string(),
            devices,
        });
    }
    Ok(requests)
}

#[cfg(test)]
#[path = "cdi_tests.rs"]
mod tests;
