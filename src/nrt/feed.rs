//! The daemon's side of publishing: what the engine reports after every decision, release,
//! pod event, Synchronize and reload becomes a [`Snapshot`] or new settings for the
//! [`Publisher`], handed over through its watch channel. Nothing here waits for the API
//! server: [`Feed::state`] runs on the CreateContainer path and only copies the free
//! resources (a few short vectors) and swaps a value.

use std::path::PathBuf;
use std::sync::Arc;

use super::builder::{NrtSettings, ZoneFree};
use super::fingerprint::PodId;
use super::publish::{Publisher, Refresh, Snapshot};
use crate::placement::NodeFree;
use crate::topology::Topology;

/// Feeds one publisher with the state of this node.
#[derive(Debug)]
pub struct Feed {
    publisher: Publisher,
    topology: Arc<Topology>,
}

impl Feed {
    /// A feed of `publisher` for the host `topology`.
    pub fn new(publisher: Publisher, topology: Arc<Topology>) -> Feed {
        Feed {
            publisher,
            topology,
        }
    }

    /// Hands over what is free now and the pods on the node (when known); returns at once with
    /// the publisher's input generation.
    pub fn state(&self, free: &[NodeFree], pods: Option<&Arc<[PodId]>>) -> u64 {
        self.publisher.update(Snapshot {
            topology: Arc::clone(&self.topology),
            free: free.iter().map(ZoneFree::from).collect(),
            pods: pods.cloned(),
        })
    }

    /// Has the server's copy read again and repaired if it differs, now rather than at the
    /// next resync (after a refusal: the scheduler may have read a stale object).
    pub fn reread(&self) -> u64 {
        self.publisher.reread()
    }

    /// New settings (a reload changed policy, scope, reserved CPUs or resource names).
    pub fn settings(&self, settings: NrtSettings) -> u64 {
        self.publisher.set_settings(settings)
    }

    /// The publisher (status, counters).
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }
}

/// A [`Refresh`] reading each NUMA node's free huge pages under `host_root` (sysfs), on the
/// publisher's task before every attempt. What is published is the smaller of the kernel's
/// `free_hugepages` and the pages no container holds: a container is given its pages at
/// admission but faults them in later, and pages can be used outside nri-align's containers.
pub fn hugepages_refresh(host_root: PathBuf) -> Refresh {
    Arc::new(move |topo: &Topology, free: &mut [ZoneFree]| {
        for zone in free.iter_mut() {
            let has_pools = topo
                .node(zone.node)
                .is_some_and(|n| n.hugepages.iter().any(|h| h.total > 0));
            if !has_pools {
                continue;
            }
            let unheld = std::mem::take(&mut zone.hugepages_free);
            zone.hugepages_free =
                crate::topology::sysfs::read_node_hugepages(&host_root, zone.node)
                    .into_iter()
                    .map(|h| {
                        let held_free = unheld
                            .iter()
                            .find(|(size, _)| *size == h.size_kb)
                            .map_or(h.free, |(_, pages)| *pages);
                        (h.size_kb, h.free.min(held_free))
                    })
                    .collect();
        }
    })
}

#[cfg(test)]
#[path = "feed_tests.rs"]
mod tests;
