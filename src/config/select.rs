//! Per-node and per-group configuration: which section of a fleet's configuration applies to
//! this node.
//!
//! One ConfigMap serves a mixed fleet with whole sections under these keys:
//!
//! - `node.<node name>`: this node only;
//! - `group.<name>`: nodes labelled `nri-align.io/config-group=<name>`;
//! - `default`: every other node.
//!
//! Exactly one section applies, never a merge of several: the node's own when there is one,
//! else, for a node in a group, its group's, else `default`. This is the rule of
//! containers/nri-plugins (docs/resource-policy/setup.md, "Dynamic Configuration": a primary
//! `node.$NODE_NAME` configuration, then a secondary `group.$GROUP_NAME` or `default` one
//! depending on whether the node is in a group, by its `config.nri/group` label). As there, a
//! node in a group whose section is missing does not fall back to `default`: the label says the
//! default is not meant for it, so it is reported instead (`degraded: config: ...`).
//!
//! Sections are whole, with one exception: the start-up keys the DaemonSet itself depends on
//! ([`INHERITED_KEYS`]: the metrics address its probes call, the state directory it mounts,
//! the plugin index) come from `default` when a node's or group's section leaves them out, so
//! that a section written for placement alone cannot stop the pod's probes or move its state.
//! A section that sets one, even to `""` or `null`, keeps its own value.
//!
//! Mounted, the ConfigMap is a directory holding one file per key (`default`, `group.gpu`,
//! `node.worker-7`), each a whole configuration file; `nri-align run --config DIR` reads it
//! ([`select_in_dir`]). Names starting with `.` (the kubelet's `..data` swap links) and other
//! names are not sections.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::{read_config_file, ConfigError};
use crate::untrusted;

/// The node label that puts a node into a configuration group.
pub const GROUP_LABEL: &str = "nri-align.io/config-group";
/// The key of the section every node without its own (or its group's) takes.
pub const DEFAULT_KEY: &str = "default";
/// Most directory entries looked at: a ConfigMap holds at most 1 MiB, so even one-line
/// sections stay far below this; a directory with more is not a ConfigMap.
pub const MAX_ENTRIES: usize = 10_000;

/// Where the configuration in force came from (the `source` label of the
/// `nri_align_config_source` metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// A plain configuration file (`--config FILE`), as before sections existed.
    File,
    /// The `node.<name>` section.
    Node,
    /// The `group.<name>` section of the node's group.
    Group,
    /// The `default` section.
    Default,
    /// No section applies or none could be used, and no last good configuration either:
    /// the built-in defaults.
    Builtin,
    /// The section that applies could not be used; the last configuration this node ran
    /// with (kept in the state directory) is in force.
    LastGood,
}

impl Source {
    /// Every source, in the order the metric lists them.
    pub const ALL: [Source; 6] = [
        Source::File,
        Source::Node,
        Source::Group,
        Source::Default,
        Source::Builtin,
        Source::LastGood,
    ];

    /// The metric's label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::File => "file",
            Source::Node => "node",
            Source::Group => "group",
            Source::Default => "default",
            Source::Builtin => "builtin",
            Source::LastGood => "last-good",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who this node is, for choosing its section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The Kubernetes node name (`NODE_NAME`, `--node-name`, else the hostname).
    pub node: Option<String>,
    /// The value of its [`GROUP_LABEL`] label, when it has one (read from its Node object).
    pub group: Option<String>,
}

impl Identity {
    /// An identity from a node name and the node's labels (`k=v` pairs); a group label that
    /// is not a valid label value is refused with the reason.
    pub fn from_labels<'a>(
        node: Option<String>,
        labels: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Identity, String> {
        let group = labels
            .into_iter()
            .find(|(k, _)| *k == GROUP_LABEL)
            .map(|(_, v)| v.to_string())
            .filter(|v| !v.is_empty());
        if let Some(g) = &group {
            check_label_value(g)?;
        }
        Ok(Identity { node, group })
    }
}

/// A Kubernetes label value: at most 63 characters, alphanumerics with `-`, `_`, `.` inside
/// (apimachinery's `IsValidLabelValue`), so the section key built from it is a valid
/// ConfigMap key and a plain file name.
pub fn check_label_value(v: &str) -> Result<(), String> {
    let ok_inner = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    let bytes = v.as_bytes();
    let valid = v.len() <= 63
        && bytes.iter().all(|&b| ok_inner(b))
        && bytes.first().map_or(true, |b| b.is_ascii_alphanumeric())
        && bytes.last().map_or(true, |b| b.is_ascii_alphanumeric());
    if valid {
        Ok(())
    } else {
        Err(format!(
            "label {GROUP_LABEL}={} is not a valid label value",
            untrusted::quoted(v)
        ))
    }
}

