//! `nri-align simulate`: replay a workload through the placement engine (or the kubelet-like
//! decider) and print every decision, the free capacity per NUMA node after each step, and a
//! summary.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};

use crate::placement::testing;
use crate::placement::workload::{self, Report, Strategy, Workload};
use crate::placement::PlacementConfig;
use crate::topology::Topology;

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
pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let topo = Arc::new(load_topology(&args)?);
    let strategy = match args.strategy.as_str() {
        "nri-align" => Strategy::NriAlign,
        "kubelet" => Strategy::Kubelet,
        other => bail!("unknown strategy {other:?}; expected one of: nri-align kubelet"),
    };
    let config = match &args.config {
        Some(p) => load_config(p)?,
        None => PlacementConfig::default(),
    };
    let text = std::fs::read_to_string(&args.workload)
        .with_context(|| format!("reading workload {}", args.workload.display()))?;
    let wl = Workload::parse(&text).with_context(|| format!("in {}", args.workload.display()))?;
    let report = workload::replay(topo, config, &wl, strategy)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// Reads a PlacementConfig YAML file.
pub fn load_config(path: &Path) -> anyhow::Result<PlacementConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config {}", path.display()))?;
    serde_yaml_ng::from_str(&text).with_context(|| format!("invalid config {}", path.display()))
}

/// Where the host picture comes from. The integrator wires `HostDesc::load(..).to_topology()`,
/// `topology::hwloc::import` and `topology::sysfs::read_host` here once they are merged; until
/// then this build accepts the JSON of `nri-align topology --json` as `--host FILE` and the
/// in-memory test shapes as `--host builtin:NAME`.
fn load_topology(args: &SimulateArgs) -> anyhow::Result<Topology> {
    if let Some(host) = &args.host {
        if let Some(name) = host.strip_prefix("builtin:") {
            return builtin(name);
        }
        let text = std::fs::read_to_string(host)
            .with_context(|| format!("host descriptions are not available in this build; reading {host} as topology JSON"))?;
        return serde_json::from_str(&text)
            .with_context(|| format!("{host} is not topology JSON (`nri-align topology --json`)"));
    }
    if let Some(p) = &args.hwloc_xml {
        bail!(
            "hwloc XML import is not available in this build ({})",
            p.display()
        );
    }
    if let Some(p) = &args.host_root {
        bail!(
            "reading a host root is not available in this build ({})",
            p.display()
        );
    }
    bail!("give the host: --host DESC, --hwloc-xml FILE or --host-root DIR")
}

fn builtin(name: &str) -> anyhow::Result<Topology> {
    Ok(match name {
        "dgx1-v100" => testing::dgx1_v100(),
        "dgx-h100" => testing::dgx_h100(),
        "pcie-4gpu" => testing::pcie_4gpu(),
        "epyc-nps4" => testing::epyc_nps4(),
        "grace-hopper" => testing::grace_hopper(),
        "numa16-1024" => testing::numa16_1024(),
        "two-node" => testing::two_node(),
        other => bail!(
            "unknown builtin host {other:?}; expected one of: dgx1-v100 dgx-h100 pcie-4gpu \
             epyc-nps4 grace-hopper numa16-1024 two-node"
        ),
    })
}

/// The human-readable report.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    for step in &report.steps {
        out.push_str(&format!("[{}] {}\n", step.step, step.event));
        for d in report.decisions.iter().filter(|d| d.step == step.step) {
            if d.admitted {
                out.push_str(&format!(
                    "  {} {}: cpus {} ({}) mems {}{}{} - {}\n",
                    d.pod,
                    d.container,
                    d.cpus,
                    if d.exclusive { "exclusive" } else { "shared" },
                    d.mems,
                    if d.gpus.is_empty() {
                        String::new()
                    } else {
                        format!(" gpus {}", d.gpus.join(","))
                    },
                    if d.nics.is_empty() {
                        String::new()
                    } else {
                        format!(" nics {}", d.nics.join(","))
                    },
                    d.reason
                ));
            } else {
                out.push_str(&format!(
                    "  {} {}: REJECTED - {}\n",
                    d.pod, d.container, d.reason
                ));
            }
        }
        out.push_str(&format!("  free: {}\n", workload::format_free(&step.free)));
    }
    let s = &report.summary;
    out.push_str(&format!(
        "summary ({}): pods admitted {}, rejected {}; containers admitted {}, aligned {}; gpu link score {}\n",
        s.strategy, s.pods_admitted, s.pods_rejected, s.containers_admitted, s.containers_aligned, s.gpu_link_score
    ));
    out
}
