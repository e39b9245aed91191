//! `nri-align topology`: the host picture, readable or JSON; with `--nrt NODE`, the
//! NodeResourceTopology object `nri-align run` would publish for this host with nothing
//! allocated, without any API server.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use crate::config::Config;
use crate::nrt::{NodeResourceTopology, ZoneFree};
use crate::placement::{Allocator, NodeFree};
use crate::topology;
use crate::topology::load::{load, Source};
use crate::topology::Topology;

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
    /// Print JSON instead of the readable report (or of YAML with `--nrt`).
    #[arg(long)]
    pub json: bool,
    /// Print the NodeResourceTopology object for Kubernetes node NODE instead (YAML), as
    /// `nri-align run` would publish it now with nothing allocated.
    #[arg(long, value_name = "NODE")]
    pub nrt: Option<String>,
    /// nri-align configuration whose policy, scope, reserved CPUs and `nrt:` resource names
    /// the object carries (with `--nrt`) [default: the defaults].
    #[arg(long, requires = "nrt")]
    pub config: Option<PathBuf>,
    /// Draw the host as an SVG picture into FILE (`-`: standard output), as lstopo draws a
    /// machine: packages, NUMA nodes, L3 groups, cores, threads, GPUs, NICs, memory-only nodes.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["nrt", "json"])]
    pub svg: Option<PathBuf>,
    /// Print the GPU facts (bus ids, UUIDs, minors, NUMA nodes, MIG, NVLink pairs) one a
    /// line, the form `hack/gpu-check` compares with `nvidia-smi`.
    #[arg(long, conflicts_with_all = ["nrt", "json", "svg"])]
    pub gpu_facts: bool,
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
    if let Some(file) = &args.svg {
        return write_svg(file, &topology::picture::render_svg(&topo, None));
    }
    let text = if args.gpu_facts {
        crate::cli::gpu_facts::render(&topo)
    } else if let Some(node) = &args.nrt {
        let config = match &args.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        config.validate_for(&topo)?;
        let topo = Arc::new(topo);
        let free = Allocator::new(Arc::clone(&topo), config.placement.clone()).free_by_node();
        let obj = nrt_object(&topo, &free, &config, node)?;
        nrt_text(&obj, args.json)?
    } else if args.json {
        topology::report::to_json(&topo)?
    } else {
        topology::report::render(&topo)
    };
    print(format!("{}\n", text.trim_end()).as_bytes())
}

/// Writes to standard output; `nri-align topology | head` closing the pipe early is not a
/// failure (where SIGPIPE could not be restored to end the process quietly).
fn print(bytes: &[u8]) -> anyhow::Result<()> {
    match std::io::stdout().lock().write_all(bytes) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// Writes a picture to `file`, or to standard output for `-` (a closed pipe is not a failure).
pub fn write_svg(file: &std::path::Path, svg: &str) -> anyhow::Result<()> {
    if file == std::path::Path::new("-") {
        return print(svg.as_bytes());
    }
    std::fs::write(file, svg).with_context(|| format!("writing the picture to {}", file.display()))
}

/// The object for node `node` of `topo` with `free` resources under `config` (no pods: the
/// fingerprint needs the runtime's pod set).
pub fn nrt_object(
    topo: &Topology,
    free: &[NodeFree],
    config: &Config,
    node: &str,
) -> anyhow::Result<NodeResourceTopology> {
    let free: Vec<ZoneFree> = free.iter().map(ZoneFree::from).collect();
    crate::nrt::build(topo, &free, None, &config.nrt_settings(node))
        .with_context(|| format!("NodeResourceTopology for node {node:?}"))
}

/// The object as YAML (as `kubectl get -o yaml` shows it) or JSON.
pub fn nrt_text(obj: &NodeResourceTopology, json: bool) -> anyhow::Result<String> {
    Ok(if json {
        serde_json::to_string_pretty(obj)?
    } else {
        serde_yaml_ng::to_string(obj)?
    })
}
