//! Effective per-container settings from pod annotations in the NRI-plugin convention
//! (`KEY.nri-align.io/pod`, `KEY.nri-align.io/container.NAME`): container beats pod beats the
//! node default; unknown keys and bad values are errors, never ignored.

use std::collections::BTreeMap;
use std::str::FromStr;

use super::error::PlacementError;
use super::policy::{
    CpuPreference, CpuSpread, MemPolicy, NumaChoice, PlacementConfig, Policy, Scope,
};
use crate::untrusted::{excerpt, quoted};

/// The annotation domain.
pub const DOMAIN: &str = "nri-align.io";

/// Which memory nodes a container's `cpuset.mems` may include.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MemNodes {
    /// Only nodes with CPUs (the default): HBM/CXL/GPU memory nodes stay out.
    #[default]
    CpuNodes,
    /// Also the memory-only nodes attached to the chosen nodes.
    WithMemoryOnly,
}

/// The settings placement uses for one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    /// Alignment policy.
    pub policy: Policy,
    /// Scope.
    pub scope: Scope,
    /// Exclusive / shared preference.
    pub cpus: CpuPreference,
    /// GPU count asked by annotation (only when the admin allows it).
    pub gpus: Option<u32>,
    /// NIC count asked by annotation (only when the admin allows it).
    pub nics: Option<u32>,
    /// Memory nodes.
    pub mems: MemNodes,
    /// Which node a request that fits on one is packed onto.
    pub numa_choice: NumaChoice,
    /// The memory policy the container starts with.
    pub mempolicy: MemPolicy,
    /// How its exclusive CPUs split over its nodes.
    pub cpu_spread: CpuSpread,
}

const KEYS: &str = "policy, scope, cpus, gpus, nics, mems, numa-choice, mempolicy, cpu-spread";

/// Longest annotation key Kubernetes accepts: a 253-byte DNS prefix, `/`, a 63-byte name.
pub const MAX_KEY_BYTES: usize = 253 + 1 + 63;

/// Longest value of an nri-align annotation worth reading (the longest valid one,
/// `with-memory-only`, has 16 bytes).
pub const MAX_VALUE_BYTES: usize = 64;

/// Reads the effective settings of container `container` from `annotations`.
pub fn effective(
    annotations: &BTreeMap<String, String>,
    container: &str,
    config: &PlacementConfig,
) -> Result<Effective, PlacementError> {
    let mut eff = Effective {
        policy: config.policy,
        scope: config.scope,
        cpus: CpuPreference::Auto,
        gpus: None,
        nics: None,
        mems: MemNodes::CpuNodes,
        numa_choice: config.numa_choice,
        mempolicy: config.mempolicy,
        cpu_spread: config.cpu_spread,
    };
    // Pod-level values first, container-level ones after, so the container wins.
    let mut parsed = Vec::new();
    for (key, value) in annotations {
        if let Some(found) = parse_annotation(key, value, container)? {
            parsed.push(found);
        }
    }
    parsed.sort_by_key(|(level, _)| *level);
    for (level, setting) in parsed {
        if level == Level::OtherContainer {
            continue;
        }
        apply(&mut eff, setting, annotations, config)?;
    }
    Ok(eff)
}

/// Whom an annotation addresses, in the order they apply (the later wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    /// `KEY.nri-align.io/pod`.
    Pod,
    /// `KEY.nri-align.io/container.NAME` of this container.
    Container,
    /// Another container's setting: still validated, never applied.
    OtherContainer,
}

/// One annotation: `None` for a key of another domain, else whom it addresses and what it
/// sets; a key or value nri-align cannot take is an error.
fn parse_annotation(
    key: &str,
    value: &str,
    container: &str,
) -> Result<Option<(Level, Setting)>, PlacementError> {
    let Some((what, target)) = split_key(key) else {
        return Ok(None);
    };
    let bad = |reason: String| PlacementError::InvalidAnnotation {
        key: excerpt(key),
        value: quoted(value),
        reason,
    };
    // Every valid key and value is short: refuse (and never copy) anything longer.
    if key.len() > MAX_KEY_BYTES {
        return Err(bad(format!(
            "the key is {} bytes; Kubernetes allows at most {MAX_KEY_BYTES}",
            key.len()
        )));
    }
    if value.len() > MAX_VALUE_BYTES {
        return Err(bad(format!(
            "the value is {} bytes; no setting takes more than {MAX_VALUE_BYTES}",
            value.len()
        )));
    }
    let level = match target {
        "pod" => Level::Pod,
        t => match t.strip_prefix("container.") {
            Some(name) if !name.is_empty() => {
                if what == "scope" {
                    return Err(bad(
                        "scope applies to the whole pod: use scope.nri-align.io/pod".into(),
                    ));
                }
                if name != container {
                    // Another container's setting: still validated below, not applied.
                    Level::OtherContainer
                } else {
                    Level::Container
                }
            }
            _ => {
                let what = if what.is_empty() { "KEY" } else { what };
                return Err(bad(format!(
                    "expected {what}.{DOMAIN}/pod or {what}.{DOMAIN}/container.<name>"
                )));
            }
        },
    };
    let setting = parse_setting(what, value).map_err(bad)?;
    Ok(Some((level, setting)))
}

