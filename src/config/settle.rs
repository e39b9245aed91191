//! What runs when the section chosen for this node cannot be used (it does not parse, or
//! names what this host does not have: CPUs it lacks, a GPU mode without GPUs): never a
//! crash, which on a node where nri-align is a required plugin fails every container. The
//! daemon runs on the last configuration this node ran with, kept in the state directory
//! ([`LAST_GOOD_FILE`]), else on the built-in defaults, and says why (`/readyz`:
//! `degraded: config: <why>`; the `nri_align_config_source` metric).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::select::{Selected, Source};
use super::{read_config_file, Config, ConfigError};
use crate::topology::Topology;

/// The last good configuration's file in the state directory.
pub const LAST_GOOD_FILE: &str = "config-last-good.yaml";

/// The configuration settled on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// What is in force.
    pub config: Config,
    /// Where it came from.
    pub source: Source,
    /// Why the chosen section is not in force, when it is not (one line).
    pub degraded: Option<String>,
}

impl Config {
    /// Checks what a fleet's section must also fit on this host, beyond [`Config::validate_for`]
    /// (which a plain file still meets alone, as before): `gpu_mode: remap` means choosing
    /// among this host's GPUs, so a host without any cannot take it (a `default` section
    /// written for GPU nodes then shows on the CPU-only ones at once).
    pub fn check_devices(&self, topo: &Topology) -> Result<(), ConfigError> {
        if self.placement.gpu_mode == crate::placement::GpuMode::Remap && topo.gpus.is_empty() {
            return Err(ConfigError::Invalid {
                origin: "configuration".into(),
                message: "gpu_mode remap needs GPUs and this host has none".into(),
            });
        }
        Ok(())
    }
}

/// Parses `selected` and checks it against `topo`; the reason it cannot be used otherwise,
/// prefixed with its key.
pub fn usable(selected: &Selected, topo: &Topology) -> Result<Config, String> {
    let config = Config::from_bytes(&selected.bytes, &selected.path).map_err(|e| e.to_string())?;
    let fits = config
        .validate_for(topo)
        .and_then(|()| config.check_devices(topo));
    fits.map_err(|e| match e {
        ConfigError::Invalid { message, .. } => {
            format!("{}: {message} on this host", selected.key)
        }
        other => format!("{}: {other}", selected.key),
    })?;
    Ok(config)
}

/// The configuration to run with: the chosen section when it is usable on `topo`, else the
/// last good one in `state_dir`, else the built-in defaults.
pub fn settle(
    chosen: Result<Option<Selected>, ConfigError>,
    topo: &Topology,
    state_dir: &Path,
) -> Settled {
    let why = match chosen {
        Ok(None) => {
            return Settled {
                config: Config::default(),
                source: Source::Builtin,
                degraded: None,
            }
        }
        Ok(Some(sel)) => match usable(&sel, topo) {
            Ok(config) => {
                return Settled {
                    config,
                    source: sel.source,
                    degraded: None,
                }
            }
            Err(why) => why,
        },
        Err(e) => e.to_string(),
    };
    match last_good(state_dir, topo) {
        Ok(Some(config)) => Settled {
            config,
            source: Source::LastGood,
            degraded: Some(format!("{why}; running on the last good configuration")),
        },
        Ok(None) => Settled {
            config: Config::default(),
            source: Source::Builtin,
            degraded: Some(format!("{why}; running on the built-in defaults")),
        },
        Err(e) => Settled {
            config: Config::default(),
            source: Source::Builtin,
            degraded: Some(format!(
                "{why}; running on the built-in defaults (the last good configuration is not \
                 usable: {e})"
            )),
        },
    }
}

/// The last good configuration kept in `state_dir`, checked against `topo`; `None` when none
/// was kept.
pub fn last_good(state_dir: &Path, topo: &Topology) -> Result<Option<Config>, String> {
    let path = state_dir.join(LAST_GOOD_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let bytes = read_config_file(&path).map_err(|e| e.to_string())?;
    let config = Config::from_bytes(&bytes, &path).map_err(|e| e.to_string())?;
    config
        .validate_for(topo)
        .and_then(|()| config.check_devices(topo))
        .map_err(|e| e.to_string())?;
    Ok(Some(config))
}

/// Keeps `selected` as this node's last good configuration (owner-only, replaced atomically so
/// a crash leaves the old one or the new one). Called once it is in force.
pub fn keep_last_good(state_dir: &Path, selected: &Selected) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = state_dir.join(LAST_GOOD_FILE);
    let tmp = state_dir.join(format!(".{LAST_GOOD_FILE}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    // A YAML comment: the file stays a configuration file `config check` reads as it is.
    writeln!(
        f,
        "# nri-align: the last configuration this node ran with, section {}",
        selected.key
    )?;
    f.write_all(&selected.bytes)?;
    f.sync_data()?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

#[cfg(test)]
#[path = "settle_tests.rs"]
mod tests;
