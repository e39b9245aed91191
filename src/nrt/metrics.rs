//! Counters of the NodeResourceTopology publisher, registered into the daemon's Prometheus
//! registry under `nri_align_nrt_*`:
//!
//! - `nri_align_nrt_publish_attempts_total`: reconcile attempts (one per debounced change,
//!   resync or retry);
//! - `nri_align_nrt_publish_failures_total{reason}`: failed attempts by reason (`unreachable`,
//!   `unauthorized`, `forbidden`, `invalid`, `not-found`, `server`, `conflict`, `build`,
//!   `other`);
//! - `nri_align_nrt_publish_conflicts_total`: 409s answered by re-reading the object;
//! - `nri_align_nrt_publishes_total{outcome}`: successful attempts (`created`, `replaced`,
//!   `unchanged`, `taken-over`; `foreign` and `contested` when the object was left alone);
//! - `nri_align_nrt_not_owned{reason}`: 1 while the node's object is left alone because it is
//!   `foreign` (no nri-align label) or `contested` (another producer keeps rewriting it), else 0.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label of a failure.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why the attempt failed.
    pub reason: String,
}

/// Label of a success.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// What the attempt did.
    pub outcome: String,
}

/// The publisher's counters; clones share them.
#[derive(Debug, Clone, Default)]
pub struct NrtMetrics {
    attempts: Counter,
    failures: Family<ReasonLabel, Counter>,
    conflicts: Counter,
    publishes: Family<OutcomeLabel, Counter>,
    not_owned: Family<ReasonLabel, Gauge>,
}

/// The reasons of `nri_align_nrt_not_owned`, all exported (0 or 1) so an alert needs no
/// absent().
const NOT_OWNED: [&str; 2] = ["foreign", "contested"];

impl NrtMetrics {
    /// Registers the counters under `nrt_` in `registry` (whose prefix, `nri_align`, comes
    /// first).
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("nrt");
        sub.register(
            "publish_attempts",
            "NodeResourceTopology reconcile attempts",
            self.attempts.clone(),
        );
        sub.register(
            "publish_failures",
            "NodeResourceTopology attempts that failed, by reason",
            self.failures.clone(),
        );
        sub.register(
            "publish_conflicts",
            "409 Conflicts answered by re-reading the object",
            self.conflicts.clone(),
        );
        sub.register(
            "publishes",
            "NodeResourceTopology attempts that succeeded, by outcome",
            self.publishes.clone(),
        );
        // Both series from the start, at 0.
        for reason in NOT_OWNED {
            self.not_owned(reason);
        }
        sub.register(
            "not_owned",
            "1 while the node's NodeResourceTopology is left alone because nri-align does not \
             own it, by reason (foreign, contested)",
            self.not_owned.clone(),
        );
    }

    pub(super) fn attempt(&self) {
        self.attempts.inc();
    }

    pub(super) fn failure(&self, reason: &str) {
        self.failures
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .inc();
    }

    pub(super) fn conflict(&self) {
        self.conflicts.inc();
    }

    pub(super) fn success(&self, outcome: &str) {
        self.publishes
            .get_or_create(&OutcomeLabel {
                outcome: outcome.into(),
            })
            .inc();
    }

    /// Sets `not_owned{reason}` to 1 for `reason` (if any) and 0 for the others.
    pub(super) fn set_not_owned(&self, reason: Option<&str>) {
        for r in NOT_OWNED {
            self.not_owned
                .get_or_create(&ReasonLabel { reason: r.into() })
                .set(i64::from(reason == Some(r)));
        }
    }

    /// `not_owned{reason}`: 1 while the object is left alone for `reason`.
    pub fn not_owned(&self, reason: &str) -> i64 {
        self.not_owned
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .get()
    }

    /// Attempts so far.
    pub fn attempts(&self) -> u64 {
        self.attempts.get()
    }

    /// Failures with `reason` so far.
    pub fn failures(&self, reason: &str) -> u64 {
        self.failures
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .get()
    }

    /// Conflicts so far.
    pub fn conflicts(&self) -> u64 {
        self.conflicts.get()
    }

    /// Successes with `outcome` so far.
    pub fn successes(&self, outcome: &str) -> u64 {
        self.publishes
            .get_or_create(&OutcomeLabel {
                outcome: outcome.into(),
            })
            .get()
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
