//! `nri-align run`: the plugin daemon. Reads the configuration, sets up logging, state and
//! metrics, drops capabilities, then serves NRI until the runtime or a signal ends it. With API
//! access it also publishes the node's NodeResourceTopology ([`NrtPlan`], docs/nrt.md). What it
//! reports about itself while it runs (health, readiness, systemd) is in `run/health.rs`.

mod evict;
mod fleet;
mod health;
mod hotplug;
mod log_fields;
mod memloc;
mod nri_off;
mod retry;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

use crate::config::{validate_idx, Config, LogFormat};
use crate::enforce::engine::StateObserver;
use crate::enforce::state::StateStore;
use crate::nrt::fingerprint::PodId;
use crate::nrt::{ApiAccess, Feed, Publisher};
use crate::placement::NodeFree;

/// Default state directory.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/nri-align";
/// Default plugin index.
pub const DEFAULT_IDX: &str = "50";
/// Name nri-align registers under.
pub const PLUGIN_NAME: &str = "nri-align";

/// Arguments of `nri-align run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Configuration file (YAML), or a fleet ConfigMap's directory whose `node.NAME`,
    /// `group.NAME` or `default` section applies (docs/configuration.md); reloaded on SIGHUP
    /// and when it changes.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Runtime NRI socket to dial (ignored when launched by the runtime with NRI_PLUGIN_SOCKET).
    #[arg(long, default_value = "/var/run/nri/nri.sock")]
    pub socket: PathBuf,
    /// Plugin index (two digits) to register with [default: config `plugin_idx`, else 50].
    #[arg(long)]
    pub idx: Option<String>,
    /// Read sysfs, procfs and /dev under this directory instead of `/`.
    #[arg(long)]
    pub host_root: Option<PathBuf>,
    /// NVML library to load instead of the system libnvidia-ml.so.1.
    #[arg(long)]
    pub nvml_lib: Option<PathBuf>,
    /// Where decisions are persisted [default: config `state_dir`, else /var/lib/nri-align].
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Log filter (tracing EnvFilter syntax) [default: RUST_LOG, else config `log_level`, else
    /// info].
    #[arg(long)]
    pub log_level: Option<String>,
    /// kubeconfig to publish the node's NodeResourceTopology with [default: the pod's service
    /// account when running in a pod; neither: not published].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubernetes node name to publish under [default: config `nrt.node_name`, else NODE_NAME,
    /// else the hostname].
    #[arg(long)]
    pub node_name: Option<String>,
    /// Test only: evictions go to the API-server harness's stand-in Pod and Eviction CRDs
    /// (docs/e2e.md), not to the core API.
    #[arg(long, hide = true)]
    pub eviction_stand_ins: bool,
}

/// What `run` settled before connecting.
#[derive(Debug)]
pub struct Prepared {
    /// Effective configuration.
    pub config: Config,
    /// Hash of the configuration file's bytes (`config::content_hash`), 0 without a file.
    pub config_hash: u64,
    /// Opened state store.
    pub store: StateStore,
    /// Plugin index.
    pub idx: String,
    /// Host root.
    pub host_root: PathBuf,
    /// With a section directory: what was found there, settled against the host in `serve`
    /// (`config` then only supplies the start-up keys).
    pub fleet: Option<fleet::FleetStart>,
}

/// Runs the plugin until shut down.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let prepared = prepare(&args)?;
    serve(args, prepared)
}

