//! The CDI spec registry's metrics, registered into the daemon's Prometheus registry under
//! `nri_align_cdi_*`:
//!
//! - `nri_align_cdi_devices`: devices in the index after the last scan;
//! - `nri_align_cdi_specs_skipped`: spec files the last scan did not use (any reason);
//! - `nri_align_cdi_specs_over_cap`: of those, the files skipped because the total caps across
//!   spec files were reached (`MAX_TOTAL_SPEC_BYTES`, `MAX_TOTAL_DEVICES`);
//! - `nri_align_cdi_watcher_restarts_total`: spec watchers started again after one ended or
//!   stalled;
//! - `nri_align_cdi_watcher_up`: 1 while the spec watcher runs and keeps time, else 0.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The registry's gauges and counters; clones share them.
#[derive(Debug, Clone, Default)]
pub struct CdiMetrics {
    pub(super) devices: Gauge,
    pub(super) skipped: Gauge,
    pub(super) over_cap: Gauge,
    pub(super) watcher_restarts: Counter,
    pub(super) watcher_up: Gauge,
}

impl CdiMetrics {
    /// Registers them under `cdi_` in `registry` (whose prefix, `nri_align`, comes first).
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("cdi");
        sub.register(
            "devices",
            "CDI devices known after the last scan of the spec directories",
            self.devices.clone(),
        );
        sub.register(
            "specs_skipped",
            "CDI spec files the last scan did not use",
            self.skipped.clone(),
        );
        sub.register(
            "specs_over_cap",
            "CDI spec files skipped because the total caps across spec files were reached",
            self.over_cap.clone(),
        );
        sub.register(
            "watcher_restarts",
            "CDI spec watchers started again after one ended or stalled",
            self.watcher_restarts.clone(),
        );
        sub.register(
            "watcher_up",
            "1 while the CDI spec watcher runs and keeps time",
            self.watcher_up.clone(),
        );
    }
}
