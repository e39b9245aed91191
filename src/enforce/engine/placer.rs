//! The seam between enforcement and placement: what the engine needs from a placer, and
//! `placement::Allocator` as that placer (the only place that knows the placement error type,
//! so the engine and its tests can run on a fake placer).

use crate::placement::resize::Holding;
use crate::placement::{
    Allocator, Assignment, GpuMode, NodeFree, PlacementConfig, PlacementError, Plan, PodTotals,
    Request,
};
use crate::topology::{CpuSet, NodeSet, Topology};

/// A placement refusal, as the engine needs it: a short label for metrics and the message the
/// CRI create fails with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Short reason label (`unalignable`, `invalid-annotation`, `conflict`...).
    pub reason: String,
    /// Full message.
    pub message: String,
    /// Whether another container's hold on what this one needs caused it (a device or CPU it
    /// holds): the refused pod is not the one at fault, and is never evicted for it.
    pub another_holds: bool,
}

/// What the engine needs from the placement engine; `placement::Allocator` implements it
/// below.
pub trait Placer: Send {
    /// A decision made and not yet recorded.
    type Plan;
    /// Decides with GPU mode `mode` for this one decision, recording nothing.
    fn plan(&self, req: &Request, mode: GpuMode) -> Result<Self::Plan, Rejection>;
    /// The decision of a plan.
    fn planned(plan: &Self::Plan) -> &Assignment;
    /// Records a plan of this placer (made since its last change).
    fn commit(&mut self, plan: Self::Plan) -> Result<Assignment, Rejection>;
    /// Decides and records.
    fn place(&mut self, req: &Request, mode: GpuMode) -> Result<Assignment, Rejection> {
        let plan = self.plan(req, mode)?;
        self.commit(plan)
    }
    /// Every decision it holds (to check it against the engine's records).
    fn held(&self) -> Vec<Assignment>;
    /// Forgets a container; returns what it had.
    fn release(&mut self, container_id: &str) -> Option<Assignment>;
    /// Resizes container `req.container_id`, which holds `held`, in place to what `req` asks
    /// (`placement::resize`): its CPUs kept on a grow, only added ones given back on a
    /// shrink, its devices untouched; recorded on success, nothing changed on a refusal.
    /// `None`: not a resize of exclusive CPUs in place (the engine decides anew). Placers
    /// without in-place resize always answer `None`.
    fn resize(&mut self, _req: &Request, _held: &Holding) -> Option<Result<Assignment, Rejection>> {
        None
    }
    /// Records an existing decision; refuses one that conflicts with what is recorded.
    fn restore(&mut self, a: Assignment) -> Result<(), Rejection>;
    /// CPUs of the shared pool now.
    fn shared_pool(&self) -> CpuSet;
    /// Takes `pool` (what the shared containers were last moved onto, read back from the
    /// records) as the shared pool where it is still valid, so that a restart moves nobody.
    /// Placers that keep no pool apart from the free CPUs ignore it.
    fn adopt_pool(&mut self, _pool: &CpuSet) {}
    /// The shared CPUs of a shared container bound to NUMA `nodes` (the pool on them, or the
    /// whole pool).
    fn shared_on(&self, nodes: &NodeSet) -> CpuSet {
        crate::placement::cpus::shared_on(self.topology(), &self.shared_pool(), nodes)
    }
    /// Replaces the placement settings.
    fn set_config(&mut self, c: PlacementConfig);
    /// The host.
    fn topology(&self) -> &Topology;
    /// Free resources per NUMA node.
    fn free_by_node(&self) -> Vec<NodeFree>;
    /// Follows a CPU or memory hot-plug: only `cpus` are online, the memory of `mem_offline`
    /// (node ids) is gone; what containers hold stays held. Returns the online CPUs it cannot
    /// place on (not in its topology).
    fn set_online(&mut self, cpus: &CpuSet, mem_offline: &NodeSet) -> CpuSet;
    /// The CPUs it treats as online.
    fn online(&self) -> CpuSet;
    /// The nodes whose memory it treats as offline.
    fn mem_offline(&self) -> NodeSet;
    /// What pod `uid` asks for in all, before its first container is placed (a sizing hint
    /// for pod scope). Placers without pod scope ignore it.
    fn expect_pod(&mut self, _uid: &str, _totals: PodTotals) {}
    /// The GPUs (indices in the topology) the kubelet lists as allocatable now: the only ones
    /// a remap may choose. Placers that never remap ignore it.
    fn set_allocatable_gpus(&mut self, _allocatable: &std::collections::BTreeSet<usize>) {}
}

fn rejection(e: PlacementError) -> Rejection {
    Rejection {
        reason: e.reason().to_string(),
        message: e.to_string(),
        another_holds: e.blames_another_container(),
    }
}

impl Placer for Allocator {
    type Plan = Plan;
    fn plan(&self, req: &Request, mode: GpuMode) -> Result<Plan, Rejection> {
        Allocator::plan_in(self, req, mode).map_err(rejection)
    }
    fn planned(plan: &Plan) -> &Assignment {
        plan.assignment()
    }
    fn commit(&mut self, plan: Plan) -> Result<Assignment, Rejection> {
        Allocator::commit(self, plan).map_err(rejection)
    }
    fn held(&self) -> Vec<Assignment> {
        Allocator::assignments(self).cloned().collect()
    }
    fn release(&mut self, id: &str) -> Option<Assignment> {
        Allocator::release(self, id)
    }
    fn resize(&mut self, req: &Request, held: &Holding) -> Option<Result<Assignment, Rejection>> {
        let planned = Allocator::plan_resize(self, req, held)?;
        Some(
            planned
                .and_then(|plan| Allocator::commit_resize(self, plan))
                .map_err(rejection),
        )
    }
    fn restore(&mut self, a: Assignment) -> Result<(), Rejection> {
        Allocator::restore(self, a).map_err(rejection)
    }
    fn shared_pool(&self) -> CpuSet {
        Allocator::shared_pool(self)
    }
    fn adopt_pool(&mut self, pool: &CpuSet) {
        Allocator::adopt_pool(self, pool);
    }
    fn shared_on(&self, nodes: &NodeSet) -> CpuSet {
        self.ledger().shared_on(nodes)
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
    fn free_by_node(&self) -> Vec<NodeFree> {
        Allocator::free_by_node(self)
    }
    fn set_online(&mut self, cpus: &CpuSet, mem_offline: &NodeSet) -> CpuSet {
        Allocator::set_online(self, cpus, mem_offline)
    }
    fn online(&self) -> CpuSet {
        self.ledger().online().clone()
    }
    fn mem_offline(&self) -> NodeSet {
        self.ledger().mem_offline().clone()
    }
    fn set_allocatable_gpus(&mut self, allocatable: &std::collections::BTreeSet<usize>) {
        Allocator::set_allocatable_gpus(self, allocatable);
    }
}
