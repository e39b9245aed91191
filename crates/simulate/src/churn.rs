//! The churn comparison of `simulate --churn`: seeded streams of GPU pods (1, 2, 4 or 8 GPUs
//! with CPUs, memory and NICs) arriving and leaving, replayed under single-numa-node through
//! nri-align and through the kubelet baseline (with the NVIDIA device plugin's preferred GPUs,
//! and with lowest-index GPUs), summed into one table row per host and strategy, with the
//! offline optimum ([`super::optimum`]: the most pods any placement without moves admits,
//! knowing the whole stream) on the same streams as the bound each row is a fraction of.

use std::sync::Arc;

use super::paired::Paired;
use super::{optimum, repack, ReplayError, Strategy, Workload};
use super::{
    replay_on, ContainerSpec, Contender, Event, GpuChoice, NicPlugin, PodSpec, Quantity, Report,
    TopologyManagerOptions,
};
use align_core::placement::gpus::LinkTable;
use align_core::placement::policy::{GpuMode, NumaChoice, PlacementConfig, Policy};
use align_core::topology::{PcieLevel, Topology};

/// The daemon's default `gpu_mode` (the configuration's `gpu_mode` default; a test of the
/// daemon crate holds the two equal), which a churn run replays nri-align under unless told.
pub const DAEMON_GPU_MODE: GpuMode = GpuMode::Keep;

/// What one stream looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChurnSpec {
    /// Pods offered per seed.
    pub pods: usize,
    /// Seeds 1..=seeds.
    pub seeds: u64,
    /// The kubelet's RDMA NIC device plugin.
    pub nic_plugin: NicPlugin,
    /// Whether to solve the offline optimum of every stream (its row and the fractions of it).
    pub optimum: bool,
    /// nri-align's `gpu_mode`: `keep` (the daemon's default) places around the GPUs the device
    /// plugin gave, `remap` chooses them.
    pub gpu_mode: GpuMode,
    /// The device plugin that hands out GPUs, the same model for both strategies.
    pub device_plugin: GpuChoice,
    /// The kubelet's Topology Manager policy options.
    pub kubelet: TopologyManagerOptions,
    /// The kubelet's memory manager policy: `Static` when true, else `None` (its default).
    pub static_memory: bool,
}

impl Default for ChurnSpec {
    /// 30 pods a seed: the size at which the offline optimum solves exactly in about a second
    /// a seed (the 8-node EPYC host at 60 pods does not finish in a minute).
    fn default() -> Self {
        Self {
            pods: 30,
            seeds: 5,
            nic_plugin: NicPlugin::default(),
            optimum: true,
            gpu_mode: crate::churn::DAEMON_GPU_MODE,
            device_plugin: GpuChoice::default(),
            kubelet: TopologyManagerOptions::default(),
            static_memory: false,
        }
    }
}

/// One strategy's totals on one host over every seed.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ChurnRow {
    /// Host name.
    pub host: String,
    /// `nri-align, best-fit` (and `most-allocated`, `least-allocated`: its `numa_choice`),
    /// [`KUBELET`], [`KUBELET_LOWEST`] or [`OPTIMUM`].
    pub strategy: String,
    /// nri-align's `gpu_mode` (its rows only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_mode: Option<String>,
    /// The device plugin model that handed out the GPUs ([`GpuChoice::name`]; empty for the
    /// optimum, which picks no GPU).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub device_plugin: String,
    /// Pods offered.
    pub offered: usize,
    /// Pods admitted.
    pub admitted: usize,
    /// GPUs of the pods admitted: the work a strategy took on, where pods admitted counts a
    /// 1-GPU pod as much as a 4-GPU one (0 for the optimum, which maximises pods).
    pub gpus: usize,
    /// The offline optimum's pods admitted on the same streams (0 when not solved).
    pub optimum: usize,
    /// Admitted containers with every resource on the chosen node.
    pub aligned: usize,
    /// Admitted containers.
    pub containers: usize,
    /// Decisions of 2 GPUs or more.
    pub gpu_decisions: usize,
    /// Sum over those decisions of score / best score among the GPUs free then (on one NUMA
    /// node, as single-numa-node asks, when one node had enough).
    pub link_ratio_sum: f64,
    /// Those decisions whose score was the best possible.
    pub link_best: usize,
    /// NICs given to GPU containers.
    pub nics: usize,
    /// Of those, NICs sharing a PCIe switch with one of the container's GPUs.
    pub nics_same_switch: usize,
    /// Pods refused that fit with the pods running then, moved ([`repack::refusals_that_fit`]):
    /// refused for where the running pods sat, not for a full host (0 for the optimum).
    pub refused_repackable: usize,
    /// Checks of `refused_repackable` that reached the search bound (counted as refused).
    pub search_bound_hits: usize,
    /// Streams whose optimum the solver did not prove within its time limit: each counts
    /// every pod offered, still a bound (the optimum's row only).
    pub unproven: usize,
    /// Pods admitted on each stream, seed 1 first (empty for the optimum's row): what
    /// [`Paired`] compares stream by stream.
    pub stream_pods: Vec<usize>,
    /// GPUs admitted on each stream, seed 1 first (empty for the optimum's row).
    pub stream_gpus: Vec<usize>,
}

