//! The configuration file of `nri-align run` (YAML): what it may contain, its defaults, how it is
//! validated (`mod.rs`), how it is read without trusting what sits at its path (`read.rs`), and
//! how it is reloaded without restarting: on SIGHUP and when the file changes, as a mounted
//! ConfigMap does (`reload.rs`, `watch.rs`). A fleet's ConfigMap with `default`, `group.<name>`
//! and `node.<name>` sections is a directory of such files, one of which applies to this node
//! (`select.rs`); one this host cannot take leaves the daemon on its last good configuration or
//! the defaults, never stopped (`settle.rs`).
//!
//! Every key is optional; an empty file (or none) means the defaults below. Unknown keys are an
//! error naming the key, so a typo never silently falls back to a default.
//!
//! ```yaml
//! policy: best-effort          # none | best-effort | restricted | single-numa-node
//! scope: container             # container | pod
//! reserved_cpus: ""            # Linux list ("0-1"); default: no CPU reserved
//! gpu_mode: keep               # keep (the kubelet's GPUs) | remap (nri-align picks, same count)
//! allow_device_annotations: false  # may annotations ask for GPUs/NICs not allocated?
//! full_pcpus_only: false       # exclusive CPUs only as whole cores
//! exclusive_headroom: 0        # free CPUs per NUMA node kept out of the shared pool (0: off)
//! mempolicy: none              # none | bind | interleave | preferred-many | weighted-interleave
//! cpu_spread: by-device        # by-device | even | pack: exclusive CPUs over a container's nodes
//! resize_shrink: admitted     # admitted | any: what an in-place shrink may give back
//! exempt_namespaces: []        # namespaces never aligned: shared pool, or reserved_cpus when set
//! exclusive_annotation_namespaces: []  # may ask cpus: exclusive|isolated without Guaranteed
//! isolated_namespaces: []      # only these may ask cpus: isolated (default: nobody)
//! podresources_socket: /var/lib/kubelet/pod-resources/kubelet.sock  # "" turns it off
//! podresources_resources: [nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-*, rdma/*]
//! podresources_timeout_ms: 300 # deadline of one PodResources Get (fails open after it)
//! trust_visible_devices_env: false  # NVIDIA_VISIBLE_DEVICES lists count as allocations
//! pod_budgets: false          # a pod Guaranteed at pod level gets its CPUs as one aligned budget
//! trusted_schedulers: []       # koordinator, crane: whose placement annotations are acted on
//! cri_socket: null             # runtime's CRI, listed where NRI sends no Synchronize; "" off
//! create_dev_char_links: true  # link /dev/char/MAJ:MIN to device nodes handed out (systemd driver)
//! state_dir: /var/lib/nri-align   # default: --state-dir
//! state_fsync: false           # fdatasync every state write before answering the runtime
//! exclusive_cpu_quota: disable # disable | keep: the CFS quota of exclusive-CPU containers
//! replace_offlined_cpus: false # give a container a free CPU for an exclusive one gone offline
//! verify_remote_memory_threshold: 50  # percent off its nodes that flags a container's memory
//! metrics_address: null        # e.g. "127.0.0.1:9464"; default: no metrics endpoint
//! log_format: text             # text | json
//! log_level: null              # e.g. "info", "nri_align=debug"; default: RUST_LOG or info
//! plugin_idx: null             # two digits; default: --idx (50)
//! evict_refused_after: null    # e.g. "10m": evict a pod refused that long (needs API access)
//! nrt:                         # NodeResourceTopology publishing (nrt.rs)
//!   publish: true
//!   node_name: null
//!   gpu_resource: nvidia.com/gpu
//!   rdma_nic_resource: null
//!   resync_seconds: 60
//!   take_over_foreign: false
//! ```
//!
//! May use: `placement` (its settings), `topology`, `untrusted`, `host` (permissions), `nrt`
//! (name checks, settings); never `enforce` or `cli`, which read it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::placement::{
    CpuSpread, GpuMode, MemPolicy, NumaChoice, PlacementConfig, Policy, ResizeShrink, Scheduler,
    SchedulerChoiceMode, Scope,
};
use crate::untrusted;