/// Applies one setting to `eff`; device counts only where the administrator allows them.
fn apply(
    eff: &mut Effective,
    setting: Setting,
    annotations: &BTreeMap<String, String>,
    config: &PlacementConfig,
) -> Result<(), PlacementError> {
    match setting {
        Setting::Policy(p) => eff.policy = p,
        Setting::Scope(s) => eff.scope = s,
        Setting::Cpus(c) => eff.cpus = c,
        Setting::Mems(m) => eff.mems = m,
        Setting::NumaChoice(n) => eff.numa_choice = n,
        Setting::MemPolicy(m) => eff.mempolicy = m,
        Setting::CpuSpread(c) => eff.cpu_spread = c,
        Setting::Gpus(n) | Setting::Nics(n) => {
            let is_gpu = matches!(setting, Setting::Gpus(_));
            if !config.allow_device_annotations {
                let kind = if is_gpu { "gpus" } else { "nics" };
                let key = annotations
                    .iter()
                    .find(|(k, _)| split_key(k).is_some_and(|(w, _)| w == kind))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .unwrap_or_default();
                return Err(PlacementError::InvalidAnnotation {
                    key: excerpt(&key.0),
                    value: quoted(&key.1),
                    reason: "the node administrator disabled device annotations \
                             (allow_device_annotations: false); request the devices \
                             through the device plugin instead"
                        .into(),
                });
            }
            if is_gpu {
                eff.gpus = Some(n);
            } else {
                eff.nics = Some(n);
            }
        }
    }
    Ok(())
}

/// Splits `policy.nri-align.io/pod` into (`policy`, `pod`); `None` for foreign keys.
/// Keys in our domain with an unknown name come back too, and fail in `parse_setting`.
fn split_key(key: &str) -> Option<(&str, &str)> {
    // `policy.nri-align.io` without `/pod` is ours too: a forgotten target must not turn the
    // key into a foreign one that is silently ignored. It comes back with an empty target.
    let (domain, target) = key.split_once('/').unwrap_or((key, ""));
    if domain == DOMAIN {
        return Some(("", target));
    }
    let what = domain.strip_suffix(DOMAIN)?.strip_suffix('.')?;
    Some((what, target))
}

enum Setting {
    Policy(Policy),
    Scope(Scope),
    Cpus(CpuPreference),
    Gpus(u32),
    Nics(u32),
    Mems(MemNodes),
    NumaChoice(NumaChoice),
    MemPolicy(MemPolicy),
    CpuSpread(CpuSpread),
}

fn parse_setting(what: &str, value: &str) -> Result<Setting, String> {
    fn named<T: FromStr<Err = super::policy::UnknownValue>>(v: &str) -> Result<T, String> {
        v.parse::<T>()
            .map_err(|e| format!("expected one of: {}", e.expected))
    }
    let count = |v: &str| -> Result<u32, String> {
        v.trim()
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= 64)
            .ok_or_else(|| "expected a device count from 0 to 64".to_string())
    };
    match what {
        "policy" => named(value).map(Setting::Policy),
        "scope" => named(value).map(Setting::Scope),
        "cpus" => named(value).map(Setting::Cpus),
        "gpus" => count(value).map(Setting::Gpus),
        "nics" => count(value).map(Setting::Nics),
        "numa-choice" => named(value).map(Setting::NumaChoice),
        "mempolicy" => named(value).map(Setting::MemPolicy),
        "cpu-spread" => named(value).map(Setting::CpuSpread),
        "mems" => match value.trim() {
            "cpu-nodes" => Ok(Setting::Mems(MemNodes::CpuNodes)),
            "with-memory-only" => Ok(Setting::Mems(MemNodes::WithMemoryOnly)),
            _ => Err("expected one of: cpu-nodes with-memory-only".into()),
        },
        "" => Err(format!(
            "missing setting name; known: {KEYS} (as NAME.{DOMAIN}/...)"
        )),
        other => Err(format!("unknown setting {}; known: {KEYS}", quoted(other))),
    }
}

#[cfg(test)]
#[path = "annotations_tests.rs"]
mod tests;
