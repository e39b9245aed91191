//! The memory policy a container starts with (`mempolicy`), sent only to a runtime whose NRI
//! carries it. NRI v0.12 added `LinuxContainerAdjustment.memory_policy`; an older runtime
//! drops a field it does not know without a word, so a policy sent there would be recorded as
//! given and never applied. Instead the engine learns at Configure whether the runtime takes
//! it, leaves the policy out where it does not (never failing a creation for it), logs that
//! once per runtime, counts each container (`nri_align_mempolicy_total{outcome}`) and marks the
//! record, so that `verify` says the policy was not applied.

use super::{Engine, Placer};
use crate::enforce::adjust::Adjustment;
use crate::metrics::Metrics;

/// What the engine knows of the runtime's support for memory policies: owned by this file.
#[derive(Debug, Default)]
pub(super) struct RuntimeMempolicy {
    /// The runtime, as Configure described it (`containerd 2.1.9 (NRI 0.8.0, inferred)`);
    /// `None` before Configure.
    runtime: Option<String>,
    /// Whether it takes the `memory_policy` adjustment.
    takes: bool,
    /// Whether leaving a policy out was logged for this runtime.
    warned: bool,
}

impl<P: Placer> Engine<P> {
    /// Tells the engine which runtime it now serves and whether that runtime's NRI takes the
    /// `memory_policy` adjustment (NRI v0.12 and later).
    pub fn set_runtime_mempolicy(&mut self, runtime: &str, takes: bool) {
        self.mempolicy = RuntimeMempolicy {
            runtime: Some(runtime.to_string()),
            takes,
            warned: false,
        };
    }
}

impl RuntimeMempolicy {
    /// Keeps the adjustment's memory policy where the runtime takes it, else takes it out
    /// (logged once per runtime); counts each container that has one. Returns whether one was
    /// left out.
    pub(super) fn fit(
        &mut self,
        adj: &mut Adjustment,
        container: &str,
        metrics: Option<&Metrics>,
    ) -> bool {
        let Some(policy) = &adj.memory_policy else {
            return false;
        };
        let outcome = if self.takes { "sent" } else { "unsupported" };
        if let Some(m) = metrics {
            m.mempolicy(outcome);
        }
        if self.takes {
            return false;
        }
        if !self.warned {
            self.warned = true;
            tracing::warn!(
                container = %container,
                runtime = self.runtime.as_deref().unwrap_or("an unknown runtime"),
                "mempolicy {} left out: the runtime's NRI cannot carry a memory policy \
                 (NRI v0.12 and later can); containers start with the kernel's default policy. \
                 Logged once per runtime; nri_align_mempolicy_total{{outcome=\"unsupported\"}} \
                 counts each",
                policy.mode
            );
        }
        adj.memory_policy = None;
        true
    }
}