pub mod duration;
pub mod keys;
mod memloc;
mod nrt;
pub mod others;
mod podresources;
mod read;
mod reload;
pub mod select;
pub mod settle;
mod show;
mod watch;

use crate::topology::{CpuSet, Topology};

pub use memloc::DEFAULT_REMOTE_MEMORY_THRESHOLD;
pub use nrt::NrtConfig;
pub use others::{LeftField, LeftToOthers};
use podresources::podresources_config;
pub use podresources::{
    PodResourcesConfig, DEFAULT_PODRESOURCES_TIMEOUT_MS, MAX_PODRESOURCES_TIMEOUT_MS,
};
pub use read::{read_config_file, read_config_file_to_lint, FileReader, MAX_CONFIG_BYTES};
pub use reload::{
    content_hash, section_hash, spawn_reloader, spawn_section_reloader, Loaded, Outcome, Relabel,
    ReloadOptions, Trigger,
};
pub use watch::DirWatch;

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The YAML is malformed, has an unknown key or a bad value.
    #[error("invalid config {origin}: {message}")]
    Parse {
        /// File path or `drop-in config`.
        origin: String,
        /// serde's message (names the key and position).
        message: String,
    },
    /// A value parsed but makes no sense.
    #[error("invalid config {origin}: {message}")]
    Invalid {
        /// File path or `drop-in config`.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// What sits at the path is not a regular file (a FIFO, a device...).
    #[error("cannot read config {path}: it is {kind}, not a regular file")]
    NotRegular {
        /// File.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// The file is larger than any configuration.
    #[error("cannot read config {path}: larger than {limit} bytes")]
    TooLarge {
        /// File.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// The read did not return in time (a hung network mount?); the reading thread is left
    /// behind, no async worker is blocked.
    #[error("cannot read config {path}: no answer within {after:?}; is its file system hung?")]
    ReadTimeout {
        /// File.
        path: PathBuf,
        /// The time limit.
        after: std::time::Duration,
    },
    /// An earlier read of the file still hangs; no second one is started.
    #[error("cannot read config {path}: an earlier read has not returned for {since:.1?}; is its file system hung?")]
    ReadHung {
        /// File.
        path: PathBuf,
        /// How long it has been hanging.
        since: std::time::Duration,
    },
}

/// What becomes of the CFS quota of a container given exclusive or isolated CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExclusiveCpuQuota {
    /// No quota (`-1`): the CPUs are the container's alone, so a quota could only throttle it
    /// for nothing; what the kubelet's `DisableCPUQuotaWithExclusiveCPUs` does for the CPUs
    /// of its static CPU manager, which nri-align replaces.
    #[default]
    Disable,
    /// The kubelet's quota stays, as before this key existed.
    Keep,
}

/// Log output format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The file as written: flat keys, all optional. Kept separate from [`Config`] because serde
/// cannot combine `flatten` with `deny_unknown_fields`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawConfig {
    policy: Option<Policy>,
    scope: Option<Scope>,
    reserved_cpus: Option<CpuSet>,
    gpu_mode: Option<GpuMode>,
    scheduler_choice: Option<SchedulerChoiceMode>,
    trusted_schedulers: Vec<String>,
    numa_choice: Option<NumaChoice>,
    mempolicy: Option<MemPolicy>,
    cpu_spread: Option<CpuSpread>,
    resize_shrink: Option<ResizeShrink>,
    allow_device_annotations: Option<bool>,
    full_pcpus_only: Option<bool>,
    exclusive_headroom: Option<u32>,
    exempt_namespaces: Vec<String>,
    exclusive_annotation_namespaces: Vec<String>,
    isolated_namespaces: Vec<String>,
    podresources_socket: Option<PathBuf>,
    podresources_resources: Option<Vec<String>>,
    podresources_timeout_ms: Option<u64>,
    trust_visible_devices_env: Option<bool>,
    pod_budgets: Option<bool>,
    cri_socket: Option<PathBuf>,
    cdi_spec_dirs: Option<Vec<PathBuf>>,
    leave_to_others: Vec<others::LeftField>,
    create_dev_char_links: Option<bool>,
    state_dir: Option<PathBuf>,
    state_fsync: Option<bool>,
    exclusive_cpu_quota: Option<ExclusiveCpuQuota>,
    replace_offlined_cpus: Option<bool>,
    verify_remote_memory_threshold: Option<u8>,
    metrics_address: Option<String>,
    log_format: Option<LogFormat>,
    log_level: Option<String>,
    plugin_idx: Option<String>,
    evict_refused_after: Option<String>,
    nrt: Option<nrt::RawNrt>,
}