/// Loads and checks everything that does not need the runtime: configuration, logging,
/// plugin index, state dir.
pub fn prepare(args: &RunArgs) -> anyhow::Result<Prepared> {
    let (config, config_hash, fleet) = match &args.config {
        Some(dir) if fleet::is_section_dir(dir) => {
            let f = fleet::start(args, dir);
            (fleet::start_keys(&f, args), 0, Some(f))
        }
        Some(path) => {
            let bytes = crate::config::read_config_file(path)?;
            (
                Config::from_bytes(&bytes, path)?,
                crate::config::content_hash(&bytes),
                None,
            )
        }
        None => (Config::default(), 0, None),
    };
    init_logging(args.log_level.as_deref(), &config);
    if let Some(f) = &fleet {
        fleet::log_start(f);
    }
    let idx = args
        .idx
        .clone()
        .or_else(|| config.plugin_idx.clone())
        .unwrap_or_else(|| DEFAULT_IDX.to_string());
    validate_idx(&idx).map_err(anyhow::Error::msg)?;
    let state_dir = args
        .state_dir
        .clone()
        .or_else(|| config.state_dir.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
    // A dir its filesystem keeps from being created or opened (read-only, full) is an outage
    // the daemon runs through, its decisions in memory; a wrong one stops it here.
    let store = StateStore::open_or_wait(&state_dir)
        .with_context(|| format!("state dir {}", state_dir.display()))?;
    let host_root = args.host_root.clone().unwrap_or_else(|| PathBuf::from("/"));
    Ok(Prepared {
        config,
        config_hash,
        store,
        idx,
        host_root,
        fleet,
    })
}

/// Sets up tracing: `--log-level`, then RUST_LOG, then the config's `log_level`, then info.
/// A second call (tests) keeps the first subscriber.
pub fn init_logging(cli_level: Option<&str>, config: &Config) {
    use tracing_subscriber::EnvFilter;
    let filter = cli_level
        .map(EnvFilter::new)
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .or_else(|| config.log_level.as_deref().map(EnvFilter::new))
        .unwrap_or_else(|| EnvFilter::new("info"));
    // Colour codes only for a terminal: in a log file, journald or a runtime's log they are
    // noise that breaks grep.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = match config.log_format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        // Names from the runtime are logged with their control characters escaped.
        LogFormat::Text => builder
            .fmt_fields(log_fields::PrintableFields::default())
            .try_init(),
    };
}

fn log_start(config_path: Option<&Path>, p: &Prepared) {
    tracing::info!(
        config = %config_path.map(|p| p.display().to_string()).unwrap_or_else(|| "(defaults)".into()),
        state = %p.store.path().display(),
        idx = %p.idx,
        policy = %p.config.placement.policy,
        scope = %p.config.placement.scope,
        reserved_cpus = %p.config.placement.reserved_cpus,
        gpu_mode = %p.config.placement.gpu_mode,
        "nri-align starting"
    );
}

