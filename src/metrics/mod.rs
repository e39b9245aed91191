//! Prometheus metrics of the plugin: the registry and what the engine counts. The HTTP
//! responder that serves them is [`http`].

pub mod http;

pub use http::serve;

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Labels of an admission.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// Policy in force.
    pub policy: String,
    /// "true" when every resource ended up on the chosen nodes.
    pub aligned: String,
}

/// Labels of a rejection.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Short reason (`unalignable`, `invalid-annotation`, `bad-request`...).
    pub reason: String,
}

/// Labels of a per-node gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    /// NUMA node id.
    pub node: String,
}

/// Labels of a device counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeviceLabels {
    /// Device node path in the container (`/dev/nvidia0`).
    pub device: String,
}

/// Free resources of one NUMA node (filled from the allocator).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFreeSample {
    /// Node id.
    pub node: u32,
    /// Free CPUs (neither reserved nor exclusively allocated).
    pub cpus: u64,
    /// Free memory in bytes.
    pub memory_bytes: u64,
    /// Free GPUs.
    pub gpus: u64,
}

/// Every metric nri-align exports.
pub struct Metrics {
    registry: Registry,
    admissions: Family<AdmissionLabels, Counter>,
    rejections: Family<ReasonLabels, Counter>,
    latency: Histogram,
    free_cpus: Family<NodeLabels, Gauge>,
    free_memory: Family<NodeLabels, Gauge>,
    free_gpus: Family<NodeLabels, Gauge>,
    device_link_missing: Family<DeviceLabels, Counter>,
    // Serialises encoding with updates of the node gauges so a scrape sees one snapshot.
    snapshot: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric registered under the `nri_align` prefix.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("nri_align");
        let admissions = Family::<AdmissionLabels, Counter>::default();
        let rejections = Family::<ReasonLabels, Counter>::default();
        // 50 µs .. ~0.8 s: decisions are sub-millisecond; the runtime times out at 2 s.
        let latency = Histogram::new(exponential_buckets(0.000_05, 2.0, 15));
        let free_cpus = Family::<NodeLabels, Gauge>::default();
        let free_memory = Family::<NodeLabels, Gauge>::default();
        let free_gpus = Family::<NodeLabels, Gauge>::default();
        registry.register("admissions", "Containers admitted", admissions.clone());
        registry.register(
            "rejections",
            "Containers rejected, by reason",
            rejections.clone(),
        );
        registry.register(
            "decision_duration_seconds",
            "Time to decide one container",
            latency.clone(),
        );
        registry.register("free_cpus", "Free CPUs per NUMA node", free_cpus.clone());
        registry.register(
            "free_memory_bytes",
            "Unallocated memory per NUMA node",
            free_memory.clone(),
        );
        registry.register("free_gpus", "Free GPUs per NUMA node", free_gpus.clone());
        let device_link_missing = Family::<DeviceLabels, Counter>::default();
        registry.register(
            "systemd_device_link_missing",
            "Containers in a systemd scope holding a device without /dev/char/MAJ:MIN (runc \
             leaves it out of DeviceAllow=: access is lost at the next cpuset update)",
            device_link_missing.clone(),
        );
        Metrics {
            registry,
            admissions,
            rejections,
            latency,
            free_cpus,
            free_memory,
            free_gpus,
            device_link_missing,
            snapshot: Mutex::new(()),
        }
    }

    /// Counts an admission and its decision time.
    pub fn admitted(&self, policy: &str, aligned: bool, took: Duration) {
        self.admissions
            .get_or_create(&AdmissionLabels {
                policy: policy.to_string(),
                aligned: aligned.to_string(),
            })
            .inc();
        self.latency.observe(took.as_secs_f64());
    }

    /// Counts a rejection and its decision time.
    pub fn rejected(&self, reason: &str, took: Duration) {
        self.rejections
            .get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            })
            .inc();
        self.latency.observe(took.as_secs_f64());
    }

    /// Counts a container under the systemd cgroup driver holding `device`, which has no
    /// `/dev/char/MAJ:MIN` link.
    pub fn device_link_missing(&self, device: &str) {
        self.device_link_missing
            .get_or_create(&DeviceLabels {
                device: device.to_string(),
            })
            .inc();
    }

    /// Replaces the per-node free gauges.
    pub fn set_free(&self, nodes: &[NodeFreeSample]) {
        let _guard = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for n in nodes {
            let l = NodeLabels {
                node: n.node.to_string(),
            };
            self.free_cpus.get_or_create(&l).set(gauge(n.cpus));
            self.free_memory
                .get_or_create(&l)
                .set(gauge(n.memory_bytes));
            self.free_gpus.get_or_create(&l).set(gauge(n.gpus));
        }
    }

    /// The text exposition (OpenMetrics).
    pub fn encode(&self) -> String {
        let _guard = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