/// The largest `exclusive_headroom` (CPUs per NUMA node): more than any node has today, and
/// small enough that twice it cannot overflow.
pub const MAX_EXCLUSIVE_HEADROOM: u32 = 4096;

/// The exclusive headroom asked for, bounded.
fn exclusive_headroom(asked: Option<u32>) -> Result<u32, String> {
    match asked {
        Some(h) if h > MAX_EXCLUSIVE_HEADROOM => Err(format!(
            "exclusive_headroom {h} is more than {MAX_EXCLUSIVE_HEADROOM} CPUs per NUMA node"
        )),
        h => Ok(h.unwrap_or(0)),
    }
}

/// The names `trusted_schedulers` takes, each once.
fn trusted_schedulers(names: &[String]) -> Result<Vec<Scheduler>, String> {
    let mut out = Vec::new();
    for name in names {
        let s = match name.trim() {
            "koordinator" => Scheduler::Koordinator,
            "crane" => Scheduler::Crane,
            other => {
                return Err(format!(
                    "trusted_schedulers entry {} is not a scheduler nri-align reads; expected \
                     koordinator or crane",
                    untrusted::quoted(other)
                ))
            }
        };
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(out)
}

/// The effective configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Placement settings (policy, scope, reserved CPUs, GPU mode, annotations, full cores).
    pub placement: PlacementConfig,
    /// Namespaces whose containers are never aligned: they run on the shared pool (or the
    /// reserved CPUs when some are set), never on CPUs held exclusively.
    pub exempt_namespaces: Vec<String>,
    /// The kubelet's PodResources API; `None` when turned off.
    pub podresources: Option<PodResourcesConfig>,
    /// Whether `NVIDIA_VISIBLE_DEVICES` lists are allocations when the kubelet does not say
    /// (nodes whose admission policy keeps pods from setting the variable). Off: a GPU named
    /// only there is aligned to, never held, remapped or given.
    pub trust_visible_devices_env: bool,
    /// Whether a pod whose sandbox resources are Guaranteed with whole CPUs gets them as one
    /// budget on an aligned node set (`enforce/engine/pod_budget.rs`). Off by default: the
    /// runtime passes pod-level resources and the sum of the containers' in the same field,
    /// so turning it on also gives every Guaranteed pod's fractional containers a pool
    /// private to their pod instead of the node's shared pool.
    pub pod_budgets: bool,
    /// The schedulers whose placement annotations (Koordinator's `resource-status` and
    /// `device-allocated`, Crane's `topology-result`) this node acts on. Empty by default: any
    /// pod author can write those annotations, so they are the scheduler's word only where an
    /// admission policy or the scheduler's webhook keeps pods from setting them, which only the
    /// node's administrator knows. Even a trusted choice only narrows the devices the kubelet,
    /// a DRA claim or the runtime gave the container; it never adds one.
    pub trusted_schedulers: Vec<Scheduler>,
    /// The runtime's CRI socket, read to list what runs when the runtime launched nri-align
    /// and sends it no Synchronize (containerd 1.7, `enforce::cri_listing`). `None`: the
    /// runtime's packaged socket, by the name Configure gives; an empty path: never listed.
    pub cri_socket: Option<PathBuf>,
    /// Directories of CDI spec files (absolute, read under the host root), later ones taking
    /// precedence; empty: CDI names are read from the names alone.
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// The container fields another NRI plugin owns on this node (a DRA CPU or memory
    /// driver's plugin): nri-align never sets them, and aligns what it still sets to what the
    /// container gets from the other plugin (`enforce/engine/others.rs`).
    pub leave_to_others: LeftToOthers,
    /// Whether a device node handed to a container in a systemd scope gets the
    /// `/dev/char/MAJ:MIN` link runc's systemd cgroup driver needs to keep it, when the host
    /// lacks one (`enforce/engine/devlinks.rs`). Off: such a device is only reported at risk.
    pub create_dev_char_links: bool,
    /// State directory; `None` means the command-line default.
    pub state_dir: Option<PathBuf>,
    /// Make every state write durable (fdatasync) before the runtime gets its answer. Off by
    /// default: the state only has to outlive the plugin and runtime processes
    /// (`enforce/state`), and an fsync cost milliseconds per decision on a VM disk.
    pub state_fsync: bool,
    /// The CFS quota of containers with exclusive or isolated CPUs (`enforce/engine/quota.rs`).
    pub exclusive_cpu_quota: ExclusiveCpuQuota,
    /// When an exclusive CPU of a running container goes offline, give the container a free
    /// CPU of its nodes instead. Off by default: the container keeps its other CPUs and is
    /// reported, since a silent replacement changes what a latency-sensitive workload runs on.
    pub replace_offlined_cpus: bool,
    /// `verify` and the daemon's `container_local_memory_ratio` flag a container when more
    /// than this percent of its resident memory is off its nodes.
    pub verify_remote_memory_threshold: u8,
    /// Where to serve `/metrics`; `None` serves nothing.
    pub metrics_address: Option<SocketAddr>,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter (tracing `EnvFilter` syntax).
    pub log_level: Option<String>,
    /// Plugin index (two digits).
    pub plugin_idx: Option<String>,
    /// Evict (Eviction API) a pod with a controller owner once nri-align has refused its
    /// container this long without a break (`src/evict`); `None`: never.
    pub evict_refused_after: Option<std::time::Duration>,
    /// NodeResourceTopology publishing.
    pub nrt: NrtConfig,
}

