//! `run --config DIR`: a fleet's ConfigMap mounted as a directory of sections
//! (`config::select`). Who this node is (its name, and its group from its Node's labels when
//! the API can be reached), which section applies, what runs when it cannot (`config::settle`),
//! and how reloads follow the same rules.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::config::select::{select_in_dir, Identity, Selected, Source, GROUP_LABEL};
use crate::config::settle::{keep_last_good, settle, Settled};
use crate::config::{section_hash, Config, ConfigError, Loaded, Outcome, Relabel};
use crate::metrics::{Health, Metrics};
use crate::topology::Topology;

use super::RunArgs;

/// What `prepare` found in the section directory, settled against the host once it is known.
#[derive(Debug)]
pub struct FleetStart {
    /// The directory.
    pub dir: PathBuf,
    /// This node.
    pub who: Identity,
    /// The section chosen and read (or why none could be).
    pub chosen: Result<Option<Selected>, ConfigError>,
    /// Why the node's labels could not be read, when API access was there and failed.
    pub labels_unread: Option<String>,
    /// Warnings for the log.
    pub notes: Vec<String>,
    /// The API access the labels were read with, to read them again at reloads.
    pub access: Option<crate::nrt::ApiAccess>,
}

/// Whether `--config` names a fleet's section directory rather than a file.
pub fn is_section_dir(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_dir())
}

/// Reads who this node is and its section in `dir`. The node name is `--node-name`, else
/// `NODE_NAME`, else the hostname; the group is the node's [`GROUP_LABEL`] label, read from
/// the API when there is access (else the node is chosen for by name alone).
pub fn start(args: &RunArgs, dir: &Path) -> FleetStart {
    let mut notes = Vec::new();
    let node = super::node_name(
        args.node_name.as_deref(),
        None,
        std::env::var("NODE_NAME").ok(),
        super::hostname,
    )
    .map_err(|e| {
        notes.push(format!(
            "configuration sections: {e}; only `default` can apply"
        ))
    })
    .ok();
    let access = crate::nrt::ApiAccess::detect(args.kubeconfig.as_deref());
    let labels = match (&node, &access) {
        (Some(name), Some(access)) => Some(read_labels(access, name)),
        _ => None,
    };
    let (who, labels_unread) = match labels {
        Some(Ok(labels)) => match Identity::from_labels(
            node.clone(),
            labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ) {
            Ok(who) => (who, None),
            Err(why) => (Identity { node, group: None }, Some(why)),
        },
        Some(Err(why)) => (Identity { node, group: None }, Some(why)),
        None => (Identity { node, group: None }, None),
    };
    if let Some(why) = &labels_unread {
        notes.push(format!(
            "cannot read this node's {GROUP_LABEL} label ({why}); choosing its configuration \
             by node name alone"
        ));
    }
    if let Ok((_, other)) = crate::config::select::list_dir(dir) {
        if !other.is_empty() {
            notes.push(format!(
                "{}: not configuration sections (default, group.NAME, node.NAME), not read: {}",
                dir.display(),
                other.join(",")
            ));
        }
    }
    let chosen = select_in_dir(dir, &who);
    FleetStart {
        dir: dir.to_path_buf(),
        who,
        chosen,
        labels_unread,
        notes,
        access,
    }
}

/// Logs what [`start`] found (once logging is set up, which needs the section it chose).
pub fn log_start(f: &FleetStart) {
    for n in &f.notes {
        tracing::warn!("{n}");
    }
    match &f.chosen {
        Ok(Some(sel)) => {
            tracing::info!(dir = %f.dir.display(), node = f.who.node.as_deref().unwrap_or("(unknown)"), group = f.who.group.as_deref().unwrap_or("(none)"), section = %sel.key, "configuration section chosen")
        }
        Ok(None) => {
            tracing::info!(dir = %f.dir.display(), node = f.who.node.as_deref().unwrap_or("(unknown)"), "no configuration section for this node: built-in defaults")
        }
        Err(_) => {}
    }
}

