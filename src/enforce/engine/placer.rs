//! The seam between enforcement and placement: what the engine needs from a placer, and
//! `placement::Allocator` as that placer (the only place that knows the placement error type,
//! so the engine and its tests can run on a fake placer).

use crate::metrics::NodeFreeSample;
use crate::placement::{
    Allocator, Assignment, PlacementConfig, PlacementError, PodTotals, Request,
};
use crate::topology::{CpuSet, Topology};

/// A placement refusal, as the engine needs it: a short label for metrics and the message the
/// CRI create fails with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Short reason label (`unalignable`, `invalid-annotation`, `conflict`...).
    pub reason: String,
    /// Full message.
    pub message: String,
}

/// What the engine needs from the placement engine; `placement::Allocator` implements it
/// below.
pub trait Placer: Send {
    /// Decides and records.
    fn place(&mut self, req: &Request) -> Result<Assignment, Rejection>;
    /// Forgets a container; returns what it had.
    fn release(&mut self, container_id: &str) -> Option<Assignment>;
    /// Records an existing decision; refuses one that conflicts with what is recorded.
    fn restore(&mut self, a: Assignment) -> Result<(), Rejection>;
    /// CPUs of the shared pool now.
    fn shared_pool(&self) -> CpuSet;
    /// Replaces the placement settings.
    fn set_config(&mut self, c: PlacementConfig);
    /// The host.
    fn topology(&self) -> &Topology;
    /// Free resources per NUMA node.
    fn free_by_node(&self) -> Vec<NodeFreeSample>;
    /// What pod `uid` asks for in all, before its first container is placed (a sizing hint
    /// for pod scope). Placers without pod scope ignore it.
    fn expect_pod(&mut self, _uid: &str, _totals: PodTotals) {}
}

fn rejection(e: PlacementError) -> Rejection {
    Rejection {
        reason: e.reason().to_string(),
        message: e.to_string(),
    }
}

impl Placer for Allocator {
    fn place(&mut self, req: &Request) -> Result<Assignment, Rejection> {
        Allocator::place(self, req).map_err(rejection)
    }
    fn release(&mut self, id: &str) -> Option<Assignment> {
        Allocator::release(self, id)
    }
    fn restore(&mut self, a: Assignment) -> Result<(), Rejection> {
        Allocator::restore(self, a).map_err(rejection)
    }
    fn shared_pool(&self) -> CpuSet {
        Allocator::shared_pool(self)
    }
    fn set_config(&mut self, c: PlacementConfig) {
        Allocator::set_config(self, c)
    }
    fn topology(&self) -> &Topology {
        Allocator::topology(self)
    }
    fn expect_pod(&mut self, uid: &str, totals: PodTotals) {
        Allocator::expect_pod(self, uid, totals)
    }
    fn free_by_node(&self) -> Vec<NodeFreeSample> {
        Allocator::free_by_node(self)
            .into_iter()
            .map(|n| NodeFreeSample {
                node: n.node,
                cpus: n.cpus.len() as u64,
                memory_bytes: n.memory_bytes,
                gpus: n.gpus.len() as u64,
            })
            .collect()
    }
}