/// The daemon's GPU mode when the file names none: `keep`. `remap` is opt-in because the
/// kubelet never learns of a remap: PodResources and per-pod GPU metrics (dcgm-exporter's pod
/// labels come from PodResources) keep naming the device plugin's choice, not the GPU the
/// container uses, and a remap is only safe while every later GPU container's kubelet answer
/// is read (see `enforce::inputs::build`).
pub const DEFAULT_GPU_MODE: GpuMode = GpuMode::Keep;

impl Default for Config {
    /// What an empty file means (PodResources on, at the kubelet's default socket).
    fn default() -> Self {
        Self {
            placement: PlacementConfig {
                gpu_mode: DEFAULT_GPU_MODE,
                ..PlacementConfig::default()
            },
            exempt_namespaces: Vec::new(),
            podresources: Some(PodResourcesConfig::default()),
            trust_visible_devices_env: false,
            pod_budgets: false,
            trusted_schedulers: Vec::new(),
            cri_socket: None,
            cdi_spec_dirs: crate::host::cdi::DEFAULT_SPEC_DIRS
                .iter()
                .map(PathBuf::from)
                .collect(),
            leave_to_others: LeftToOthers::default(),
            create_dev_char_links: true,
            state_dir: None,
            state_fsync: false,
            exclusive_cpu_quota: ExclusiveCpuQuota::Disable,
            replace_offlined_cpus: false,
            verify_remote_memory_threshold: memloc::DEFAULT_REMOTE_MEMORY_THRESHOLD,
            metrics_address: None,
            log_format: LogFormat::default(),
            log_level: None,
            plugin_idx: None,
            evict_refused_after: None,
            nrt: NrtConfig::default(),
        }
    }
}