/// Time limits of a read of the node's labels: a slow API server delays the start by at most
/// ~8 s, a reload by as much.
const LABEL_TIMEOUTS: crate::nrt::client::Timeouts = crate::nrt::client::Timeouts {
    connect: std::time::Duration::from_secs(3),
    request: std::time::Duration::from_secs(5),
    total: std::time::Duration::from_secs(8),
};

/// The node's labels from the API server: `get` on its Node, metadata only, bounded in size
/// and time like every other request.
async fn labels_of(
    access: &crate::nrt::ApiAccess,
    node: &str,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    let client = access
        .client(LABEL_TIMEOUTS)
        .await
        .map_err(|e| e.to_string())?;
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    let meta = api
        .get_metadata(node)
        .await
        .map_err(|e| crate::untrusted::message(&format!("get node {node}: {e}")))?;
    Ok(meta.metadata.labels.unwrap_or_default())
}

/// [`labels_of`] before the daemon's runtime exists.
fn read_labels(
    access: &crate::nrt::ApiAccess,
    node: &str,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(labels_of(access, node))
}

/// Reads the node's group again at reloads, where the API can be reached.
fn relabeler(access: Option<crate::nrt::ApiAccess>, node: Option<String>) -> Option<Relabel> {
    let (access, node) = (access?, node?);
    Some(Arc::new(move || {
        let (access, node) = (access.clone(), node.clone());
        Box::pin(async move {
            let labels = labels_of(&access, &node).await?;
            Identity::from_labels(None, labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map(|who| who.group)
        })
    }))
}

/// The configuration the start-up keys (logging, plugin index, state dir, metrics address)
/// are read from: the chosen section when it parses, else the last good one in the state dir
/// (so a section with a typo still serves `/readyz` where the last one did), else the
/// defaults. The settings that place containers are settled later, against the host.
pub fn start_keys(f: &FleetStart, args: &RunArgs) -> Config {
    if let Ok(Some(sel)) = &f.chosen {
        if let Ok(c) = Config::from_bytes(&sel.bytes, &sel.path) {
            return c;
        }
    }
    let state = args
        .state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(super::DEFAULT_STATE_DIR));
    let path = state.join(crate::config::settle::LAST_GOOD_FILE);
    crate::config::read_config_file(&path)
        .ok()
        .and_then(|b| Config::from_bytes(&b, &path).ok())
        .unwrap_or_default()
}

/// The outcome at start: what is in force, and the reloader's memory of it.
pub struct Started {
    /// The configuration settled on.
    pub settled: Settled,
    /// Reloader state: the version in force and the one refused.
    pub versions: (u64, Option<u64>),
}

/// Settles the chosen section against the host; a usable one is kept as the last good.
pub fn settle_at_start(f: FleetStart, topo: &Topology, state_dir: &Path) -> Started {
    let FleetStart {
        chosen,
        labels_unread,
        ..
    } = f;
    let keep = match &chosen {
        Ok(Some(sel)) => Some(sel.clone()),
        _ => None,
    };
    let hash = match &chosen {
        Ok(sel) => Some(section_hash(sel.as_ref())),
        Err(_) => None,
    };
    let mut settled = settle(chosen, topo, state_dir);
    let in_force = settled.degraded.is_none();
    if in_force {
        if let Some(sel) = keep {
            if let Err(e) = keep_last_good(state_dir, &sel) {
                tracing::warn!(state = %state_dir.display(), "cannot keep the last good configuration: {e}");
            }
        }
    }
    if let Some(why) = labels_unread {
        let line = format!("node labels not read ({why}), chosen by node name alone");
        settled.degraded = Some(match settled.degraded.take() {
            Some(d) => format!("{d}; {line}"),
            None => line,
        });
    }
    let versions = match hash {
        Some(h) if in_force => (h, None),
        other => (0, other),
    };
    Started { settled, versions }
}

/// What [`follow`] needs: the directory, this node (and how to read its group again), the
/// reloader's versions, the source in force.
pub struct Follow {
    dir: PathBuf,
    who: Identity,
    relabel: Option<Relabel>,
    versions: (u64, Option<u64>),
    source: Source,
}

