//! `nri_align_evictions_total{outcome}`: what became of each pod due for eviction (`evicted`,
//! `no-controller`, `pdb-blocked`, `gone`, `failed`), and
//! `nri_align_eviction_messages_dropped_total`: refusal-path messages the full channel could
//! not take (every clock then restarts, so a lost admission never evicts a pod).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Label of an outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// What became of the pod.
    pub outcome: String,
}

/// The eviction task's counters; clones share them.
#[derive(Debug, Clone, Default)]
pub struct EvictMetrics {
    outcomes: Family<OutcomeLabel, Counter>,
    dropped: Counter,
}

/// Every outcome, exported from the start (0) so an alert needs no absent().
pub const OUTCOMES: [&str; 5] = ["evicted", "no-controller", "pdb-blocked", "gone", "failed"];

impl EvictMetrics {
    /// Registers the counters in `registry` (prefix `nri_align`).
    pub fn register(&self, registry: &mut Registry) {
        for o in OUTCOMES {
            self.outcomes
                .get_or_create(&OutcomeLabel {
                    outcome: o.to_string(),
                })
                .get();
        }
        registry.register(
            "evictions",
            "Pods refused for evict_refused_after, by what became of their eviction: evicted, \
             no-controller, pdb-blocked, gone, failed",
            self.outcomes.clone(),
        );
        registry.register(
            "eviction_messages_dropped",
            "Refusal-path messages the eviction task's full channel could not take",
            self.dropped.clone(),
        );
    }

    /// Counts one outcome.
    pub fn outcome(&self, label: &str) {
        self.outcomes
            .get_or_create(&OutcomeLabel {
                outcome: label.to_string(),
            })
            .inc();
    }

    /// Count of `label` so far.
    pub fn count(&self, label: &str) -> u64 {
        self.outcomes
            .get_or_create(&OutcomeLabel {
                outcome: label.to_string(),
            })
            .get()
    }

    /// Counts a dropped message.
    pub fn dropped(&self) {
        self.dropped.inc();
    }
}