impl Config {
    /// Parses YAML text; `origin` names it in error messages.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        untrusted::check_len("the configuration", text.len(), untrusted::MAX_CONFIG_BYTES)
            .map_err(|message| ConfigError::Invalid {
                origin: origin.to_string(),
                message,
            })?;
        let mut raw = RawConfig::parse(text, origin)?;
        // Every check below names the value it refuses; a backstop keeps any of them bounded.
        let invalid = |message: String| ConfigError::Invalid {
            origin: origin.to_string(),
            message: untrusted::message(&message),
        };
        let podresources = podresources_config(&raw).map_err(&invalid)?;
        check_cri_socket(&raw).map_err(&invalid)?;
        let placement = placement_of(&raw).map_err(&invalid)?;
        let metrics_address = metrics_address_of(&raw).map_err(&invalid)?;
        check_names(&raw).map_err(&invalid)?;
        let trusted_schedulers = trusted_schedulers(&raw.trusted_schedulers).map_err(&invalid)?;
        let verify_remote_memory_threshold =
            memloc::remote_memory_threshold(raw.verify_remote_memory_threshold)
                .map_err(&invalid)?;
        let nrt = raw.nrt.unwrap_or_default().resolve().map_err(invalid)?;
        let evict_refused_after =
            evict_window(raw.evict_refused_after.as_deref()).map_err(invalid)?;
        let cdi_spec_dirs = cdi_spec_dirs_of(raw.cdi_spec_dirs.take()).map_err(invalid)?;
        Ok(Config {
            placement,
            exempt_namespaces: raw.exempt_namespaces,
            podresources,
            trust_visible_devices_env: raw.trust_visible_devices_env.unwrap_or(false),
            pod_budgets: raw.pod_budgets.unwrap_or(false),
            trusted_schedulers,
            cri_socket: raw.cri_socket,
            cdi_spec_dirs,
            leave_to_others: LeftToOthers::of(&raw.leave_to_others),
            create_dev_char_links: raw.create_dev_char_links.unwrap_or(true),
            state_dir: raw.state_dir,
            state_fsync: raw.state_fsync.unwrap_or(false),
            exclusive_cpu_quota: raw.exclusive_cpu_quota.unwrap_or_default(),
            replace_offlined_cpus: raw.replace_offlined_cpus.unwrap_or(false),
            verify_remote_memory_threshold,
            metrics_address,
            log_format: raw.log_format.unwrap_or_default(),
            log_level: raw.log_level,
            plugin_idx: raw.plugin_idx,
            evict_refused_after,
            nrt,
        })
    }

    /// Reads and parses `path` on this thread ([`read_config_file`]: a world-writable file, a
    /// FIFO, a device or a huge file is refused).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::from_bytes(&read_config_file(path)?, path)
    }

    /// Parses the bytes of file `path`.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        let text = std::str::from_utf8(bytes).map_err(|e| ConfigError::Parse {
            origin: origin.clone(),
            message: format!("not UTF-8 text ({e})"),
        })?;
        Config::parse(text, &origin)
    }

    /// The configuration a runtime passes in `ConfigureRequest.config` (pre-launched plugins get
    /// their drop-in file's content there). A config file named on the command line wins over
    /// it: the runtime's copy is then only checked, and `None` is returned.
    pub fn from_dropin(text: &str, have_file: bool) -> Result<Option<Config>, ConfigError> {
        let cfg = Config::parse(text, "drop-in config")?;
        Ok((!have_file && !text.trim().is_empty()).then_some(cfg))
    }

    /// Checks what needs the host: reserved CPUs must exist and leave at least one CPU.
    pub fn validate_for(&self, topo: &Topology) -> Result<(), ConfigError> {
        let online = topo.online_cpus();
        let reserved = &self.placement.reserved_cpus;
        let invalid = |message| ConfigError::Invalid {
            origin: "configuration".into(),
            message,
        };
        if !reserved.is_subset(&online) {
            return Err(invalid(format!(
                "reserved_cpus {reserved} includes CPUs that are not online ({})",
                reserved.difference(&online)
            )));
        }
        if !online.is_empty() && online.difference(reserved).is_empty() {
            return Err(invalid(format!(
                "reserved_cpus {reserved} leaves no CPU for containers"
            )));
        }
        Ok(())
    }

    /// What a reload cannot change without a restart, as one message per differing key.
    pub fn restart_only_changes(&self, new: &Config) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.state_dir != new.state_dir {
            v.push("state_dir");
        }
        if self.metrics_address != new.metrics_address {
            v.push("metrics_address");
        }
        if self.log_format != new.log_format {
            v.push("log_format");
        }
        if self.log_level != new.log_level {
            v.push("log_level");
        }
        if self.plugin_idx != new.plugin_idx {
            v.push("plugin_idx");
        }
        if self.podresources != new.podresources {
            v.push("podresources_*");
        }
        // The registry and its watcher are made at start.
        if self.cdi_spec_dirs != new.cdi_spec_dirs {
            v.push("cdi_spec_dirs");
        }
        // The publisher and the object's name are set up at start; the resource names and
        // the policy it publishes follow a reload.
        if self.nrt.publish != new.nrt.publish {
            v.push("nrt.publish");
        }
        if self.nrt.node_name != new.nrt.node_name {
            v.push("nrt.node_name");
        }
        if self.nrt.resync_seconds != new.nrt.resync_seconds {
            v.push("nrt.resync_seconds");
        }
        // The eviction task and its API client are made at start.
        if self.evict_refused_after != new.evict_refused_after {
            v.push("evict_refused_after");
        }
        v
    }

    /// Whether containers of `namespace` are left alone.
    pub fn is_exempt(&self, namespace: &str) -> bool {
        self.exempt_namespaces.iter().any(|n| n == namespace)
    }
}