/// The label of the offline optimum's rows.
pub const OPTIMUM: &str = "offline optimum";

/// A small deterministic generator (splitmix64): the streams must be the same on every run
/// and machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The stream of seed `seed` on `topo`: each pod asks for 1, 2, 4 or 8 GPUs (40/30/20/10 %),
/// a share of the CPUs and memory in proportion, and a NIC for every two GPUs; after each
/// arrival, half the time a random running pod leaves. A host without GPUs gets the same
/// shapes in units of 4 CPUs.
pub fn workload(topo: &Topology, seed: u64, pods: usize) -> Workload {
    let mut rng = Rng(seed);
    let gpus = topo.gpus.len();
    let threads = topo.cpus.len().max(1);
    let memory: u64 = topo.numa_nodes.iter().map(|n| n.memory_bytes).sum();
    // Per GPU (or unit): 60 % of the host's share, so CPUs and memory rarely bind before GPUs.
    // A host without GPUs counts four units per NUMA node, as the GPU hosts have four GPUs per
    // node: the stream then fills it as it fills them (on EPYC NPS4, 4 CPUs a unit, so an
    // 8-unit pod needs a whole node of 32 threads).
    let units = if gpus > 0 {
        gpus
    } else {
        topo.numa_nodes.len().max(1) * 4
    };
    let cpu_per_unit = ((threads * 6) / (units.max(1) * 10)).max(1);
    let gib_per_unit = (memory / (1 << 30) / units.max(1) as u64 / 2).max(1);
    // NICs as an RDMA device plugin hands them out; a host without RDMA NICs (the EPYC one:
    // one Ethernet port) gets CPU and memory pods only.
    let nics = topo.nics.iter().filter(|n| n.rdma_device.is_some()).count();
    let mut wl = Workload {
        pods: Vec::new(),
        events: Vec::new(),
    };
    let mut running: Vec<String> = Vec::new();
    for i in 0..pods {
        let size = match rng.below(10) {
            0..=3 => 1,
            4..=6 => 2,
            7..=8 => 4,
            _ => 8,
        };
        let name = format!("p{i}");
        wl.pods.push(PodSpec {
            name: name.clone(),
            namespace: "churn".into(),
            annotations: Default::default(),
            containers: vec![ContainerSpec {
                name: "main".into(),
                cpu: Some(Quantity::Number((size * cpu_per_unit) as f64)),
                cpu_limit: None,
                memory: Some(Quantity::Text(format!("{}Gi", size as u64 * gib_per_unit))),
                gpus: if gpus > 0 { size as u32 } else { 0 },
                nics: (size as u32).div_ceil(2).min(nics as u32),
                devices: Vec::new(),
                hugepages_2mi: None,
                hugepages_1gi: None,
            }],
        });
        wl.events.push(Event::add(&name));
        running.push(name);
        if rng.below(2) == 0 && !running.is_empty() {
            let gone = running.swap_remove(rng.below(running.len()));
            wl.events.push(Event {
                add: None,
                remove: Some(gone),
            });
        }
    }
    wl
}

/// The node configuration of every churn replay: single-numa-node, with the 2 CPUs a kubelet
/// reserves.
pub fn config(topo: &Topology) -> PlacementConfig {
    PlacementConfig {
        policy: Policy::SingleNumaNode,
        reserved_cpus: super::baseline::kubelet_reserved(topo, 2),
        ..PlacementConfig::default()
    }
}

