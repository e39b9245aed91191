//! `nri-align simulate`: replay a workload through the placement engine.

use std::path::PathBuf;

/// Arguments of `nri-align simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Host description (file or shipped name).
    #[arg(long, group = "hostsrc")]
    pub host: Option<String>,
    /// hwloc v2 XML capture.
    #[arg(long, group = "hostsrc")]
    pub hwloc_xml: Option<PathBuf>,
    /// Read sysfs and procfs under this directory.
    #[arg(long, group = "hostsrc")]
    pub host_root: Option<PathBuf>,
    /// NVML library (with --host-root).
    #[arg(long)]
    pub nvml_lib: Option<PathBuf>,
    /// Workload file (YAML or JSON).
    #[arg(long)]
    pub workload: PathBuf,
    /// Decision strategy: nri-align's own, or the kubelet Topology Manager's.
    #[arg(long, default_value = "nri-align")]
    pub strategy: String,
    /// Node configuration file (policy, scope, reserved CPUs...).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Replays the workload.
pub fn run(_args: SimulateArgs) -> anyhow::Result<()> {
    anyhow::bail!("`simulate` is not wired yet")
}
