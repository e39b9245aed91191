//! Matching what a runtime injected back to the CDI specs, for runtimes that do not send the
//! names: containerd before 2.3 and CRI-O apply a container's CDI devices (from the CRI
//! `CDI_devices` field) to its spec before NRI's CreateContainer, and tell plugins only the
//! result: the device nodes in `linux.devices` and the env.
//!
//! A spec device is taken as injected when every device node its edits add (its own and the
//! spec-level ones) is among the container's device nodes, at the same container path and
//! with the same type and numbers: the spec's, else those of the node on the host, which the
//! runtime takes too (so two devices one vendor puts at the same container path tell apart),
//! and at least one of them is not a shared control node (`/dev/nvidiactl`, `nvidia-uvm`, ...):
//! every GPU container has those, so a device made of control nodes alone (or one that puts a
//! GPU's host node at a control node's container path) would be matched to all of them;
//! a device that adds no node is taken when every env entry its edits add is in the
//! container's env. A device whose nodes
//! are all part of a larger match is dropped: a MIG device's spec names its parent's node plus
//! `nvidia-caps` nodes, so the parent GPU's own device also matches a MIG container and would
//! make it the exclusive holder of a GPU it shares.
//!
//! The lookups are built once per scan: a creation costs a hash lookup per device node and per
//! env entry of the container, whatever the number of specs.

use std::collections::HashSet;
use std::sync::Arc;

use super::sysfs::is_control_path;
use super::{CdiDevice, CdiIndex, SpecNode};
use crate::host::devices::DeviceNode;

impl CdiIndex {
    /// Builds the node and env lookups of the devices now in the index.
    pub(super) fn build_lookups(&mut self) {
        self.by_node.clear();
        self.by_env.clear();
        for d in self.devices.values() {
            if let Some(first) = d.nodes.first() {
                self.by_node
                    .entry(first.path.clone())
                    .or_default()
                    .push(Arc::clone(d));
            } else if let Some(first) = d.env.first() {
                self.by_env
                    .entry(first.clone())
                    .or_default()
                    .push(Arc::clone(d));
            }
        }
        // One order whatever the hash map's: matches come out the same on every scan.
        for list in self.by_node.values_mut().chain(self.by_env.values_mut()) {
            list.sort_by(|a, b| a.name.cmp(&b.name));
        }
    }

    /// The spec devices whose edits the runtime already applied to a container with these
    /// device nodes and env, each once, by name.
    pub fn match_injected(&self, devices: &[DeviceNode], env: &[String]) -> Vec<Arc<CdiDevice>> {
        let mut found: Vec<Arc<CdiDevice>> = Vec::new();
        let mut push = |d: &Arc<CdiDevice>| {
            if !found.iter().any(|f| f.name == d.name) {
                found.push(Arc::clone(d));
            }
        };
        for dev in devices {
            for d in self.by_node.get(&dev.path).into_iter().flatten() {
                let own_node = d.nodes.iter().any(|n| !is_control_path(&n.path));
                if own_node && d.nodes.iter().all(|n| devices.iter().any(|c| same(n, c))) {
                    push(d);
                }
            }
        }
        if !self.by_env.is_empty() {
            let have: HashSet<&str> = env.iter().map(String::as_str).collect();
            for e in env {
                for d in self.by_env.get(e).into_iter().flatten() {
                    if d.env.iter().all(|x| have.contains(x.as_str())) {
                        push(d);
                    }
                }
            }
        }
        drop_contained(found)
    }
}

/// Whether the container's node `c` is the spec's node `n`.
fn same(n: &SpecNode, c: &DeviceNode) -> bool {
    n.path == c.path
        && (n.kind.is_empty() || n.kind == c.kind)
        && n.numbers
            .map_or(true, |(ma, mi)| ma == c.major && mi == c.minor)
}

/// `found` without the devices whose nodes are a strict subset of another match's.
fn drop_contained(found: Vec<Arc<CdiDevice>>) -> Vec<Arc<CdiDevice>> {
    let paths: Vec<HashSet<&str>> = found
        .iter()
        .map(|d| d.nodes.iter().map(|n| n.path.as_str()).collect())
        .collect();
    let keep: Vec<bool> = paths
        .iter()
        .map(|p| p.is_empty() || !paths.iter().any(|q| p.len() < q.len() && p.is_subset(q)))
        .collect();
    found
        .into_iter()
        .zip(keep)
        .filter_map(|(d, k)| k.then_some(d))
        .collect()
}

#[cfg(test)]
#[path = "injected_tests.rs"]
mod tests;