fn serve(args: RunArgs, prepared: Prepared) -> anyhow::Result<()> {
    use crate::host::caps::drop_capabilities;
    use crate::metrics::Health;

    log_start(args.config.as_deref(), &prepared);
    let Prepared {
        config,
        config_hash,
        store,
        idx,
        host_root,
        fleet,
    } = prepared;
    let source = crate::topology::load::Source::HostRoot(host_root.clone());
    let topology = Arc::new(crate::topology::load::load(
        &source,
        args.nvml_lib.as_deref(),
    )?);
    let metrics_address = config.metrics_address;
    // The state log's directory, where the last good configuration is kept beside it.
    let state_dir = store
        .path()
        .parent()
        .map_or_else(|| PathBuf::from(DEFAULT_STATE_DIR), Path::to_path_buf);
    let (config, sections) = fleet::settle_or_check(config, fleet, &topology, &state_dir)?;
    let counters = Counters::new();
    // The kubeconfig and its certificates are read now, before capabilities go.
    let nrt = NrtPlan::prepare(&args, &config, &topology, &host_root)?;
    let evict =
        evict::EvictPlan::prepare(args.kubeconfig.as_deref(), &config, args.eviction_stand_ins)?;
    let kubelet = kubelet_source(&config);
    // Read once the capabilities are gone (below): a hostile spec is parsed without them.
    let cdi_dirs = config.cdi_spec_dirs.clone();
    let (mut engine, outage) = start_engine(&topology, config, store, &counters.daemon, &host_root);
    let uevents = (host_root == Path::new("/"))
        .then(hotplug::open_uevents)
        .flatten();

    nri_off::warn_if_missing(&args.socket, &host_root);
    let connection = crate::enforce::nri::Connection::new(PLUGIN_NAME, &idx, &args.socket)?;
    // Capabilities are per thread: drop them before any other thread starts (the endpoints',
    // the runtime's workers), so every thread inherits the reduced sets. Nothing after this
    // point needs one (see host/caps.rs); the inherited socket fd or the root-owned socket
    // path is enough.
    let caps = drop_capabilities(&[]).context("dropping capabilities")?;
    tracing::info!(kept = ?caps.kept, dropped = caps.dropped.len(), bounding = caps.bounding_dropped, "capabilities dropped");
    let health = Arc::new(Health::default());
    // The first read of the specs, and the watcher (a thread), after the capabilities went.
    let cdi = cdi_registry(&cdi_dirs, &host_root, counters.cdi, &health);
    let metrics = counters.daemon;
    fleet::report_start(&health, &metrics, sections.as_ref(), args.config.is_some());
    engine.set_health(health.clone());
    if let Some(addr) = metrics_address {
        let bound = health::spawn_endpoints(addr, metrics.clone(), health.clone())
            .with_context(|| format!("metrics on {addr}"))?;
        tracing::info!(address = %bound, "serving /metrics");
    }
    // Two workers, though the engine serves one event at a time under its lock: with one
    // event-loop thread the daemon held 1 MiB less at 1,000 containers, but building and
    // sending the 4,500 updates of an exclusive admission at 5,000 took half as long again
    // (pool move 1.9-2.0 to 2.8-3.0 ms, round trip 9 to 14 ms; `daemon_scale`, alternated),
    // a cost the runtime waits for.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run_plugin(Daemon {
        engine,
        outage,
        nrt: nrt.map(|plan| (plan, counters.nrt)),
        evict: evict.map(|plan| (plan, counters.evict)),
        metrics,
        health,
        sample_memory: metrics_address.is_some(),
        host_root,
        connection,
        kubelet,
        cdi,
        uevents,
        sections,
        config_file: args.config.clone(),
        config_hash,
        topology,
        state_dir,
    }))
}

/// The daemon's metrics and the other parts' counters its registry serves.
struct Counters {
    daemon: Arc<crate::metrics::Metrics>,
    nrt: crate::nrt::metrics::NrtMetrics,
    evict: crate::evict::EvictMetrics,
    cdi: crate::host::cdi::CdiMetrics,
}

impl Counters {
    fn new() -> Counters {
        let nrt = crate::nrt::metrics::NrtMetrics::default();
        let evict = crate::evict::EvictMetrics::default();
        let cdi = crate::host::cdi::CdiMetrics::default();
        let daemon = Arc::new(crate::metrics::Metrics::new_with(|r| {
            nrt.register(r);
            evict.register(r);
            cdi.register(r);
        }));
        Counters {
            daemon,
            nrt,
            evict,
            cdi,
        }
    }
}

type DaemonEngine = crate::enforce::engine::Engine<crate::placement::Allocator>;

/// The engine on `topology`, its state recovered, following hot-plug; with the signal of a
/// failing state directory.
fn start_engine(
    topology: &Arc<Topology>,
    config: Config,
    store: StateStore,
    metrics: &Arc<crate::metrics::Metrics>,
    host_root: &Path,
) -> (DaemonEngine, Arc<tokio::sync::Notify>) {
    let allocator =
        crate::placement::Allocator::new(Arc::clone(topology), config.placement.clone());
    let mut engine = crate::enforce::engine::Engine::new(
        allocator,
        config,
        Some(store),
        Some(metrics.clone()),
        Box::new(crate::host::devices::HostDevices::new(host_root)),
    );
    // Before the recovery, which may find the state dir failing already.
    let outage = retry::outage_signal(&mut engine);
    engine.recover(host_root);
    // The topology was read once above; from now on its online CPUs and memory nodes are
    // followed (hot-plug, offlining), through the kernel's uevents on the live host only.
    engine.watch_hotplug(host_root);
    (engine, outage)
}

