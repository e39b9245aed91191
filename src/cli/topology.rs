//! `nri-align topology`: the host picture, readable or JSON.

use std::io::Write as _;
use std::path::PathBuf;

use crate::topology;
use crate::topology::load::{load, Source};

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
    /// Show the topology a host description stands for (a file, or a shipped name such as
    /// `dgx-h100`), as `simulate --host` uses it.
    #[arg(long, conflicts_with_all = ["host_root", "hwloc_xml", "nvml_lib"])]
    pub host: Option<String>,
    /// Print JSON instead of the readable report.
    #[arg(long)]
    pub json: bool,
}

/// Prints the topology.
pub fn run(args: TopologyArgs) -> anyhow::Result<()> {
    let source = match (args.host, args.hwloc_xml) {
        (Some(name), _) => Source::Description(name),
        (None, Some(xml)) => Source::HwlocXml(xml),
        (None, None) => Source::HostRoot(args.host_root.unwrap_or_else(|| PathBuf::from("/"))),
    };
    // What the reader had to repair in the tree (overlapping nodes, NUL-padded lists,
    // unusable distances...) is logged as warnings: show them on stderr.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
        .try_init();
    let topo = load(&source, args.nvml_lib.as_deref())?;
    let text = if args.json {
        topology::report::to_json(&topo)?
    } else {
        topology::report::render(&topo)
    };
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{}", text.trim_end()) {
        // `nri-align topology | head` closing the pipe early is not a failure.
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
