//! An in-place resize of a container's exclusive CPUs on `UpdateContainer`: the placer keeps
//! what the container holds (`placement::resize`), the record remembers the CPUs it was
//! admitted with and those added since, and the shared pool follows in the same update.

use std::time::Instant;

use super::{log_decision, Engine, EngineError, Placer};
use crate::enforce::adjust::CpusetUpdate;
use crate::enforce::container::{ContainerView, PodView};
use crate::enforce::state::{Record, ResourceSummary};
use crate::placement::Request;

impl<P: Placer> Engine<P> {
    /// Resizes container `c` (recorded as `old`) in place to `req`. `None` when the placer
    /// does not resize it in place (it holds no exclusive CPUs, or will not): the caller
    /// decides anew. A refusal changes nothing.
    pub(super) fn resize_in_place(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
        req: &Request,
        old: &Record,
        started: Instant,
    ) -> Option<Result<Vec<CpusetUpdate>, EngineError>> {
        let held = old.holding();
        let a = match self.placer.resize(req, &held)? {
            Ok(a) => a,
            Err(r) => {
                tracing::info!(container = %c.id, "resize refused, container kept as it was: {}", r.message);
                self.count_rejection(&r.reason, started);
                return Some(Err(EngineError::Rejected(r)));
            }
        };
        let mut rec = Record {
            applied_cpus: a.cpus.clone(),
            resources: ResourceSummary::of(req),
            found_running: false,
            ..old.clone()
        };
        rec.set_holding(held.after(&a.cpus));
        rec.assignment = a;
        Some(Ok(self.record_update(pod, c, old, rec, started)))
    }

    /// Records `rec` as container `c`'s decision after an update from `old`, persists it and
    /// moves the shared pool: the container's own update (when its CPUs changed) and the pool
    /// members', in one list.
    pub(super) fn record_update(
        &mut self,
        pod: &PodView,
        c: &ContainerView,
        old: &Record,
        rec: Record,
        started: Instant,
    ) -> Vec<CpusetUpdate> {
        let a = rec.assignment.clone();
        // Memory nodes that changed (widened to a grow's added CPUs, or a decision made anew)
        // go out with this update's response, unless another plugin owns them.
        if !self.config.leave_to_others.mems && !a.mems.is_empty() && a.mems != old.assignment.mems
        {
            self.mems_moved.mark(&c.id);
        }
        let mut updates: Vec<_> = CpusetUpdate::if_moved(&c.id, &a.cpus, &old.applied_cpus)
            .into_iter()
            .collect();
        self.doc.containers.insert(c.id.clone(), rec);
        let (moved, timing) = self.persist_and_follow_pool(&c.id, started);
        updates.extend(moved);
        if let Some(m) = &self.metrics {
            m.admitted(&a.policy.to_string(), a.aligned, timing.took);
        }
        self.refresh_free();
        log_decision(pod, c, &a, timing, updates.len());
        updates
    }
}