/// What the daemon's async part runs with: made before the runtime starts, most of it while
/// the capabilities were still held.
struct Daemon {
    engine: DaemonEngine,
    outage: Arc<tokio::sync::Notify>,
    nrt: Option<(NrtPlan, crate::nrt::metrics::NrtMetrics)>,
    evict: Option<(evict::EvictPlan, crate::evict::EvictMetrics)>,
    metrics: Arc<crate::metrics::Metrics>,
    health: Arc<crate::metrics::Health>,
    /// Whether containers' memory locality is sampled: only where the metrics are served.
    sample_memory: bool,
    host_root: PathBuf,
    connection: crate::enforce::nri::Connection,
    kubelet: Option<Arc<crate::enforce::podresources::KubeletSource>>,
    cdi: Option<Arc<crate::host::cdi::CdiRegistry>>,
    uevents: Option<std::os::fd::OwnedFd>,
    sections: Option<fleet::Sections>,
    config_file: Option<PathBuf>,
    config_hash: u64,
    topology: Arc<Topology>,
    state_dir: PathBuf,
}

/// Starts the observers and followers, then serves the runtime until it stops.
async fn run_plugin(d: Daemon) -> anyhow::Result<()> {
    use std::sync::Mutex;

    use crate::enforce::nri::AlignPlugin;

    let (mut engine, health, metrics) = (d.engine, d.health, d.metrics);
    if let Some((plan, counters)) = d.nrt {
        // Created at start with the recovered state; every later change follows.
        let observer = plan.start(counters)?;
        health::spawn_nrt_follower(observer.status(), health.clone());
        engine.set_observer(Box::new(observer));
    }
    if let Some((plan, counters)) = d.evict {
        engine.set_refusal_observer(Box::new(plan.start(counters)?));
    }
    let engine = Arc::new(Mutex::new(engine));
    health::spawn_link_follower(d.connection.watch(), health.clone(), metrics.clone());
    retry::spawn_state_retry(engine.clone(), d.outage, health.clone());
    // Only where someone can read it: each sample reads a file per container.
    if d.sample_memory {
        memloc::spawn(engine.clone(), metrics.clone(), d.host_root);
    }
    let probe = engine.clone();
    health::spawn_heartbeat(health.clone(), move || {
        !matches!(probe.try_lock(), Err(std::sync::TryLockError::WouldBlock))
    });
    let plugin = Arc::new(
        AlignPlugin::new(engine, d.config_file.is_some())
            .with_kubelet(d.kubelet, Some(metrics.clone()))
            .with_cdi(d.cdi),
    );
    // Where the runtime sends no Synchronize, what runs is listed over its CRI.
    crate::enforce::nri::learning::spawn(d.connection.watch(), plugin.clone());
    hotplug::spawn(plugin.clone(), d.uevents);
    match (d.sections, d.config_file) {
        (Some((follow, _)), _) => fleet::follow(
            follow,
            d.topology,
            d.state_dir,
            plugin.clone(),
            metrics.clone(),
            health,
        )?,
        (None, Some(path)) => follow_config_file(path, d.config_hash, plugin.clone(), metrics)?,
        (None, None) => {}
    }
    d.connection.serve(plugin, stopped()).await?;
    Ok(())
}

