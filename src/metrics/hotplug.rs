//! The metrics of CPU and memory hot-plug at run time (`enforce/engine/hotplug.rs`): the
//! changes seen, the CPUs containers hold that are offline, the replacements made, and the
//! reads of the online files that failed.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of a failed read.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `missing`, `unreadable`, `malformed` or `empty`.
    pub kind: String,
}

/// The hot-plug metrics.
#[derive(Debug, Clone, Default)]
pub struct HotplugMetrics {
    changes: Counter,
    held_offline: Gauge,
    replaced: Counter,
    read_failures: Family<KindLabels, Counter>,
}

impl HotplugMetrics {
    /// Registers every metric in `r` (under the registry's prefix).
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "topology_changes",
            "Changes of the online CPUs or memory nodes seen at run time (hot-plug, offlining)",
            self.changes.clone(),
        );
        r.register(
            "held_cpus_offline",
            "CPUs held exclusively by a container that are offline now (the container keeps \
             its other CPUs; see replace_offlined_cpus)",
            self.held_offline.clone(),
        );
        r.register(
            "offlined_cpus_replaced",
            "Exclusive CPUs that went offline and were replaced by a free CPU \
             (replace_offlined_cpus: true)",
            self.replaced.clone(),
        );
        r.register(
            "topology_read_failures",
            "Reads of cpu/online or node/has_memory that failed, by kind (the topology in force \
             was kept)",
            self.read_failures.clone(),
        );
    }

    /// Counts one change of the online sets.
    pub fn changed(&self) {
        self.changes.inc();
    }

    /// How many held CPUs are offline now.
    pub fn set_held_offline(&self, cpus: usize) {
        self.held_offline
            .set(i64::try_from(cpus).unwrap_or(i64::MAX));
    }

    /// Counts `n` offline CPUs replaced.
    pub fn replaced(&self, n: usize) {
        self.replaced.inc_by(n as u64);
    }

    /// Counts a failed read of kind `kind`.
    pub fn read_failed(&self, kind: &str) {
        self.read_failures
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }
}
