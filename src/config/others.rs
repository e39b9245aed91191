//! `leave_to_others`: the container fields another NRI plugin owns on this node, which
//! nri-align then never sets. Two plugins that set one field make the runtime fail the
//! creation ("plugins ... both tried to set", containerd/nri `pkg/api/owners.go` from NRI
//! v0.10, `pkg/adaptation/result.go` before), so on a node where a DRA CPU driver's plugin
//! (kubernetes-sigs/dra-driver-cpu) sets `cpuset.cpus` nri-align must leave that field alone.

use serde::{Deserialize, Serialize};

/// A field of a container that another NRI plugin may own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeftField {
    /// `linux.resources.cpu.cpus` (cpuset.cpus), in adjustments and updates.
    Cpus,
    /// `linux.resources.cpu.mems` (cpuset.mems).
    Mems,
    /// Device nodes, their cgroup rules and the GPU env (`NVIDIA_VISIBLE_DEVICES`).
    Devices,
}

/// The fields left to other plugins, node-wide; all false (the default) means nri-align sets
/// every field it aligns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeftToOthers {
    /// `cpuset.cpus` is another plugin's.
    pub cpus: bool,
    /// `cpuset.mems` is another plugin's.
    pub mems: bool,
    /// Device nodes and the GPU env are another plugin's.
    pub devices: bool,
}

impl LeftToOthers {
    /// The set a `leave_to_others` list names (a field named twice counts once).
    pub fn of(fields: &[LeftField]) -> LeftToOthers {
        LeftToOthers {
            cpus: fields.contains(&LeftField::Cpus),
            mems: fields.contains(&LeftField::Mems),
            devices: fields.contains(&LeftField::Devices),
        }
    }

    /// Whether nri-align sets every field itself.
    pub fn is_empty(&self) -> bool {
        *self == LeftToOthers::default()
    }

    /// The names of the fields left, for log lines and `config show`.
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.cpus, "cpus"),
            (self.mems, "mems"),
            (self.devices, "devices"),
        ]
        .into_iter()
        .filter_map(|(left, name)| left.then_some(name))
        .collect()
    }
}

#[cfg(test)]
#[path = "others_tests.rs"]
mod tests;
