//! Prometheus metrics of the plugin: the registry, what the engine counts, the build and the
//! state of the runtime connection. The HTTP responder that serves them, with the health
//! endpoints, is [`http`]; what those endpoints report is [`health`].
//!
//! May use: nothing else of the crate, so that every layer above can count into it.

pub mod health;
pub mod hotplug;
pub mod http;

pub use health::Health;
pub use hotplug::HotplugMetrics;
pub use http::{serve, ServeLimits};

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
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

/// Labels of a scheduler-choice outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SchedulerChoiceLabels {
    /// `koordinator`, `crane` or `memory-plugin`.
    pub scheduler: String,
    /// `honoured`, `overridden` (`scheduler_choice: preferred`), `refused`, `malformed` or
    /// `untrusted` (annotations of a scheduler `trusted_schedulers` does not name, ignored).
    pub outcome: String,
}

/// Labels of a memory-policy outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MempolicyLabels {
    /// `sent` (in the adjustment) or `unsupported` (the runtime's NRI cannot carry it: left
    /// out, the container created without it).
    pub outcome: String,
}

/// Labels of an input event.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    /// What happened (`unread-device`, `kubelet-cpuset`, `podresources-failed`...).
    pub event: String,
}

/// Labels of a per-NUMA-node gauge. The label is `numa_node`, not `node`: Kubernetes tooling
/// (kube-state-metrics, the kubelet's own metrics, relabelling rules) uses `node` for the name
/// of the node, and a scrape config that adds it would clash with a NUMA id.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    /// NUMA node id.
    pub numa_node: String,
}

/// Labels of `nri_align_build_info`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// The package version (`0.3.0`).
    pub version: String,
    /// The git revision the binary was built from (`1a2b3c4d5e6f`, `-dirty` when the sources
    /// differed from it, `unknown` outside git).
    pub revision: String,
}

/// Labels of a configuration reload.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `applied` or `rejected`.
    pub outcome: String,
}

/// Labels of the configuration source in force.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// `file`, `node`, `group`, `default`, `builtin` or `last-good` (config::select::Source).
    pub source: String,
}

/// The package version and the git revision of this build (build.rs).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// See [`BuildLabels::revision`].
pub const REVISION: &str = env!("NRI_ALIGN_GIT_REVISION");

/// Labels of a device counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeviceLabels {
    /// Device node path in the container (`/dev/nvidia0`).
    pub device: String,
}

/// Labels of a per-container gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerLabels {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
}

/// Free resources of one NUMA node (filled from the allocator).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFreeSample {
    /// Node id.
    pub node: u32,
    /// Free CPUs (neither reserved nor exclusively allocated).
    pub cpus: u64,
    /// Free CPUs kept out of the shared pool for exclusive containers (`exclusive_headroom`).
    pub headroom_cpus: u64,
    /// Free memory in bytes.
    pub memory_bytes: u64,
    /// Free GPUs.
    pub gpus: u64,
    /// Free RDMA NICs (NICs with an RDMA device that no container uses).
    pub rdma_nics: u64,
}

