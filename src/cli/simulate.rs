//! `nri-align simulate`: replay a workload through the allocator (or the kubelet-like
//! baseline) and print every decision, the free capacity per NUMA node after each step, and a
//! summary; with `--nrt NODE`, the NodeResourceTopology object after each step too.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};

use super::topology::{nrt_object, nrt_text};
use crate::config::{Config, DEFAULT_GPU_MODE};
use crate::nrt::NodeResourceTopology;
use crate::placement::policy::GpuMode;
use crate::simulate::churn::ChurnSpec;
use crate::simulate::{self, GpuChoice, NicPlugin, Report, Strategy, Workload};
use crate::topology::load::{load, Source};
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
    /// Workload file (YAML or JSON); not with --churn.
    #[arg(long, required_unless_present = "churn", conflicts_with = "churn")]
    pub workload: Option<PathBuf>,
    /// Decision strategy: nri-align's own, or the kubelet Topology Manager's.
    #[arg(long, value_enum, default_value_t = Strategy::NriAlign)]
    pub strategy: Strategy,
    /// How the device plugin picks GPUs, for both strategies: `preferred` (the NVIDIA device
    /// plugin's GetPreferredAllocation: the best-linked set, within the Topology Manager's hint
    /// on the kubelet side, among every free GPU on nri-align's, as with the Topology Manager
    /// at `none`) or `lowest` (a plugin without it: lowest index first). nri-align keeps the
    /// GPUs under `gpu_mode: keep` and chooses its own under `remap`.
    #[arg(
        long,
        alias = "kubelet-gpu-choice",
        default_value = "preferred",
        value_parser = ["preferred", "lowest"]
    )]
    pub device_plugin: String,
    /// nri-align's `gpu_mode` for this replay, over the configuration's (the daemon's default,
    /// `keep`, without --config).
    #[arg(long, value_parser = ["keep", "remap"])]
    pub gpu_mode: Option<String>,
    /// Which device plugin advertises the kubelet strategy's RDMA NICs: `shared` (the RDMA
    /// shared device plugin, as the NVIDIA Network Operator's GPUDirect example: units without
    /// NUMA node, every allocation gives every RDMA NIC), `sriov` (the SR-IOV network device
    /// plugin: --kubelet-sriov-vfs VFs per NIC, each on its NIC's node, the kubelet picking
    /// among them) or `per-nic` (one exclusive unit per NIC, the SR-IOV plugin over PFs).
    #[arg(long, default_value = "shared", value_parser = ["shared", "sriov", "per-nic"])]
    pub kubelet_nic_plugin: String,
    /// The kubelet strategy's CPU manager with the `distribute-cpus-across-numa` policy option:
    /// a container's exclusive CPUs spread evenly over its NUMA nodes, not packed (nri-align's
    /// counterpart is `cpu_spread`).
    #[arg(long)]
    pub kubelet_distribute_cpus: bool,
    /// VFs per RDMA NIC with --kubelet-nic-plugin sriov.
    #[arg(long, default_value_t = simulate::nic_plugin::DEFAULT_VFS_PER_PF)]
    pub kubelet_sriov_vfs: u32,
    /// `rdmaHcaMax` (units of the resource) with --kubelet-nic-plugin shared.
    #[arg(long, default_value_t = simulate::nic_plugin::DEFAULT_RDMA_HCA_MAX)]
    pub kubelet_rdma_hca_max: u32,
    /// Instead of a workload file: seeded streams of GPU pods (1, 2, 4, 8 GPUs with CPUs and
    /// NICs) arriving and leaving under single-numa-node, through nri-align and the kubelet
    /// (both GPU choices), on --host or else the shipped dgx1-v100, dgx-h100 and epyc-nps4,
    /// against the offline optimum of the same streams; prints one Markdown table.
    #[arg(long)]
    pub churn: bool,
    /// Seeds of --churn (1..=N).
    #[arg(long, default_value_t = 5, requires = "churn")]
    pub seeds: u64,
    /// Pods offered per seed with --churn (30: the offline optimum solves exactly in about a
    /// second a seed; at 60 it may not within its time limit, and then counts every pod).
    #[arg(long, default_value_t = 30, requires = "churn")]
    pub pods: usize,
    /// With --churn: skip the offline optimum (about a second a stream to solve), for runs
    /// over thousands of streams that compare the strategies with each other.
    #[arg(long, requires = "churn")]
    pub no_optimum: bool,
    /// Node configuration file, as `nri-align run --config` reads it (policy, scope, reserved
    /// CPUs, `nrt:` resource names...).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Also print the NodeResourceTopology object for Kubernetes node NODE after each step
    /// (what `nri-align run` would publish then; YAML, or a `nrt` field of each step in JSON).
    #[arg(long, value_name = "NODE")]
    pub nrt: Option<String>,
}