/// Shortest `evict_refused_after`: the kubelet retries a refused container within seconds at
/// first, so a shorter window would evict on the first refusals.
pub const MIN_EVICT_REFUSED_AFTER: std::time::Duration = std::time::Duration::from_secs(1);
/// Longest `evict_refused_after` (30 days).
pub const MAX_EVICT_REFUSED_AFTER: std::time::Duration =
    std::time::Duration::from_secs(30 * 86_400);

fn evict_window(text: Option<&str>) -> Result<Option<std::time::Duration>, String> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Ok(None);
    };
    let d = duration::parse(text)
        .map_err(|why| format!("evict_refused_after {} {why}", untrusted::quoted(text)))?;
    if !(MIN_EVICT_REFUSED_AFTER..=MAX_EVICT_REFUSED_AFTER).contains(&d) {
        return Err(format!(
            "evict_refused_after {} must be from 1s to 30d",
            untrusted::quoted(text)
        ));
    }
    Ok(Some(d))
}

impl RawConfig {
    /// The YAML text as written, before any value is checked.
    fn parse(text: &str, origin: &str) -> Result<RawConfig, ConfigError> {
        // An empty document is `null` to YAML: treat it as "all defaults".
        if text.trim().is_empty() {
            return Ok(RawConfig::default());
        }
        // Aliases are refused before they expand: a bomb in a file or a ConfigMap section is a
        // bad config like any other (the last good one stays).
        untrusted::yaml::check(text).map_err(|e| ConfigError::Parse {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        // serde repeats a bad value whole: keep the message's start and end only.
        serde_yaml_ng::from_str(text).map_err(|e| {
            let e = e.to_string();
            ConfigError::Parse {
                origin: origin.to_string(),
                message: untrusted::message(&e) + &keys::nearest_key_hint(&e),
            }
        })
    }
}

fn check_cri_socket(raw: &RawConfig) -> Result<(), String> {
    if let Some(p) = raw
        .cri_socket
        .as_ref()
        .filter(|p| !p.as_os_str().is_empty() && !p.is_absolute())
    {
        return Err(format!(
            "cri_socket {} must be an absolute path (or \"\" to turn listing off)",
            p.display()
        ));
    }
    Ok(())
}

/// The placement keys, the defaults where one is not set.
fn placement_of(raw: &RawConfig) -> Result<PlacementConfig, String> {
    let defaults = PlacementConfig::default();
    Ok(PlacementConfig {
        policy: raw.policy.unwrap_or(defaults.policy),
        scope: raw.scope.unwrap_or(defaults.scope),
        reserved_cpus: raw.reserved_cpus.clone().unwrap_or(defaults.reserved_cpus),
        gpu_mode: raw.gpu_mode.unwrap_or(DEFAULT_GPU_MODE),
        allow_device_annotations: raw
            .allow_device_annotations
            .unwrap_or(defaults.allow_device_annotations),
        full_pcpus_only: raw.full_pcpus_only.unwrap_or(defaults.full_pcpus_only),
        exclusive_annotation_namespaces: raw.exclusive_annotation_namespaces.clone(),
        isolated_namespaces: raw.isolated_namespaces.clone(),
        scheduler_choice: raw.scheduler_choice.unwrap_or_default(),
        numa_choice: raw.numa_choice.unwrap_or_default(),
        mempolicy: raw.mempolicy.unwrap_or_default(),
        exclusive_headroom: exclusive_headroom(raw.exclusive_headroom)?,
        cpu_spread: raw.cpu_spread.unwrap_or_default(),
        resize_shrink: raw.resize_shrink.unwrap_or_default(),
    })
}

fn metrics_address_of(raw: &RawConfig) -> Result<Option<SocketAddr>, String> {
    match raw.metrics_address.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(a) => a.parse::<SocketAddr>().map(Some).map_err(|e| {
            format!(
                "metrics_address {} is not HOST:PORT ({e})",
                untrusted::quoted(a)
            )
        }),
    }
}

/// The plugin index and the namespace lists: no empty entry.
fn check_names(raw: &RawConfig) -> Result<(), String> {
    if let Some(idx) = &raw.plugin_idx {
        validate_idx(idx)?;
    }
    if let Some(ns) = raw.exempt_namespaces.iter().find(|n| n.trim().is_empty()) {
        return Err(format!(
            "exempt_namespaces has an empty entry {}",
            untrusted::quoted(ns)
        ));
    }
    for (key, list) in [
        (
            "exclusive_annotation_namespaces",
            &raw.exclusive_annotation_namespaces,
        ),
        ("isolated_namespaces", &raw.isolated_namespaces),
    ] {
        if let Some(ns) = list.iter().find(|n| n.trim().is_empty()) {
            return Err(format!(
                "{key} has an empty entry {}",
                untrusted::quoted(ns)
            ));
        }
    }
    Ok(())
}

/// The CDI spec directories (absolute paths only), the default ones where none is set.
fn cdi_spec_dirs_of(dirs: Option<Vec<PathBuf>>) -> Result<Vec<PathBuf>, String> {
    if let Some(d) = dirs.iter().flatten().find(|d| !d.is_absolute()) {
        return Err(format!(
            "cdi_spec_dirs entry {} must be an absolute path",
            d.display()
        ));
    }
    Ok(dirs.unwrap_or_else(|| Config::default().cdi_spec_dirs))
}

/// A plugin index must be exactly two digits (the runtime sorts plugins by it).
pub fn validate_idx(idx: &str) -> Result<(), String> {
    if idx.len() == 2 && idx.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(format!(
            "plugin_idx {} must be exactly two digits",
            untrusted::quoted(idx)
        ))
    }
}

#[cfg(test)]
mod tests;