/// Every row for `topo` (named `host`): nri-align with each `numa_choice`, the kubelet with
/// preferred GPUs, the kubelet with lowest-index GPUs, under single-numa-node, then the offline
/// optimum when `spec.optimum` (each row's `optimum` then that row's figure).
pub fn rows(
    host: &str,
    topo: Arc<Topology>,
    spec: ChurnSpec,
) -> Result<Vec<ChurnRow>, ReplayError> {
    let config = PlacementConfig {
        gpu_mode: spec.gpu_mode,
        ..config(&topo)
    };
    let links = LinkTable::new(&topo);
    let mut bins = repack::bins(Arc::clone(&topo), &config);
    repack::loosen_nics(&mut bins, spec.nic_plugin);
    let mut out = Vec::new();
    for (strategy, choice, numa_choice, label) in contenders(spec.device_plugin) {
        let config = PlacementConfig {
            numa_choice,
            ..config.clone()
        };
        let mut row = ChurnRow {
            host: host.to_string(),
            strategy: label.to_string(),
            gpu_mode: (strategy == Strategy::NriAlign)
                .then(|| super::gpu_mode_name(spec.gpu_mode).to_string()),
            device_plugin: choice.name().to_string(),
            ..ChurnRow::default()
        };
        for seed in 1..=spec.seeds {
            let wl = workload(&topo, seed, spec.pods);
            let contender = Contender::with_plugins(
                strategy,
                Arc::clone(&topo),
                config.clone(),
                choice,
                spec.nic_plugin,
            )?
            .with_kubelet_options(spec.kubelet, spec.static_memory)?;
            let report = replay_on(contender, Arc::clone(&topo), &wl, strategy, choice)?;
            row.offered += spec.pods;
            let gpus_before = row.gpus;
            tally(&mut row, &report, &topo, &links);
            row.stream_pods.push(report.summary.pods_admitted);
            row.stream_gpus.push(row.gpus - gpus_before);
            let (fit, bound) = repack::refusals_that_fit(&bins, &wl, &report.admitted_steps());
            row.refused_repackable += fit;
            row.search_bound_hits += bound;
        }
        out.push(row);
    }
    if spec.optimum {
        let best = optimum_row(host, &bins, &topo, spec);
        for row in &mut out {
            row.optimum = best.admitted;
        }
        out.push(best);
    }
    Ok(out)
}

/// The decision makers of the rows: nri-align with each `numa_choice`, the kubelet with
/// `plugin`'s GPUs and, beside the preferred one, a plugin blind to links as a reference.
/// Every row's device plugin is `plugin`, so the strategies start from the same GPUs. The
/// kubelet has no NUMA choice of its own (the proposal for one is unreleased): its rows run
/// with the default, which it ignores.
fn contenders(plugin: GpuChoice) -> Vec<(Strategy, GpuChoice, NumaChoice, &'static str)> {
    let mut contenders = vec![
        (Strategy::NriAlign, plugin, NumaChoice::BestFit, NRI_ALIGN),
        (
            Strategy::NriAlign,
            plugin,
            NumaChoice::MostAllocated,
            "nri-align, most-allocated",
        ),
        (
            Strategy::NriAlign,
            plugin,
            NumaChoice::LeastAllocated,
            "nri-align, least-allocated",
        ),
        (
            Strategy::Kubelet,
            plugin,
            NumaChoice::default(),
            kubelet_label(plugin),
        ),
    ];
    if plugin == GpuChoice::Preferred {
        contenders.push((
            Strategy::Kubelet,
            GpuChoice::Lowest,
            NumaChoice::default(),
            KUBELET_LOWEST,
        ));
    }
    contenders
}

/// The offline optimum on the same streams: every pod on one node, all of them aligned by
/// construction; the node is its whole decision (no GPU set or NIC chosen), so no link or
/// NIC figure.
fn optimum_row(host: &str, bins: &[repack::Amounts], topo: &Topology, spec: ChurnSpec) -> ChurnRow {
    let mut row = ChurnRow {
        host: host.to_string(),
        strategy: OPTIMUM.to_string(),
        ..ChurnRow::default()
    };
    for seed in 1..=spec.seeds {
        let wl = workload(topo, seed, spec.pods);
        row.offered += spec.pods;
        match optimum::solve(bins, &wl) {
            Ok(o) => row.admitted += o.admitted,
            // Not proven optimal: every pod offered is still an upper bound.
            Err(_) => {
                row.admitted += spec.pods;
                row.unproven += 1;
            }
        }
    }
    row.optimum = row.admitted;
    // One container a pod, each on its one node.
    row.aligned = row.admitted;
    row.containers = row.admitted;
    row
}