/// The CDI spec registry of `dirs` under `host_root`, read now, with its guarded watcher
/// (a watcher that ends or stalls marks `/readyz` degraded and is replaced); `None` when no
/// directory is configured.
fn cdi_registry(
    dirs: &[PathBuf],
    host_root: &std::path::Path,
    metrics: crate::host::cdi::CdiMetrics,
    health: &Arc<crate::metrics::Health>,
) -> Option<Arc<crate::host::cdi::CdiRegistry>> {
    if dirs.is_empty() {
        return None;
    }
    let r = crate::host::cdi::CdiRegistry::with_metrics(host_root, dirs, metrics);
    tracing::info!(dirs = ?dirs, devices = r.snapshot().len(), "reading CDI specs");
    let health = Arc::clone(health);
    let watched = r.watch_guarded(crate::host::cdi::WatchTiming::default(), move |why| {
        health.set_degraded("cdi", why)
    });
    if let Err(e) = watched {
        tracing::warn!("CDI spec directories not watched ({e}): specs written later are not seen");
    }
    Some(r)
}

/// The kubelet's PodResources API as the configuration names it, when it does.
fn kubelet_source(config: &Config) -> Option<Arc<crate::enforce::podresources::KubeletSource>> {
    config.podresources.clone().map(|c| {
        tracing::info!(socket = %c.socket.display(), resources = %c.resources.join(","), timeout_ms = c.timeout.as_millis() as u64, "reading allocations from the kubelet's PodResources API");
        Arc::new(crate::enforce::podresources::KubeletSource::new(c))
    })
}

/// Reloads the configuration file at `path` (whose bytes hashed to `config_hash` at start)
/// into `plugin` when it changes or on SIGHUP, counting each outcome in `metrics`.
fn follow_config_file(
    path: PathBuf,
    config_hash: u64,
    plugin: Arc<crate::enforce::nri::AlignPlugin<crate::placement::Allocator>>,
    metrics: Arc<crate::metrics::Metrics>,
) -> anyhow::Result<()> {
    crate::config::spawn_reloader(
        path,
        config_hash,
        crate::config::ReloadOptions::default(),
        move |cfg| {
            let moving = plugin.reload(cfg).map_err(|e| e.to_string())?;
            if moving > 0 {
                tracing::info!(
                    containers = moving,
                    "shared containers follow the new pool with the next container event"
                );
            }
            Ok(())
        },
        move |outcome| match outcome {
            crate::config::Outcome::Applied(_) => metrics.config_reloaded(true),
            crate::config::Outcome::Rejected(..) => metrics.config_reloaded(false),
            crate::config::Outcome::BackToApplied => metrics.config_file_back(),
            crate::config::Outcome::Unchanged => {}
        },
    )?;
    Ok(())
}

/// Completes on SIGTERM or Ctrl-C (Ctrl-C alone where SIGTERM cannot be watched), after
/// telling systemd the daemon is stopping.
async fn stopped() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    health::notify_stopping();
}

/// What publishing the NodeResourceTopology needs, settled before the runtime starts.
pub struct NrtPlan {
    access: ApiAccess,
    client_config: kube::Config,
    node_name: String,
    config: Config,
    topology: Arc<Topology>,
    host_root: PathBuf,
}

use crate::topology::Topology;

impl NrtPlan {
    /// `None` (said once in the log) when publishing is off: `nrt.publish: false`, or no
    /// `--kubeconfig` and not in a pod with a service account. An unusable kubeconfig or node
    /// name is an error: both were asked for.
    pub fn prepare(
        args: &RunArgs,
        config: &Config,
        topology: &Arc<Topology>,
        host_root: &Path,
    ) -> anyhow::Result<Option<NrtPlan>> {
        if !config.nrt.publish {
            tracing::info!("NodeResourceTopology publishing off (nrt.publish: false)");
            return Ok(None);
        }
        let Some(access) = ApiAccess::detect(args.kubeconfig.as_deref()) else {
            tracing::info!(
                "NodeResourceTopology publishing off: no --kubeconfig and not in a pod with a \
                 service account"
            );
            return Ok(None);
        };
        let node_name = node_name(
            args.node_name.as_deref(),
            config.nrt.node_name.as_deref(),
            std::env::var("NODE_NAME").ok(),
            hostname,
        )
        .map_err(anyhow::Error::msg)?;
        let client_config = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(access.config(crate::nrt::client::Timeouts::default()))
            .context("NodeResourceTopology publishing")?;
        Ok(Some(NrtPlan {
            access,
            client_config,
            node_name,
            config: config.clone(),
            topology: Arc::clone(topology),
            host_root: host_root.to_path_buf(),
        }))
    }

