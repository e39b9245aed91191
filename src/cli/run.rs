//! `nri-align run`: the plugin daemon. Reads the configuration, sets up logging, state and
//! metrics, drops capabilities, then serves NRI until the runtime or a signal ends it. What it
//! reports about itself while it runs (health, readiness, systemd) is in `run/lifecycle.rs`.

mod lifecycle;

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::config::{validate_idx, Config, LogFormat};
use crate::enforce::state::StateStore;

/// Default state directory.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/nri-align";
/// Default plugin index.
pub const DEFAULT_IDX: &str = "50";
/// Name nri-align registers under.
pub const PLUGIN_NAME: &str = "nri-align";

/// Arguments of `nri-align run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Configuration file (YAML); reloaded on SIGHUP and when it changes.
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
}

/// Runs the plugin until shut down.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let prepared = prepare(&args)?;
    serve(args, prepared)
}

/// Loads and checks everything that does not need the runtime: configuration, logging,
/// plugin index, state dir.
pub fn prepare(args: &RunArgs) -> anyhow::Result<Prepared> {
    let (config, config_hash) = match &args.config {
        Some(path) => {
            let bytes = crate::config::read_config_file(path)?;
            (
                Config::from_bytes(&bytes, path)?,
                crate::config::content_hash(&bytes),
            )
        }
        None => (Config::default(), 0),
    };
    init_logging(args.log_level.as_deref(), &config);
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
    let store = StateStore::open(&state_dir)
        .with_context(|| format!("state dir {}", state_dir.display()))?;
    let host_root = args.host_root.clone().unwrap_or_else(|| PathBuf::from("/"));
    Ok(Prepared {
        config,
        config_hash,
        store,
        idx,
        host_root,
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
        LogFormat::Text => builder.try_init(),
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
    use std::sync::{Arc, Mutex};

    use crate::enforce::engine::Engine;
    use crate::enforce::nri::AlignPlugin;
    use crate::host::caps::drop_capabilities;
    use crate::host::devices::HostDevices;
    use crate::metrics::{Health, Metrics, ServeLimits};
    use crate::placement::Allocator;

    log_start(args.config.as_deref(), &prepared);
    let Prepared {
        config,
        config_hash,
        store,
        idx,
        host_root,
    } = prepared;
    let source = crate::topology::load::Source::HostRoot(host_root.clone());
    let topology = crate::topology::load::load(&source, args.nvml_lib.as_deref())?;
    config.validate_for(&topology)?;
    let metrics = Arc::new(Metrics::new());
    let allocator = Allocator::new(Arc::new(topology), config.placement.clone());
    let metrics_address = config.metrics_address;
    let mut engine = Engine::new(
        allocator,
        config,
        Some(store),
        Some(metrics.clone()),
        Box::new(HostDevices::new(&host_root)),
    );
    engine.recover(&host_root);

    let connection = crate::enforce::nri::Connection::new(PLUGIN_NAME, &idx, &args.socket)?;
    // Capabilities are per thread: drop them before the async runtime starts its workers, so
    // every thread inherits the reduced sets. Nothing after this point needs one (see
    // host/caps.rs); the inherited socket fd or the root-owned socket path is enough.
    let caps = drop_capabilities(&[]).context("dropping capabilities")?;
    tracing::info!(kept = ?caps.kept, dropped = caps.dropped.len(), bounding = caps.bounding_dropped, "capabilities dropped");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let health = Arc::new(Health::default());
        if let Some(addr) = metrics_address {
            let (bound, _task) = crate::metrics::serve(
                addr,
                metrics.clone(),
                health.clone(),
                ServeLimits::default(),
            )
            .await
            .with_context(|| format!("metrics on {addr}"))?;
            tracing::info!(address = %bound, "serving /metrics");
        }
        let engine = Arc::new(Mutex::new(engine));
        lifecycle::spawn_link_follower(connection.watch(), health.clone(), metrics.clone());
        let probe = engine.clone();
        lifecycle::spawn_heartbeat(health, move || {
            !matches!(probe.try_lock(), Err(std::sync::TryLockError::WouldBlock))
        });
        let plugin = Arc::new(AlignPlugin::new(engine, args.config.is_some()));
        if let Some(path) = args.config.clone() {
            let plugin = plugin.clone();
            let counted = metrics.clone();
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
                    crate::config::Outcome::Applied(_) => counted.config_reloaded(true),
                    crate::config::Outcome::Rejected(..) => counted.config_reloaded(false),
                    crate::config::Outcome::BackToApplied => counted.config_file_back(),
                    crate::config::Outcome::Unchanged => {}
                },
            )?;
        }
        let stop = async {
            use tokio::signal::unix::{signal, SignalKind};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
            lifecycle::notify_stopping();
        };
        connection.serve(plugin, stop).await?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn args(config: Option<PathBuf>, state: PathBuf) -> RunArgs {
        RunArgs {
            config,
            socket: PathBuf::from("/nonexistent.sock"),
            idx: None,
            host_root: None,
            nvml_lib: None,
            state_dir: Some(state),
            log_level: Some("warn".into()),
        }
    }

    #[test]
    fn prepare_reads_config_and_state_dir() {
        let t = tempfile::tempdir().expect("tmp");
        let cfg = t.path().join("c.yaml");
        std::fs::write(&cfg, "plugin_idx: \"07\"\npolicy: restricted\n").expect("write");
        let p = prepare(&args(Some(cfg), t.path().join("state"))).expect("prepared");
        assert_eq!(p.idx, "07");
        assert!(t.path().join("state").is_dir());
        assert_eq!(p.host_root, PathBuf::from("/"));
    }

    #[test]
    fn prepare_refuses_world_writable_config_and_bad_idx() {
        let t = tempfile::tempdir().expect("tmp");
        let cfg = t.path().join("c.yaml");
        std::fs::write(&cfg, "").expect("write");
        std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let err = prepare(&args(Some(cfg), t.path().join("s"))).expect_err("refused");
        assert!(format!("{err:#}").contains("world-writable"), "{err:#}");
        let mut a = args(None, t.path().join("s"));
        a.idx = Some("100".into());
        assert!(format!("{:#}", prepare(&a).expect_err("idx")).contains("two digits"));
    }
}