/// Replays the workload.
pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let (choice, gpu_mode, nic) = plugins(&args)?;
    if args.churn {
        return churn(&args, nic, choice, gpu_mode.unwrap_or(DEFAULT_GPU_MODE));
    }
    let topo = Arc::new(load_topology(&args)?);
    let strategy = args.strategy;
    let mut config = match &args.config {
        Some(p) => load_config(p)?,
        None => Config::default(),
    };
    if let Some(mode) = gpu_mode {
        config.placement.gpu_mode = mode;
    }
    if strategy == Strategy::Kubelet && config.placement.reserved_cpus.is_empty() {
        // Not an error: the replay still answers "what would these hints do"; but the figure
        // of pods admitted is not one a real node can give, so say so.
        eprintln!(
            "note: no reserved_cpus in the configuration. A real kubelet's static CPU manager \
             policy refuses to start without kube-reserved + system-reserved CPU, so its \
             shared pool never empties; this replay lets exclusive CPUs take every CPU. Give \
             reserved_cpus (e.g. \"{}\", the first core, as a kubelet reserving 2 CPUs \
             takes them) in --config for a node a kubelet can run.",
            simulate::baseline::kubelet_reserved(&topo, 2)
        );
    }
    let Some(workload) = &args.workload else {
        bail!("give the workload: --workload FILE (or --churn)")
    };
    let text = crate::untrusted::read_to_string(workload, crate::untrusted::MAX_DOCUMENT_BYTES)
        .with_context(|| format!("reading workload {}", workload.display()))?;
    let wl = Workload::parse(&text).with_context(|| format!("in {}", workload.display()))?;
    let contender = simulate::Contender::with_plugins(
        strategy,
        Arc::clone(&topo),
        config.placement.clone(),
        choice,
        nic,
    )?
    .with_distribute_cpus(args.kubelet_distribute_cpus);
    let report = simulate::replay_on(contender, Arc::clone(&topo), &wl, strategy, choice)?;
    let nrt = match &args.nrt {
        Some(node) => report
            .steps
            .iter()
            .map(|s| nrt_object(&topo, &s.free, &config, node))
            .collect::<anyhow::Result<Vec<_>>>()?,
        None => Vec::new(),
    };
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        if let Some(steps) = value["steps"].as_array_mut() {
            for (step, obj) in steps.iter_mut().zip(&nrt) {
                step["nrt"] = serde_json::to_value(obj)?;
            }
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", render_with(&report, &nrt)?);
    }
    Ok(())
}

/// The device plugins the replay stands in for, as the flags name them: the GPU plugin's
/// choice, the GPU mode asked for (none: the configuration's), the NIC plugin.
fn plugins(args: &SimulateArgs) -> anyhow::Result<(GpuChoice, Option<GpuMode>, NicPlugin)> {
    let choice = GpuChoice::parse(&args.device_plugin).with_context(|| {
        format!(
            "unknown --device-plugin {}; expected one of: preferred lowest",
            crate::untrusted::quoted(&args.device_plugin)
        )
    })?;
    let gpu_mode = match args.gpu_mode.as_deref() {
        None => None,
        Some("keep") => Some(GpuMode::Keep),
        Some("remap") => Some(GpuMode::Remap),
        Some(other) => bail!(
            "unknown --gpu-mode {}; expected one of: keep remap",
            crate::untrusted::quoted(other)
        ),
    };
    let nic = NicPlugin::parse(
        &args.kubelet_nic_plugin,
        args.kubelet_sriov_vfs,
        args.kubelet_rdma_hca_max,
    )
    .with_context(|| {
        format!(
            "unknown --kubelet-nic-plugin {}; expected one of: shared sriov per-nic",
            crate::untrusted::quoted(&args.kubelet_nic_plugin)
        )
    })?;
    Ok((choice, gpu_mode, nic))
}