/// Adds one replay's decisions to `row`.
fn tally(row: &mut ChurnRow, report: &Report, topo: &Topology, links: &LinkTable) {
    row.admitted += report.summary.pods_admitted;
    row.aligned += report.summary.containers_aligned;
    row.containers += report.summary.containers_admitted;
    let index = |bus: &str| topo.gpus.iter().position(|g| g.pci_bus_id == bus);
    for d in report.decisions.iter().filter(|d| d.admitted) {
        let mine: Vec<usize> = d.gpus.iter().filter_map(|b| index(b)).collect();
        row.gpus += mine.len();
        if mine.len() >= 2 {
            // What was free just before: the previous step's free GPUs (one container a pod).
            let free: Vec<usize> = match d.step.checked_sub(2).and_then(|i| report.steps.get(i)) {
                Some(s) => s
                    .free
                    .iter()
                    .flat_map(|n| n.gpus.iter())
                    .filter_map(|b| index(b))
                    .collect(),
                None => (0..topo.gpus.len()).collect(),
            };
            let best = best_score(links, &free, mine.len()).max(1);
            let score = links.set_score(&mine);
            row.gpu_decisions += 1;
            row.link_ratio_sum += f64::from(score.min(best)) / f64::from(best);
            if score >= best {
                row.link_best += 1;
            }
        }
        if mine.is_empty() {
            continue;
        }
        for nic in &d.nics {
            let Some(bus) = topo
                .nics
                .iter()
                .find(|n| &n.name == nic)
                .and_then(|n| n.pci_bus_id.as_deref())
            else {
                row.nics += 1;
                continue;
            };
            row.nics += 1;
            if mine
                .iter()
                .any(|g| topo.pcie_level(&topo.gpus[*g].pci_bus_id, bus) <= PcieLevel::SingleSwitch)
            {
                row.nics_same_switch += 1;
            }
        }
    }
}

/// The best link score of any `k` of `free` that single-numa-node admits (every GPU on one
/// NUMA node), or of any `k` when no node has `k` free (exact: at most C(16,8) sets on
/// shipped hosts).
fn best_score(links: &LinkTable, free: &[usize], k: usize) -> u32 {
    if k > free.len() || k == 0 {
        return 0;
    }
    let mut pick: Vec<usize> = (0..k).collect();
    let (mut one_node, mut any) = (None::<u32>, 0);
    loop {
        let set: Vec<usize> = pick.iter().map(|i| free[*i]).collect();
        let score = links.set_score(&set);
        any = any.max(score);
        let node = links.numa_of(set[0]);
        if node.is_some() && set.iter().all(|g| links.numa_of(*g) == node) {
            one_node = Some(one_node.unwrap_or(0).max(score));
        }
        if !super::device_plugin::next_combination(&mut pick, free.len()) {
            return one_node.unwrap_or(any);
        }
    }
}

fn pct(part: f64, whole: f64) -> String {
    if whole <= 0.0 {
        "-".into()
    } else {
        format!("{:.1} %", 100.0 * part / whole)
    }
}

/// The label of the kubelet row with the NVIDIA device plugin's preferred GPUs.
pub const KUBELET: &str = "kubelet + NVIDIA plugin";
/// The label of the kubelet row with a device plugin that hands out the lowest-index GPUs.
pub const KUBELET_LOWEST: &str = "kubelet, lowest-index GPUs";

/// The label of the kubelet's row whose device plugin picks GPUs by `choice`.
pub fn kubelet_label(choice: GpuChoice) -> &'static str {
    match choice {
        GpuChoice::Preferred => KUBELET,
        GpuChoice::Lowest => KUBELET_LOWEST,
    }
}