    /// Starts the publisher (inside the daemon's tokio runtime) and returns the engine's
    /// observer feeding it.
    pub fn start(self, metrics: crate::nrt::metrics::NrtMetrics) -> anyhow::Result<NrtObserver> {
        let client = crate::nrt::client::bounded_client(
            self.client_config,
            crate::nrt::client::Timeouts::default(),
        )
        .context("NodeResourceTopology publishing")?;
        let options = crate::nrt::PublishOptions {
            resync: std::time::Duration::from_secs(self.config.nrt.resync_seconds),
            ..Default::default()
        };
        tracing::info!(
            node = %self.node_name,
            api = %self.access.describe(),
            gpu_resource = self.config.nrt.resources.gpu.as_deref().unwrap_or("(not published)"),
            rdma_nic_resource = self.config.nrt.resources.rdma_nic.as_deref().unwrap_or("(not published)"),
            "publishing NodeResourceTopology"
        );
        let publisher = Publisher::spawn_refreshing(
            client,
            self.config.nrt_settings(&self.node_name),
            options,
            metrics,
            Some(crate::nrt::feed::hugepages_refresh(self.host_root)),
        );
        Ok(NrtObserver {
            feed: Feed::new(publisher, self.topology),
            node_name: self.node_name,
        })
    }
}

/// The engine's observer that publishes: every change becomes a snapshot for the publisher.
pub struct NrtObserver {
    feed: Feed,
    node_name: String,
}

impl NrtObserver {
    /// The publisher's progress, as it changes.
    pub fn status(&self) -> tokio::sync::watch::Receiver<crate::nrt::PublishStatus> {
        self.feed.publisher().follow_status()
    }
}

impl StateObserver for NrtObserver {
    fn state_changed(&self, free: &[NodeFree], pods: Option<&Arc<[PodId]>>) {
        self.feed.state(free, pods);
    }

    fn config_changed(&self, config: &Config) {
        self.feed.settings(config.nrt_settings(&self.node_name));
    }

    fn placement_refused(&self) {
        self.feed.reread();
    }
}

/// The node name to publish under: `--node-name`, else `nrt.node_name`, else `NODE_NAME` (the
/// DaemonSet sets it from the downward API), else the hostname in lowercase (the kubelet's
/// default node name).
pub fn node_name(
    flag: Option<&str>,
    config: Option<&str>,
    env: Option<String>,
    hostname: impl FnOnce() -> Option<String>,
) -> Result<String, String> {
    let (name, from) = if let Some(n) = flag {
        (n.to_string(), "--node-name")
    } else if let Some(n) = config {
        (n.to_string(), "nrt.node_name")
    } else if let Some(n) = env.filter(|n| !n.trim().is_empty()) {
        (n, "NODE_NAME")
    } else if let Some(n) = hostname() {
        (n.to_lowercase(), "the hostname")
    } else {
        return Err(
            "no node name to publish the NodeResourceTopology under: set --node-name, \
             nrt.node_name or NODE_NAME"
                .into(),
        );
    };
    let name = name.trim().to_string();
    if crate::nrt::builder::is_dns_subdomain(&name) {
        Ok(name)
    } else {
        Err(format!(
            "node name {name:?} (from {from}) is not a Kubernetes node name (lowercase letters, \
             digits, '-' and '.'): set --node-name, nrt.node_name or NODE_NAME to the node's name"
        ))
    }
}

fn hostname() -> Option<String> {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
