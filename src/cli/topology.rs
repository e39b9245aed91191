//! `nri-align topology`: the host picture, readable or JSON.

use std::path::PathBuf;

/// Arguments of `nri-align topology`.
#[derive(Debug, clap::Args)]
pub struct TopologyArgs {
    /// Read sysfs and procfs under this directory instead of `/`.
    #[arg(long, conflicts_with = "hwloc_xml")]
    pub host_root: Option<PathBuf>,
    /// NVML library to load instead of the system libnvidia-ml.so.1.
    #[arg(long)]
    pub nvml_lib: Option<PathBuf>,
    /// Import an hwloc v2 XML capture (`lstopo --of xml`) instead of reading sysfs.
    #[arg(long)]
    pub hwloc_xml: Option<PathBuf>,
    /// Print JSON instead of the readable report.
    #[arg(long)]
    pub json: bool,
}

/// Prints the topology.
pub fn run(_args: TopologyArgs) -> anyhow::Result<()> {
    anyhow::bail!("`topology` is not wired yet")
}