/// `--churn`: the comparison table on the given host or the three shipped ones.
fn churn(
    args: &SimulateArgs,
    nic_plugin: NicPlugin,
    device_plugin: GpuChoice,
    gpu_mode: GpuMode,
) -> anyhow::Result<()> {
    let spec = ChurnSpec {
        pods: args.pods.min(MAX_CHURN_PODS),
        seeds: args.seeds.min(MAX_CHURN_SEEDS),
        nic_plugin,
        optimum: !args.no_optimum,
        gpu_mode,
        device_plugin,
    };
    let hosts: Vec<(String, Topology)> =
        if args.host.is_some() || args.hwloc_xml.is_some() || args.host_root.is_some() {
            let topo = load_topology(args)?;
            vec![(topo.source.clone(), topo)]
        } else {
            CHURN_HOSTS
                .iter()
                .map(|h| {
                    Ok((
                        h.to_string(),
                        load(&Source::Description(h.to_string()), None)?,
                    ))
                })
                .collect::<anyhow::Result<_>>()?
        };
    let mut rows = Vec::new();
    for (name, topo) in hosts {
        rows.extend(simulate::churn::rows(&name, Arc::new(topo), spec)?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!(
            "churn under single-numa-node: {} pods per seed, seeds 1..={}; nri-align's gpu_mode: \
             {}; GPUs from the device plugin: {}; the kubelet's RDMA NICs: {}",
            spec.pods,
            spec.seeds,
            simulate::gpu_mode_name(spec.gpu_mode),
            spec.device_plugin.describe(),
            spec.nic_plugin.describe()
        );
        print!("{}", simulate::churn::table(&rows));
        print!("{}", simulate::churn::against_the_kubelet(&rows));
    }
    Ok(())
}

/// The shipped hosts `--churn` compares on by default.
const CHURN_HOSTS: [&str; 3] = ["dgx1-v100", "dgx-h100", "epyc-nps4"];
/// Bounds on `--pods` and `--seeds`: one replay's report is in memory at a time (its pods'
/// decisions), a row keeps two counts a stream.
const MAX_CHURN_PODS: usize = 10_000;
const MAX_CHURN_SEEDS: u64 = 5_000;

/// Reads a configuration file in `nri-align run --config` format (a file with only the
/// placement keys, the format this command read before, is one).
pub fn load_config(path: &Path) -> anyhow::Result<Config> {
    let text = crate::untrusted::read_to_string(path, crate::untrusted::MAX_CONFIG_BYTES)
        .with_context(|| format!("reading config {}", path.display()))?;
    Ok(Config::parse(&text, &path.display().to_string())?)
}

/// The host the workload replays on: `--host`, `--hwloc-xml` or `--host-root` (clap lets only
/// one through).
fn load_topology(args: &SimulateArgs) -> anyhow::Result<Topology> {
    let source = if let Some(host) = &args.host {
        Source::Description(host.clone())
    } else if let Some(p) = &args.hwloc_xml {
        Source::HwlocXml(p.clone())
    } else if let Some(p) = &args.host_root {
        Source::HostRoot(p.clone())
    } else {
        bail!("give the host: --host DESC, --hwloc-xml FILE or --host-root DIR")
    };
    Ok(load(&source, args.nvml_lib.as_deref())?)
}

/// The human-readable report.
pub fn render(report: &Report) -> String {
    // Without objects, rendering cannot fail.
    render_with(report, &[]).unwrap_or_default()
}

/// What produced the report: the strategy, nri-align's `gpu_mode` and the device plugin model
/// both strategies were handed GPUs by.
fn header(s: &simulate::Summary) -> String {
    let plugin = GpuChoice::parse(&s.device_plugin).map_or("", GpuChoice::describe);
    match &s.gpu_mode {
        Some(mode) => format!(
            "# nri-align, gpu_mode: {mode}; GPUs from the device plugin: {plugin}, with no \
             Topology Manager hint\n"
        ),
        None => format!(
            "# {}, GPUs from the device plugin: {plugin}, within the Topology Manager's hint\n",
            s.strategy
        ),
    }
}

/// The report with, after each step, the NodeResourceTopology object of that step (`nrt[i]`
/// for step `i + 1`, when given) as indented YAML.
pub fn render_with(report: &Report, nrt: &[NodeResourceTopology]) -> anyhow::Result<String> {
    let mut out = header(&report.summary);
    for step in &report.steps {
        out.push_str(&format!("[{}] {}\n", step.step, step.event));
        for d in report.decisions.iter().filter(|d| d.step == step.step) {
            if d.admitted {
                out.push_str(&format!(
                    "  {} {}: cpus {} ({}) mems {}{}{} - {}{}\n",
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
                    d.reason,
                    if d.split.is_empty() {
                        String::new()
                    } else {
                        format!(" [split {}]", d.split)
                    }
                ));
            } else {
                out.push_str(&format!(
                    "  {} {}: REJECTED - {}\n",
                    d.pod, d.container, d.reason
                ));
            }
        }
        out.push_str(&format!("  free: {}\n", simulate::format_free(&step.free)));
        if let Some(obj) = nrt.get(step.step.wrapping_sub(1)) {
            out.push_str("  nrt:\n");
            for line in nrt_text(obj, false)?.lines() {
                out.push_str(&format!("    {line}\n"));
            }
        }
    }
    let s = &report.summary;
    out.push_str(&format!(
        "summary ({}): pods admitted {}, rejected {}; containers admitted {}, aligned {}; gpu link score {}\n",
        s.strategy, s.pods_admitted, s.pods_rejected, s.containers_admitted, s.containers_aligned, s.gpu_link_score
    ));
    Ok(out)
}