/// The kubelet row nri-align's rows on `host` are compared with: the one handed GPUs by the
/// same device plugin model as they are (the first kubelet row of the host, as [`rows`]
/// orders them).
fn main_kubelet<'a>(rows: &'a [ChurnRow], host: &str) -> Option<&'a ChurnRow> {
    let plugin = rows
        .iter()
        .find(|r| r.host == host && r.gpu_mode.is_some())
        .map(|r| r.device_plugin.as_str());
    rows.iter().find(|k| {
        k.host == host
            && (k.strategy == KUBELET || k.strategy == KUBELET_LOWEST)
            && plugin.map_or(true, |p| p == k.device_plugin)
    })
}

impl ChurnRow {
    /// Mean GPU link score / best possible over the decisions of 2+ GPUs (`None` without any).
    pub fn mean_link(&self) -> Option<f64> {
        (self.gpu_decisions > 0).then(|| self.link_ratio_sum / self.gpu_decisions as f64)
    }
}

/// The rows as a Markdown table.
pub fn table(rows: &[ChurnRow]) -> String {
    let mut out = String::from(
        "| host | strategy | pods admitted | of the optimum | GPUs admitted | refused, fit if moved | fully aligned | mean GPU link score / best | link score vs the kubelet | decisions at best | NICs same switch as a GPU |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let kubelet = main_kubelet(rows, &r.host).and_then(ChurnRow::mean_link);
        let vs = match (r.mean_link(), kubelet) {
            (Some(mine), Some(theirs)) if theirs > 0.0 => format!("{:.3}", mine / theirs),
            _ => "-".to_string(),
        };
        let optimum = r.strategy == OPTIMUM;
        out.push_str(&format!(
            "| {} | {} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.host,
            r.strategy,
            r.admitted,
            r.offered,
            pct(r.admitted as f64, r.optimum as f64),
            if optimum {
                "-".to_string()
            } else {
                r.gpus.to_string()
            },
            if optimum {
                "-".to_string()
            } else {
                r.refused_repackable.to_string()
            },
            pct(r.aligned as f64, r.containers as f64),
            pct(r.link_ratio_sum, r.gpu_decisions as f64),
            vs,
            pct(r.link_best as f64, r.gpu_decisions as f64),
            pct(r.nics_same_switch as f64, r.nics as f64),
        ));
    }
    let hits: usize = rows.iter().map(|r| r.search_bound_hits).sum();
    if hits > 0 {
        out.push_str(&format!(
            "\n{hits} packing checks reached the search bound and count as not fitting\n"
        ));
    }
    let unproven: usize = rows.iter().map(|r| r.unproven).sum();
    if unproven > 0 {
        out.push_str(&format!(
            "\n{unproven} streams' optimum not proven within {} s: each counts every pod offered\n",
            optimum::TIME_LIMIT_S
        ));
    }
    out
}

/// The label of nri-align's default row, the one compared stream by stream.
pub const NRI_ALIGN: &str = "nri-align, best-fit";

/// Per host, nri-align's default row against the kubelet's with the same device plugin
/// stream by stream ([`Paired`]): the
/// mean difference in pods and GPUs admitted, the streams ahead and behind, and whether the
/// seeds drawn explain the gap (sign-flip test). Empty when no host has both rows.
pub fn against_the_kubelet(rows: &[ChurnRow]) -> String {
    let mut out = String::new();
    for ours in rows.iter().filter(|r| r.strategy == NRI_ALIGN) {
        let Some(theirs) = main_kubelet(rows, &ours.host) else {
            continue;
        };
        let pods = Paired::new(&ours.stream_pods, &theirs.stream_pods);
        let gpus = Paired::new(&ours.stream_gpus, &theirs.stream_gpus);
        let Some((pods, gpus)) = pods.zip(gpus) else {
            continue;
        };
        if out.is_empty() {
            out.push_str(&format!(
                "\n{NRI_ALIGN} against {}, stream by stream:\n",
                theirs.strategy
            ));
        }
        let verdict = |p: &Paired| {
            if p.within_luck() {
                "within the streams' luck"
            } else if p.mean > 0.0 {
                "more"
            } else {
                "fewer"
            }
        };
        out.push_str(&format!(
            "- {}: pods {}, {}; GPUs {}, {}\n",
            ours.host,
            pods.describe(),
            verdict(&pods),
            gpus.describe(),
            verdict(&gpus),
        ));
    }
    out
}

#[cfg(test)]
#[path = "churn_tests.rs"]
mod tests;