/// Whether `name` is a section key (`default`, `group.X`, `node.X`).
/// The name after `group.` or `node.` is a label value or a node name (a DNS subdomain): both
/// fit in these characters.
pub fn is_section_key(name: &str) -> bool {
    let named = |rest: &str| {
        !rest.is_empty()
            && rest.len() <= 253
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    name == DEFAULT_KEY
        || name.strip_prefix("group.").is_some_and(named)
        || name.strip_prefix("node.").is_some_and(named)
}

/// The section that applies to `who` among the keys `has` knows: `Ok(None)` when there is
/// none for it (no `default` and nothing of its own: the built-in defaults apply), an error
/// when the node is in a group that has no section.
pub fn choose(
    has: impl Fn(&str) -> bool,
    who: &Identity,
) -> Result<Option<(Source, String)>, String> {
    if let Some(n) = &who.node {
        let key = format!("node.{n}");
        if has(&key) {
            return Ok(Some((Source::Node, key)));
        }
    }
    if let Some(g) = &who.group {
        let key = format!("group.{g}");
        return if has(&key) {
            Ok(Some((Source::Group, key)))
        } else {
            Err(format!(
                "this node is in group {g} (label {GROUP_LABEL}) but the configuration has no \
                 {key} section"
            ))
        };
    }
    Ok(has(DEFAULT_KEY).then(|| (Source::Default, DEFAULT_KEY.to_string())))
}

/// The keys a node's or group's section takes from `default` when it leaves them out.
pub const INHERITED_KEYS: [&str; 3] = ["metrics_address", "state_dir", "plugin_idx"];

/// `section` with each of [`INHERITED_KEYS`] it leaves out taken from `default`, and the keys
/// taken. Either that does not parse as a YAML mapping: `section` as it is (its own parse
/// reports what is wrong with it; a broken `default` gives nothing).
pub fn inherit_startup_keys(section: &[u8], default: &[u8]) -> (Vec<u8>, Vec<&'static str>) {
    use serde_yaml_ng::{Mapping, Value};
    let mapping = |bytes: &[u8]| -> Option<Mapping> {
        let text = std::str::from_utf8(bytes).ok()?;
        if text.trim().is_empty() {
            return Some(Mapping::new());
        }
        // Within what its size allows: a section whose aliases expand further is refused by its
        // own parse, and lends or takes nothing here.
        crate::untrusted::yaml::check(text).ok()?;
        match serde_yaml_ng::from_str::<Value>(text).ok()? {
            Value::Mapping(m) => Some(m),
            Value::Null => Some(Mapping::new()),
            _ => None,
        }
    };
    let (Some(mut own), Some(base)) = (mapping(section), mapping(default)) else {
        return (section.to_vec(), Vec::new());
    };
    let mut taken = Vec::new();
    for key in INHERITED_KEYS {
        let k = Value::from(key);
        if own.contains_key(&k) {
            continue;
        }
        if let Some(v) = base.get(&k) {
            own.insert(k, v.clone());
            taken.push(key);
        }
    }
    if taken.is_empty() {
        return (section.to_vec(), taken);
    }
    match serde_yaml_ng::to_string(&Value::Mapping(own)) {
        Ok(text) => (text.into_bytes(), taken),
        Err(_) => (section.to_vec(), Vec::new()),
    }
}

/// The section chosen for this node, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    /// Which kind of section.
    pub source: Source,
    /// Its key (`node.worker-7`).
    pub key: String,
    /// Its file.
    pub path: PathBuf,
    /// Its bytes (with the start-up keys it takes from `default`).
    pub bytes: Vec<u8>,
    /// The [`INHERITED_KEYS`] taken from `default`.
    pub inherited: Vec<&'static str>,
}

impl Selected {
    /// Section `key` of kind `source`, read from `path`: a node's or group's takes the start-up
    /// keys it leaves out from `default` (the `default` section's bytes, when there is one).
    pub fn new(
        source: Source,
        key: String,
        path: PathBuf,
        bytes: Vec<u8>,
        default: Option<&[u8]>,
    ) -> Selected {
        let (bytes, inherited) = match (source, default) {
            (Source::Node | Source::Group, Some(d)) => inherit_startup_keys(&bytes, d),
            _ => (bytes, Vec::new()),
        };
        Selected {
            source,
            key,
            path,
            bytes,
            inherited,
        }
    }
}

/// The section keys in `dir` (a mounted ConfigMap) and the names there that are none (for
/// the log: a `config.yaml` left from a single-file ConfigMap is not read).
pub fn list_dir(dir: &Path) -> Result<(BTreeSet<String>, Vec<String>), ConfigError> {
    let read_err = |source| ConfigError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut keys = BTreeSet::new();
    let mut other = Vec::new();
    for (i, entry) in std::fs::read_dir(dir).map_err(read_err)?.enumerate() {
        if i >= MAX_ENTRIES {
            return Err(ConfigError::Invalid {
                origin: dir.display().to_string(),
                message: format!("more than {MAX_ENTRIES} entries: not a configuration directory"),
            });
        }
        let name = entry.map_err(read_err)?.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') {
            continue;
        }
        if is_section_key(name) {
            keys.insert(name.to_string());
        } else {
            other.push(untrusted::message(name));
        }
    }
    Ok((keys, other))
}

/// Chooses and reads this node's section of the configuration directory `dir`; `Ok(None)`
/// when none applies. Each file is read as a plain configuration file is
/// ([`read_config_file`]).
pub fn select_in_dir(dir: &Path, who: &Identity) -> Result<Option<Selected>, ConfigError> {
    let (keys, _) = list_dir(dir)?;
    let chosen = choose(|k| keys.contains(k), who).map_err(|message| ConfigError::Invalid {
        origin: dir.display().to_string(),
        message,
    })?;
    let Some((source, key)) = chosen else {
        return Ok(None);
    };
    let path = dir.join(&key);
    let bytes = read_config_file(&path)?;
    // The default section only lends start-up keys: one that cannot be read lends nothing.
    let default = (source != Source::Default && keys.contains(DEFAULT_KEY))
        .then(|| read_config_file(&dir.join(DEFAULT_KEY)).ok())
        .flatten();
    Ok(Some(Selected::new(
        source,
        key,
        path,
        bytes,
        default.as_deref(),
    )))
}

#[cfg(test)]
#[path = "select_tests.rs"]
mod tests;