/// [`Follow`], and why the chosen section is not in force, if it is not.
pub type Sections = (Follow, Option<String>);

/// The configuration to start with: a plain file (no `fleet`) this host cannot take stops the
/// daemon, as it always has; a fleet's section never does (`config::settle`).
pub fn settle_or_check(
    config: Config,
    fleet: Option<FleetStart>,
    topo: &Topology,
    state_dir: &Path,
) -> anyhow::Result<(Config, Option<Sections>)> {
    let Some(mut f) = fleet else {
        config.validate_for(topo)?;
        return Ok((config, None));
    };
    let (dir, who) = (f.dir.clone(), f.who.clone());
    let relabel = relabeler(f.access.take(), who.node.clone());
    let started = settle_at_start(f, topo, state_dir);
    let s = started.settled;
    let follow = Follow {
        dir,
        who,
        relabel,
        versions: started.versions,
        source: s.source,
    };
    Ok((s.config, Some((follow, s.degraded))))
}

/// Reports the source at start: a fleet's section (or its fallback), else the file, else the
/// built-in defaults.
pub fn report_start(
    health: &Health,
    metrics: &Metrics,
    sections: Option<&Sections>,
    have_file: bool,
) {
    match sections {
        Some((f, degraded)) => report(health, metrics, f.source, degraded.clone()),
        None if have_file => report(health, metrics, Source::File, None),
        None => report(health, metrics, Source::Builtin, None),
    }
}

/// Shows `source` (and `degraded`) on `/readyz` and the metrics.
pub fn report(health: &Health, metrics: &Metrics, source: Source, degraded: Option<String>) {
    let all: Vec<&str> = Source::ALL.iter().map(|s| s.as_str()).collect();
    metrics.set_config_source(&all, source.as_str());
    if let Some(why) = &degraded {
        tracing::warn!(source = %source, "configuration degraded: {why}");
    }
    health.set_degraded("config", degraded);
}

/// Follows the section directory: each reload chooses this node's section again; one applied
/// becomes the last good and the source in force, one refused keeps what runs and is listed on
/// `/readyz`.
pub fn follow(
    start: Follow,
    topo: Arc<Topology>,
    state_dir: PathBuf,
    plugin: Arc<crate::enforce::nri::AlignPlugin<crate::placement::Allocator>>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> anyhow::Result<()> {
    let current = Arc::new(Mutex::new(start.source));
    let (m, h, c) = (metrics.clone(), health.clone(), current.clone());
    crate::config::spawn_section_reloader(
        start.dir,
        (start.who, start.relabel),
        start.versions,
        crate::config::ReloadOptions::default(),
        move |loaded: Loaded| {
            // What a section must fit beyond what the engine checks for any reload.
            loaded
                .config
                .check_devices(&topo)
                .map_err(|e| e.to_string())?;
            let moving = plugin.reload(loaded.config).map_err(|e| e.to_string())?;
            if moving > 0 {
                tracing::info!(
                    containers = moving,
                    "shared containers follow the new pool with the next container event"
                );
            }
            let source = match &loaded.section {
                Some(sel) => {
                    if let Err(e) = keep_last_good(&state_dir, sel) {
                        tracing::warn!("cannot keep the last good configuration: {e}");
                    }
                    sel.source
                }
                None => Source::Builtin,
            };
            *c.lock().unwrap_or_else(|p| p.into_inner()) = source;
            report(&h, &m, source, None);
            Ok(())
        },
        move |outcome| match outcome {
            Outcome::Applied(_) => metrics.config_reloaded(true),
            Outcome::Rejected(_, why) => {
                metrics.config_reloaded(false);
                let source = *current.lock().unwrap_or_else(|p| p.into_inner());
                health.set_degraded(
                    "config",
                    Some(format!(
                        "{why}; keeping the configuration in force ({source})"
                    )),
                );
            }
            Outcome::BackToApplied => {
                metrics.config_file_back();
                health.set_degraded("config", None);
            }
            Outcome::Unchanged => {}
        },
    )?;
    Ok(())
}
