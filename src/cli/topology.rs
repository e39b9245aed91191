//! `nri-align topology`: the host picture, readable or JSON.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context as _};

use crate::topology;

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
pub fn run(args: TopologyArgs) -> anyhow::Result<()> {
    let mut topo = match &args.hwloc_xml {
        Some(xml) => topology::hwloc::import_file(xml)
            .with_context(|| format!("importing hwloc XML {}", xml.display()))?,
        None => {
            let root = args.host_root.clone().unwrap_or_else(|| PathBuf::from("/"));
            topology::read_host(&root)
                .with_context(|| format!("reading the topology under {}", root.display()))?
        }
    };
    // The system's NVML describes this machine only: ask it when reading the live host, never
    // for another machine's tree or capture (an explicit --nvml-lib, such as the fake NVML of an
    // emulated tree, is always used). Without an explicit library a missing driver only means
    // "no link data"; an explicit --nvml-lib that fails is an error the user asked to see.
    let live_host = args.host_root.is_none() && args.hwloc_xml.is_none();
    if args.nvml_lib.is_some() || live_host {
        if let Err(err) = topology::nvml::enrich(&mut topo, args.nvml_lib.as_deref()) {
            match &args.nvml_lib {
                Some(lib) => bail!("NVML from {}: {err}", lib.display()),
                None => tracing::debug!("NVML not used: {err}"),
            }
        }
    }
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
