//! `nri-align run`: the plugin daemon.

use std::path::PathBuf;

/// Arguments of `nri-align run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Configuration file (YAML).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Runtime NRI socket to dial (ignored when launched by the runtime with NRI_PLUGIN_SOCKET).
    #[arg(long, default_value = "/var/run/nri/nri.sock")]
    pub socket: PathBuf,
    /// Plugin index (two digits) to register with.
    #[arg(long, default_value = "50")]
    pub idx: String,
    /// Read sysfs and procfs under this directory instead of `/`.
    #[arg(long)]
    pub host_root: Option<PathBuf>,
    /// NVML library to load instead of the system libnvidia-ml.so.1.
    #[arg(long)]
    pub nvml_lib: Option<PathBuf>,
    /// Where decisions are persisted.
    #[arg(long, default_value = "/var/lib/nri-align")]
    pub state_dir: PathBuf,
}

/// Runs the plugin until shut down.
pub fn run(_args: RunArgs) -> anyhow::Result<()> {
    anyhow::bail!("`run` is not wired yet")
}
