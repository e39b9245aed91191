//! The churn comparison of `simulate --churn`: seeded streams of GPU pods (1, 2, 4 or 8 GPUs
//! with CPUs, memory and NICs) arriving and leaving, replayed under single-numa-node through
//! nri-align and through the kubelet baseline (with the NVIDIA device plugin's preferred GPUs,
//! and with lowest-index GPUs), summed into one table row per host and strategy, with the
//! repacking reference ([`super::repack`]: any placement, running pods movable) on the same
//! streams.

use std::sync::Arc;

use super::{repack, ReplayError, Strategy, Workload};
use super::{
    replay_plugins, ContainerSpec, Event, GpuChoice, NicPlugin, PodSpec, Quantity, Report,
};
use crate::placement::gpus::LinkTable;
use crate::placement::policy::{PlacementConfig, Policy};
use crate::topology::{PcieLevel, Topology};

/// What one stream looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChurnSpec {
    /// Pods offered per seed.
    pub pods: usize,
    /// Seeds 1..=seeds.
    pub seeds: u64,
    /// The kubelet's RDMA NIC device plugin.
    pub nic_plugin: NicPlugin,
}

impl Default for ChurnSpec {
    fn default() -> Self {
        Self {
            pods: 60,
            seeds: 5,
            nic_plugin: NicPlugin::default(),
        }
    }
}

/// One strategy's totals on one host over every seed.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ChurnRow {
    /// Host name.
    pub host: String,
    /// `nri-align`, `kubelet + NVIDIA plugin`, `kubelet, lowest-index GPUs` or `repacking
    /// reference`.
    pub strategy: String,
    /// Pods offered.
    pub offered: usize,
    /// Pods admitted.
    pub admitted: usize,
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
    /// refused for where the running pods sat, not for a full host (0 for the reference).
    pub refused_repackable: usize,
    /// Admission checks of the repacking reference, or of `refused_repackable`, that reached the search bound (counted as
    /// refused).
    pub search_bound_hits: usize,
}

/// The label of the repacking reference's rows.
pub const REFERENCE: &str = "repacking reference";

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

/// Every row for `topo` (named `host`): nri-align, the kubelet with preferred GPUs, the
/// kubelet with lowest-index GPUs, under single-numa-node, then the repacking reference.
pub fn rows(
    host: &str,
    topo: Arc<Topology>,
    spec: ChurnSpec,
) -> Result<Vec<ChurnRow>, ReplayError> {
    let config = PlacementConfig {
        policy: Policy::SingleNumaNode,
        reserved_cpus: super::baseline::kubelet_reserved(&topo, 2),
        ..PlacementConfig::default()
    };
    let links = LinkTable::new(&topo);
    let mut bins = repack::bins(Arc::clone(&topo), &config);
    repack::loosen_nics(&mut bins, spec.nic_plugin);
    let contenders = [
        (Strategy::NriAlign, GpuChoice::Preferred, "nri-align"),
        (
            Strategy::Kubelet,
            GpuChoice::Preferred,
            "kubelet + NVIDIA plugin",
        ),
        (
            Strategy::Kubelet,
            GpuChoice::Lowest,
            "kubelet, lowest-index GPUs",
        ),
    ];
    let mut out = Vec::new();
    for (strategy, choice, label) in contenders {
        let mut row = ChurnRow {
            host: host.to_string(),
            strategy: label.to_string(),
            ..ChurnRow::default()
        };
        for seed in 1..=spec.seeds {
            let wl = workload(&topo, seed, spec.pods);
            let report = replay_plugins(
                Arc::clone(&topo),
                config.clone(),
                &wl,
                strategy,
                choice,
                spec.nic_plugin,
            )?;
            row.offered += spec.pods;
            tally(&mut row, &report, &topo, &links);
            let (fit, bound) = repack::refusals_that_fit(&bins, &wl, &report.admitted_steps());
            row.refused_repackable += fit;
            row.search_bound_hits += bound;
        }
        out.push(row);
    }
    out.push(reference_row(host, &bins, &topo, spec));
    Ok(out)
}

/// The repacking reference on the same streams: every pod on one node, all of them aligned by
/// construction; no GPU set or NIC chosen, so no link or NIC figure.
fn reference_row(
    host: &str,
    bins: &[repack::Amounts],
    topo: &Topology,
    spec: ChurnSpec,
) -> ChurnRow {
    let mut row = ChurnRow {
        host: host.to_string(),
        strategy: REFERENCE.to_string(),
        ..ChurnRow::default()
    };
    for seed in 1..=spec.seeds {
        let wl = workload(topo, seed, spec.pods);
        let t = repack::replay_on(bins.to_vec(), &wl, repack::NicRule::Shared);
        row.offered += t.offered;
        row.admitted += t.admitted;
        row.search_bound_hits += t.bound_hits;
    }
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

/// The rows as a Markdown table.
pub fn table(rows: &[ChurnRow]) -> String {
    let mut out = String::from(
        "| host | strategy | pods admitted | refused, fit if moved | fully aligned | mean GPU link score / best | decisions at best | NICs same switch as a GPU |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} / {} | {} | {} | {} | {} | {} |\n",
            r.host,
            r.strategy,
            r.admitted,
            r.offered,
            if r.strategy == REFERENCE {
                "-".to_string()
            } else {
                r.refused_repackable.to_string()
            },
            pct(r.aligned as f64, r.containers as f64),
            pct(r.link_ratio_sum, r.gpu_decisions as f64),
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
    out
}

#[cfg(test)]
#[path = "churn_tests.rs"]
mod tests;