/// Every metric nri-align exports.
pub struct Metrics {
    registry: Registry,
    admissions: Family<AdmissionLabels, Counter>,
    rejections: Family<ReasonLabels, Counter>,
    latency: Histogram,
    free_cpus: Family<NodeLabels, Gauge>,
    headroom_cpus: Family<NodeLabels, Gauge>,
    free_memory: Family<NodeLabels, Gauge>,
    free_gpus: Family<NodeLabels, Gauge>,
    events: Family<EventLabels, Counter>,
    free_rdma_nics: Family<NodeLabels, Gauge>,
    runtime_connected: Gauge,
    runtime_connections: Counter,
    config_reloads: Family<OutcomeLabels, Counter>,
    config_last_reload_ok: Gauge,
    device_link_missing: Family<DeviceLabels, Counter>,
    device_links_created: Counter,
    devices_at_risk: Gauge,
    state_write_failures: Counter,
    state_write_failing: Gauge,
    config_source: Family<SourceLabels, Gauge>,
    hotplug: HotplugMetrics,
    scheduler_choices: Family<SchedulerChoiceLabels, Counter>,
    mempolicies: Family<MempolicyLabels, Counter>,
    local_memory: Family<ContainerLabels, Gauge<f64, AtomicU64>>,
    /// The containers `local_memory` has a series for: those of the last sample only.
    local_memory_series: Mutex<HashSet<ContainerLabels>>,
    // Serialises encoding with updates of the node gauges so a scrape sees one snapshot. It
    // holds each node's four free gauges (handles on the families' own series): every
    // admission that takes something sets them, and finding them in the families formats and
    // hashes the node's label four times per node.
    snapshot: Mutex<HashMap<u32, [Gauge; 5]>>,
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
        Self::new_with(|_| {})
    }

    /// [`Metrics::new`] plus what `extra` registers (other parts' counters, such as the
    /// NodeResourceTopology publisher's), served from the same endpoint.
    pub fn new_with(extra: impl FnOnce(&mut Registry)) -> Metrics {
        let mut registry = Registry::with_prefix("nri_align");
        let metrics = Metrics::unregistered();
        // The order of registration is the order of the scrape's families.
        metrics.register_decisions(&mut registry);
        extra(&mut registry);
        metrics.register_daemon(&mut registry);
        Metrics {
            registry,
            ..metrics
        }
    }

    /// Every metric at its start value, none registered yet.
    fn unregistered() -> Metrics {
        let config_last_reload_ok = Gauge::default();
        config_last_reload_ok.set(1);
        Metrics {
            registry: Registry::default(),
            admissions: Family::default(),
            rejections: Family::default(),
            // 50 µs .. ~0.8 s: decisions are sub-millisecond; the runtime times out at 2 s.
            latency: Histogram::new(exponential_buckets(0.000_05, 2.0, 15)),
            free_cpus: Family::default(),
            headroom_cpus: Family::default(),
            free_memory: Family::default(),
            free_gpus: Family::default(),
            events: Family::default(),
            free_rdma_nics: Family::default(),
            runtime_connected: Gauge::default(),
            runtime_connections: Counter::default(),
            config_reloads: Family::default(),
            config_last_reload_ok,
            device_link_missing: Family::default(),
            device_links_created: Counter::default(),
            devices_at_risk: Gauge::default(),
            state_write_failures: Counter::default(),
            state_write_failing: Gauge::default(),
            config_source: Family::default(),
            hotplug: HotplugMetrics::default(),
            scheduler_choices: Family::default(),
            mempolicies: Family::default(),
            local_memory: Family::default(),
            local_memory_series: Mutex::new(HashSet::new()),
            snapshot: Mutex::new(HashMap::new()),
        }
    }

    /// What the engine decides and what the nodes have left, ahead of other parts' metrics.
    fn register_decisions(&self, registry: &mut Registry) {
        registry.register("admissions", "Containers admitted", self.admissions.clone());
        registry.register(
            "scheduler_choice",
            "Containers of pods a scheduler placed (Koordinator, Crane), by what became of its \
             choice: honoured, overridden (scheduler_choice: preferred), refused, malformed, \
             untrusted (trusted_schedulers does not name it: ignored)",
            self.scheduler_choices.clone(),
        );
        registry.register(
            "mempolicy",
            "Containers given a memory policy (mempolicy), by outcome: sent, unsupported (the \
             runtime's NRI cannot carry it: left out)",
            self.mempolicies.clone(),
        );
        registry.register(
            "rejections",
            "Containers rejected, by reason",
            self.rejections.clone(),
        );
        registry.register(
            "decision_duration_seconds",
            "Time to decide one container",
            self.latency.clone(),
        );
        registry.register(
            "free_cpus",
            "Free CPUs per NUMA node",
            self.free_cpus.clone(),
        );
        registry.register(
            "exclusive_headroom_cpus",
            "Free CPUs per NUMA node kept out of the shared pool for exclusive containers \
             (exclusive_headroom); included in free_cpus",
            self.headroom_cpus.clone(),
        );
        registry.register(
            "free_memory_bytes",
            "Unallocated memory per NUMA node",
            self.free_memory.clone(),
        );
        registry.register(
            "free_gpus",
            "Free GPUs per NUMA node",
            self.free_gpus.clone(),
        );
        registry.register(
            "input_events",
            "What nri-align noticed in its inputs: device references it did not use \
             (unread-device), containers with a cpuset already set by the kubelet \
             (kubelet-cpuset), PodResources lookups (podresources-ok, podresources-failed, \
             podresources-skipped), restarted containers given their decision back \
             (restart-kept), exempt containers (exempt)",
            self.events.clone(),
        );
        registry.register(
            "free_rdma_nics",
            "Free RDMA NICs per NUMA node",
            self.free_rdma_nics.clone(),
        );
    }

    /// The daemon's own state: build, runtime link, configuration, systemd devices, state
    /// log, hotplug and memory locality.
    fn register_daemon(&self, registry: &mut Registry) {
        registry.register(
            "build",
            "Version and git revision of nri-align",
            Info::new(BuildLabels {
                version: VERSION.into(),
                revision: REVISION.into(),
            }),
        );
        registry.register(
            "runtime_connected",
            "1 while registered with the runtime and synchronized (what /readyz reports), else 0",
            self.runtime_connected.clone(),
        );
        registry.register(
            "runtime_connections",
            "Successful registrations with the runtime; every one after the first is a reconnection",
            self.runtime_connections.clone(),
        );
        registry.register(
            "config_reloads",
            "Configuration reloads (SIGHUP or a changed file), applied or rejected",
            self.config_reloads.clone(),
        );
        registry.register(
            "config_last_reload_successful",
            "0 while the configuration file holds a version that was rejected, else 1",
            self.config_last_reload_ok.clone(),
        );
        registry.register(
            "systemd_device_link_missing",
            "Containers in a systemd scope holding a device without /dev/char/MAJ:MIN (runc \
             leaves it out of DeviceAllow=: access is lost at the next cpuset update)",
            self.device_link_missing.clone(),
        );
        registry.register(
            "systemd_device_links_created",
            "/dev/char/MAJ:MIN links nri-align made for device nodes it handed to containers in \
             a systemd scope (create_dev_char_links)",
            self.device_links_created.clone(),
        );
        registry.register(
            "systemd_devices_at_risk",
            "Device nodes given to containers in a systemd scope that still have no \
             /dev/char/MAJ:MIN link: containers holding one lose it at the next daemon-reload or \
             cpuset update",
            self.devices_at_risk.clone(),
        );
        registry.register(
            "state_write_failures",
            "Writes of the state log that failed (its filesystem full or read-only): retried at \
             most once a second, the skipped ones are not counted",
            self.state_write_failures.clone(),
        );
        registry.register(
            "state_write_failing",
            "1 while decisions cannot be persisted (from a failed state write until one \
             succeeds and rewrites every record), else 0",
            self.state_write_failing.clone(),
        );
        registry.register(
            "config_source",
            "1 for where the configuration in force came from (file, a fleet ConfigMap's node, \
             group or default section, builtin defaults, or last-good when the section that \
             applies could not be used), 0 for the others",
            self.config_source.clone(),
        );
        self.hotplug.register(registry);
        registry.register(
            "container_local_memory_ratio",
            "Share of a running container's resident memory on its NUMA nodes (cpuset.mems of \
             its decision), 0 to 1, from its memory cgroup's memory.numa_stat (else its \
             processes' numa_maps); sampled every minute, one series per live container",
            self.local_memory.clone(),
        );
    }

    /// Follows the runtime connection: `ready` is what `/readyz` reports, `registrations` the
    /// number of successful registrations so far (the counter only ever grows to it).
    pub fn set_runtime_link(&self, ready: bool, registrations: u64) {
        self.runtime_connected.set(i64::from(ready));
        let seen = self.runtime_connections.get();
        if registrations > seen {
            self.runtime_connections.inc_by(registrations - seen);
        }
    }

    /// Counts a configuration reload; `applied` false: the file was rejected and the previous
    /// configuration stays.
    pub fn config_reloaded(&self, applied: bool) {
        let outcome = if applied { "applied" } else { "rejected" };
        self.config_reloads
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .inc();
        self.config_last_reload_ok.set(i64::from(applied));
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

    /// Counts what became of one container's memory policy.
    pub fn mempolicy(&self, outcome: &str) {
        self.mempolicies
            .get_or_create(&MempolicyLabels {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Counts what became of a scheduler's choice for one container.
    pub fn scheduler_choice(&self, scheduler: &str, outcome: &str) {
        self.scheduler_choices
            .get_or_create(&SchedulerChoiceLabels {
                scheduler: scheduler.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
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

    /// Counts an input event (see the `input_events` help text for the names).
    pub fn event(&self, event: &str) {
        self.events
            .get_or_create(&EventLabels {
                event: event.to_string(),
            })
            .inc();
    }

    /// Counts `n` input events of one kind at once.
    pub fn events(&self, event: &str, n: u64) {
        if n == 0 {
            return;
        }
        self.events
            .get_or_create(&EventLabels {
                event: event.to_string(),
            })
            .inc_by(n);
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

    /// Drops `device`'s series of `systemd_device_link_missing` once no live container
    /// carries it, so that the label stays bounded by the devices of live containers.
    pub fn forget_device_link_missing(&self, device: &str) {
        self.device_link_missing.remove(&DeviceLabels {
            device: device.to_string(),
        });
    }

    /// Counts a `/dev/char` link nri-align made.
    pub fn device_link_created(&self) {
        self.device_links_created.inc();
    }

    /// The number of device nodes at risk now (see `systemd_devices_at_risk`).
    pub fn set_devices_at_risk(&self, n: usize) {
        self.devices_at_risk
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Counts a failed state write: decisions are not persisted until one succeeds.
    pub fn state_write_failed(&self) {
        self.state_write_failures.inc();
        self.state_write_failing.set(1);
    }

    /// A state write succeeded after failures: every live record is persisted again.
    pub fn state_write_recovered(&self) {
        self.state_write_failing.set(0);
    }

    /// Marks `current` as the configuration's source, every other of `all` as not.
    pub fn set_config_source(&self, all: &[&str], current: &str) {
        for s in all {
            self.config_source
                .get_or_create(&SourceLabels {
                    source: (*s).to_string(),
                })
                .set(i64::from(*s == current));
        }
    }

    /// The configuration file went back to the configuration in force after a rejected
    /// version: nothing to reload, and nothing rejected any more.
    pub fn config_file_back(&self) {
        self.config_last_reload_ok.set(1);
    }

    /// The hot-plug metrics.
    pub fn hotplug(&self) -> &HotplugMetrics {
        &self.hotplug
    }

    /// Replaces the per-node free gauges.
    pub fn set_free(&self, nodes: &[NodeFreeSample]) {
        let mut gauges = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for n in nodes {
            let [cpus, headroom, memory, gpus, nics] = gauges.entry(n.node).or_insert_with(|| {
                let l = NodeLabels {
                    numa_node: n.node.to_string(),
                };
                [
                    self.free_cpus.get_or_create(&l).clone(),
                    self.headroom_cpus.get_or_create(&l).clone(),
                    self.free_memory.get_or_create(&l).clone(),
                    self.free_gpus.get_or_create(&l).clone(),
                    self.free_rdma_nics.get_or_create(&l).clone(),
                ]
            });
            cpus.set(gauge(n.cpus));
            headroom.set(gauge(n.headroom_cpus));
            memory.set(gauge(n.memory_bytes));
            gpus.set(gauge(n.gpus));
            nics.set(gauge(n.rdma_nics));
        }
    }

    /// Replaces the per-container local memory shares with `samples`: a container not in
    /// them (gone, or its memory unreadable now) loses its series, so the series stay the
    /// live containers'.
    pub fn set_local_memory(&self, samples: &[(ContainerLabels, f64)]) {
        let _guard = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        let mut series = self
            .local_memory_series
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let now: HashSet<ContainerLabels> = samples.iter().map(|(l, _)| l.clone()).collect();
        for gone in series.difference(&now) {
            self.local_memory.remove(gone);
        }
        for (labels, ratio) in samples {
            self.local_memory.get_or_create(labels).set(*ratio);
        }
        *series = now;
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

#[cfg(test)]
mod tests;
