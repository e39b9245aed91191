//! `simulate`: the replay of a workload file ([`workload`]) through nri-align's allocator or the
//! kubelet-like baseline ([`baseline`]), with every decision and the free capacity after each
//! step.
//!
//! Depends on align-core only (`placement`, `topology`, `untrusted`): a replay runs the plugin's
//! allocator without a host or a runtime. The daemon crate keeps the command line front
//! (`nri-align simulate`: flags, headers, printing) and re-exports this crate as
//! `nri_align::simulate`.

pub mod baseline;
pub mod churn;
pub mod device_plugin;
pub mod distribute;
pub mod kubelet_cpus;
pub mod nic_plugin;
pub mod optimum;
pub mod paired;
pub mod repack;
pub mod split;
pub mod topology_manager;
pub mod workload;

use workload::{bytes, cpu_milli, dra_devices};
pub use workload::{ContainerSpec, Event, PodSpec, Quantity, Workload, WorkloadError};

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use align_core::placement::error::{fmt_bytes, PlacementError};
use align_core::placement::gpus::LinkTable;
use align_core::placement::ledger::NodeFree;
use align_core::placement::policy::{GpuMode, PlacementConfig};
use align_core::placement::{Allocator, PodTotals};
use align_core::placement::{Assignment, PodInfo, Request};
use align_core::topology::Topology;
use baseline::KubeletBaseline;
use device_plugin::kubelet_gpus;
pub use device_plugin::GpuChoice;
pub use nic_plugin::NicPlugin;
pub use topology_manager::TopologyManagerOptions;

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The workload itself.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// The kubelet-like baseline cannot run on this host.
    #[error(transparent)]
    Kubelet(#[from] baseline::TooManyNodes),
}

/// Which decision maker replays the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// nri-align's allocator.
    NriAlign,
    /// The kubelet Topology Manager as it would decide (static CPU manager, device plugins).
    Kubelet,
}

impl std::fmt::Display for Strategy {
    /// The `--strategy` spelling, also used in the report.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Strategy::NriAlign => "nri-align",
            Strategy::Kubelet => "kubelet",
        })
    }
}

/// One container's decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Step number (1-based event index).
    pub step: usize,
    /// `namespace/name`.
    pub pod: String,
    /// Container name.
    pub container: String,
    /// Whether it was admitted.
    pub admitted: bool,
    /// Exclusive CPUs or the shared pool.
    pub exclusive: bool,
    /// CPUs in list form.
    pub cpus: String,
    /// Memory nodes in list form.
    pub mems: String,
    /// GPUs (PCI bus ids).
    pub gpus: Vec<String>,
    /// NICs (names).
    pub nics: Vec<String>,
    /// Generic devices aligned to (PCI bus ids of the workload's DRA `devices`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// Whether every resource is on the chosen nodes.
    pub aligned: bool,
    /// Interconnect score of the GPU set.
    pub gpu_link_score: u32,
    /// Why.
    pub reason: String,
    /// How many of its CPUs, GPUs and NICs each node holds (`node 0: 60 cpus 4 gpus | ...`),
    /// for a container with GPUs or NICs.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub split: String,
}

/// What one step left free.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// Step number.
    pub step: usize,
    /// `add NAME` / `remove NAME`.
    pub event: String,
    /// Free capacity per node after the step.
    pub free: Vec<NodeFree>,
}

/// Totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Strategy used.
    pub strategy: String,
    /// Pods admitted.
    pub pods_admitted: usize,
    /// Pods rejected.
    pub pods_rejected: usize,
    /// Containers admitted.
    pub containers_admitted: usize,
    /// Admitted containers with every resource aligned.
    pub containers_aligned: usize,
    /// Sum of the GPU link scores of admitted containers.
    pub gpu_link_score: u32,
    /// nri-align's `gpu_mode` (`keep`: the device plugin's GPUs stay; `remap`); none for the
    /// kubelet, which never moves them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_mode: Option<String>,
    /// The device plugin model that chose the GPUs both strategies were handed
    /// ([`GpuChoice::name`]).
    pub device_plugin: String,
    /// The kubelet's Topology Manager policy options and memory manager policy; none for
    /// nri-align.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<String>,
}

/// A whole replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Every container decision.
    pub decisions: Vec<Decision>,
    /// Free capacity after each step.
    pub steps: Vec<Step>,
    /// Totals.
    pub summary: Summary,
}

impl Report {
    /// The steps (1-based event numbers) whose decision was admitted.
    pub fn admitted_steps(&self) -> std::collections::BTreeSet<usize> {
        self.decisions
            .iter()
            .filter(|d| d.admitted)
            .map(|d| d.step)
            .collect()
    }
}

/// What a replay runs under a [`Strategy`]: nri-align's [`Allocator`] or the
/// [`KubeletBaseline`], behind one interface so both sides of a comparison (here and in the
/// benches) go through the same code.
#[derive(Debug, Clone)]
pub enum Contender {
    /// nri-align's allocator.
    NriAlign(Box<Allocator>),
    /// The kubelet-like baseline.
    Kubelet(Box<KubeletBaseline>),
}

impl Contender {
    /// The decision maker of `strategy` on `topo`, with nothing placed.
    pub fn new(
        strategy: Strategy,
        topo: Arc<Topology>,
        config: PlacementConfig,
    ) -> Result<Contender, ReplayError> {
        Self::with_gpu_choice(strategy, topo, config, GpuChoice::default())
    }

    /// As [`Contender::new`], the kubelet's device plugin picking GPUs by `choice` (nri-align
    /// ignores it).
    pub fn with_gpu_choice(
        strategy: Strategy,
        topo: Arc<Topology>,
        config: PlacementConfig,
        choice: GpuChoice,
    ) -> Result<Contender, ReplayError> {
        Self::with_plugins(strategy, topo, config, choice, NicPlugin::default())
    }

    /// As [`Contender::with_gpu_choice`], the kubelet's RDMA NICs advertised by `nic`.
    pub fn with_plugins(
        strategy: Strategy,
        topo: Arc<Topology>,
        config: PlacementConfig,
        choice: GpuChoice,
        nic: NicPlugin,
    ) -> Result<Contender, ReplayError> {
        Ok(match strategy {
            Strategy::NriAlign => Contender::NriAlign(Box::new(Allocator::new(topo, config))),
            Strategy::Kubelet => Contender::Kubelet(Box::new(
                KubeletBaseline::new(topo, config)
                    .map_err(ReplayError::Kubelet)?
                    .with_gpu_choice(choice)
                    .with_nic_plugin(nic),
            )),
        })
    }
    /// The same decision maker with the kubelet's Topology Manager policy `options` and its
    /// memory manager's `Static` policy on or off (nri-align ignores both).
    pub fn with_kubelet_options(
        self,
        options: TopologyManagerOptions,
        static_memory: bool,
    ) -> Result<Self, ReplayError> {
        Ok(match self {
            Contender::Kubelet(k) => Contender::Kubelet(Box::new(
                k.with_topology_manager_options(options)?
                    .with_static_memory_manager(static_memory),
            )),
            other => other,
        })
    }
    /// What the kubelet runs with (its policy options), for the headers; none for nri-align.
    pub fn kubelet_options(&self) -> Option<String> {
        match self {
            Contender::Kubelet(k) => Some(k.describe()),
            Contender::NriAlign(_) => None,
        }
    }
    /// The same decision maker with the kubelet's CPU manager option
    /// `distribute-cpus-across-numa` on or off (nri-align ignores it: its own is `cpu_spread`).
    pub fn with_distribute_cpus(self, on: bool) -> Self {
        match self {
            Contender::Kubelet(k) => Contender::Kubelet(Box::new(k.with_distribute_cpus(on))),
            other => other,
        }
    }
    /// Decides and records.
    pub fn place(&mut self, r: &Request) -> Result<Assignment, PlacementError> {
        match self {
            Contender::NriAlign(a) => a.place(r),
            Contender::Kubelet(k) => k.place(r),
        }
    }
    /// Forgets a container.
    pub fn release(&mut self, id: &str) {
        match self {
            Contender::NriAlign(a) => drop(a.release(id)),
            Contender::Kubelet(k) => drop(k.release(id)),
        }
    }
    /// What pod `uid` asks for in all, before its first container.
    pub fn expect_pod(&mut self, uid: &str, totals: PodTotals) {
        match self {
            Contender::NriAlign(a) => a.expect_pod(uid, totals),
            Contender::Kubelet(k) => k.expect_pod(uid, totals),
        }
    }
    /// Drops what [`Contender::expect_pod`] said.
    pub fn forget_pod(&mut self, uid: &str) {
        match self {
            Contender::NriAlign(a) => a.forget_pod(uid),
            Contender::Kubelet(k) => k.forget_pod(uid),
        }
    }
    /// nri-align's `gpu_mode`; none for the kubelet, which never moves the plugin's GPUs.
    pub fn gpu_mode(&self) -> Option<GpuMode> {
        match self {
            Contender::NriAlign(a) => Some(a.config().gpu_mode),
            Contender::Kubelet(_) => None,
        }
    }
    /// Free capacity per NUMA node.
    pub fn free(&self) -> Vec<NodeFree> {
        match self {
            Contender::NriAlign(a) => a.free_by_node(),
            Contender::Kubelet(k) => k.free_by_node(),
        }
    }
}

/// A container's request, or why the device plugin could not allocate its devices (the kubelet
/// then rejects the pod before any topology decision).
type Planned = (Request, Option<String>);

/// How the device plugin hands out a pod's devices: its GPU model, and the link table it
/// scores GPU sets with.
struct Plugin<'a> {
    links: &'a LinkTable,
    gpus: GpuChoice,
}

/// Builds the container requests of a pod. `gpus` become the device plugin's allocation as on
/// a node whose Topology Manager is `none` (no hint: `plugin`'s choice among every free GPU,
/// the same model the kubelet side asks within its hint); `nics`, the lowest-index free NICs
/// (the RDMA plugins have no preferred allocation). nri-align keeps them (`keep`) or remaps
/// them; the kubelet side makes its own allocation within its hint.
fn requests(
    pod: &PodSpec,
    free: &[NodeFree],
    topo: &Topology,
    dra_seen: bool,
    plugin: &Plugin,
) -> Result<Vec<Planned>, WorkloadError> {
    let mut free_gpus: Vec<usize> = free
        .iter()
        .flat_map(|n| &n.gpus)
        .filter_map(|b| topo.gpus.iter().position(|g| &g.pci_bus_id == b))
        .collect();
    free_gpus.sort_unstable();
    let mut nic_order = nic_order(free, topo);
    let info = PodInfo {
        uid: format!("{}/{}", pod.namespace, pod.name),
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        annotations: pod.annotations.clone(),
    };
    let mut out = Vec::new();
    for c in &pod.containers {
        let (request, limit, memory, hugepages) = quantities(pod, c)?;
        let mut short = None;
        if c.gpus as usize > free_gpus.len() {
            short = Some(format!(
                "the device plugin cannot allocate {} GPUs: {} free on the host (the kubelet \
                 rejects the pod with UnexpectedAdmissionError)",
                c.gpus,
                free_gpus.len()
            ));
        } else if c.nics as usize > nic_order.len() {
            short = Some(format!(
                "the device plugin cannot allocate {} NICs: the host has {}",
                c.nics,
                nic_order.len()
            ));
        }
        let given = kubelet_gpus(
            plugin.links,
            &free_gpus,
            |_| Some(true),
            (c.gpus as usize).min(free_gpus.len()),
            plugin.gpus,
        );
        free_gpus.retain(|g| !given.contains(g));
        let gpus: Vec<String> = given
            .iter()
            .map(|g| topo.gpus[*g].pci_bus_id.clone())
            .collect();
        let nics: Vec<String> = nic_order.iter().take(c.nics as usize).cloned().collect();
        let turn = (c.nics as usize).min(nic_order.len());
        nic_order.rotate_left(turn);
        // A workload may carry a scheduler's choice as the scheduler annotates pods; a
        // malformed one refuses the container, as the plugin does.
        let scheduler = align_core::placement::scheduler::read(&info.annotations)
            .map_err(|e| {
                short.get_or_insert(e.to_string());
            })
            .ok()
            .flatten();
        let request = Request {
            container_id: format!("{}/{}/{}", pod.namespace, pod.name, c.name),
            container_name: c.name.clone(),
            pod: info.clone(),
            cpu_request_milli: request,
            cpu_limit_milli: limit,
            memory_limit_bytes: memory,
            allocated_gpus: gpus,
            allocated_nics: nics,
            shared_gpus: Vec::new(),
            generic_devices: if dra_seen {
                dra_devices(pod, c, topo)?
            } else {
                Vec::new()
            },
            scheduler,
            hugepages,
        };
        out.push((request, short));
    }
    Ok(out)
}

/// The NICs an RDMA device plugin hands out: the RDMA ones when the host has any (as the
/// engine's eligible NICs), shared between containers, unused ones first.
fn nic_order(free: &[NodeFree], topo: &Topology) -> Vec<String> {
    let unused: Vec<String> = free.iter().flat_map(|n| n.nics.iter().cloned()).collect();
    let rdma = topo.nics.iter().any(|n| n.rdma_device.is_some());
    let pool: Vec<String> = topo
        .nics
        .iter()
        .filter(|n| !rdma || n.rdma_device.is_some())
        .map(|n| n.name.clone())
        .collect();
    let mut order: Vec<String> = pool
        .iter()
        .filter(|n| unused.contains(n))
        .cloned()
        .collect();
    order.extend(pool.iter().filter(|n| !unused.contains(n)).cloned());
    order
}

/// A container's CPU request and limit (millicores), memory limit and huge page needs.
type Quantities = (
    u64,
    Option<u64>,
    Option<u64>,
    Vec<align_core::placement::HugePageNeed>,
);

/// What container `c` of `pod` asks for, read from the workload's quantities.
fn quantities(pod: &PodSpec, c: &ContainerSpec) -> Result<Quantities, WorkloadError> {
    // Names and values come from the file: errors repeat only their start.
    let bad = |what, value: &Quantity, hint| WorkloadError::Quantity {
        pod: align_core::untrusted::excerpt(&pod.name),
        container: align_core::untrusted::excerpt(&c.name),
        what,
        value: align_core::untrusted::excerpt(&value.to_string()),
        hint,
    };
    let request = match &c.cpu {
        Some(q) => cpu_milli(q).ok_or_else(|| bad("cpu", q, "cores like 2, 1.5 or 500m"))?,
        None => 0,
    };
    let limit = match &c.cpu_limit {
        Some(q) => {
            Some(cpu_milli(q).ok_or_else(|| bad("cpu_limit", q, "cores like 2, 1.5 or 500m"))?)
        }
        None => c.cpu.as_ref().map(|_| request),
    };
    let memory = match &c.memory {
        Some(q) => {
            Some(bytes(q).ok_or_else(|| bad("memory", q, "bytes with Ki/Mi/Gi/Ti or k/M/G/T"))?)
        }
        None => None,
    };
    let mut hugepages = Vec::new();
    for (size_kb, key, q) in [
        (2048, "hugepages-2Mi", &c.hugepages_2mi),
        (1 << 20, "hugepages-1Gi", &c.hugepages_1gi),
    ] {
        if let Some(q) = q {
            let b = bytes(q).ok_or_else(|| bad(key, q, "bytes with Ki/Mi/Gi/Ti"))?;
            hugepages.extend(align_core::placement::HugePageNeed::of_limit(size_kb, b));
        }
    }
    Ok((request, limit, memory, hugepages))
}

/// Replays `workload` on `topo` with `config` through `strategy` (the kubelet with the NVIDIA
/// device plugin's preferred GPUs).
pub fn replay(
    topo: Arc<Topology>,
    config: PlacementConfig,
    workload: &Workload,
    strategy: Strategy,
) -> Result<Report, ReplayError> {
    replay_with(topo, config, workload, strategy, GpuChoice::default())
}

/// As [`replay`], the kubelet's device plugin picking GPUs by `choice` (its RDMA NICs as
/// [`NicPlugin::default`] advertises them).
pub fn replay_with(
    topo: Arc<Topology>,
    config: PlacementConfig,
    workload: &Workload,
    strategy: Strategy,
    choice: GpuChoice,
) -> Result<Report, ReplayError> {
    replay_plugins(
        topo,
        config,
        workload,
        strategy,
        choice,
        NicPlugin::default(),
    )
}

/// As [`replay_with`], the kubelet's RDMA NICs advertised by `nic`.
pub fn replay_plugins(
    topo: Arc<Topology>,
    config: PlacementConfig,
    workload: &Workload,
    strategy: Strategy,
    choice: GpuChoice,
    nic: NicPlugin,
) -> Result<Report, ReplayError> {
    let d = Contender::with_plugins(strategy, Arc::clone(&topo), config, choice, nic)?;
    replay_on(d, topo, workload, strategy, choice)
}

/// Replays `workload` through the decision maker `d` (made for `strategy` on `topo`), the
/// device plugin choosing GPUs by `choice` for both strategies.
pub fn replay_on(
    mut d: Contender,
    topo: Arc<Topology>,
    workload: &Workload,
    strategy: Strategy,
    choice: GpuChoice,
) -> Result<Report, ReplayError> {
    let links = LinkTable::new(&topo);
    let events: Vec<Event> = if workload.events.is_empty() {
        workload.pods.iter().map(|p| Event::add(&p.name)).collect()
    } else {
        workload.events.clone()
    };
    let mut live: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut report = Report {
        decisions: Vec::new(),
        steps: Vec::new(),
        summary: Summary {
            strategy: strategy.to_string(),
            gpu_mode: d.gpu_mode().map(|m| gpu_mode_name(m).to_string()),
            device_plugin: choice.name().to_string(),
            kubelet: d.kubelet_options(),
            ..Summary::default()
        },
    };
    for (i, ev) in events.iter().enumerate() {
        let step = i + 1;
        let (name, add) = match (&ev.add, &ev.remove) {
            (Some(n), None) => (n, true),
            (None, Some(n)) => (n, false),
            _ => {
                return Err(WorkloadError::Event {
                    index: step,
                    reason: "expected exactly one of `add: POD` and `remove: POD`".into(),
                }
                .into())
            }
        };
        let pod = workload
            .pods
            .iter()
            .find(|p| &p.name == name)
            .ok_or_else(|| WorkloadError::Event {
                index: step,
                reason: format!("no pod named {}", align_core::untrusted::quoted(name)),
            })?;
        if add {
            if live.contains_key(name) {
                return Err(WorkloadError::Event {
                    index: step,
                    reason: format!(
                        "pod {} is already running",
                        align_core::untrusted::quoted(name)
                    ),
                }
                .into());
            }
            let plugin = Plugin {
                links: &links,
                gpus: choice,
            };
            let (decisions, placed) = add_pod(&mut d, pod, &topo, strategy, &plugin, step)?;
            match placed {
                Some(placed) => {
                    report.summary.pods_admitted += 1;
                    report.summary.containers_admitted += decisions.len();
                    report.summary.containers_aligned +=
                        decisions.iter().filter(|x| x.aligned).count();
                    report.summary.gpu_link_score +=
                        decisions.iter().map(|x| x.gpu_link_score).sum::<u32>();
                    live.insert(name.clone(), placed);
                }
                None => report.summary.pods_rejected += 1,
            }
            report.decisions.extend(decisions);
        } else {
            for id in live.remove(name).unwrap_or_default() {
                d.release(&id);
            }
        }
        report.steps.push(Step {
            step,
            event: format!("{} {name}", if add { "add" } else { "remove" }),
            free: d.free(),
        });
    }
    Ok(report)
}

/// Places every container of `pod` at `step` through `d`: their decisions, and the ids placed
/// when the pod is admitted (a pod runs whole or not at all: a refusal undoes the containers
/// already placed).
fn add_pod(
    d: &mut Contender,
    pod: &PodSpec,
    topo: &Topology,
    strategy: Strategy,
    plugin: &Plugin,
    step: usize,
) -> Result<(Vec<Decision>, Option<Vec<String>>), ReplayError> {
    let mut placed = Vec::new();
    let mut decisions = Vec::new();
    let mut failed = None;
    // The kubelet's managers never see DRA devices: only nri-align aligns to them.
    let dra_seen = strategy == Strategy::NriAlign;
    let planned = requests(pod, &d.free(), topo, dra_seen, plugin)?;
    let reqs: Vec<Request> = planned.iter().map(|(r, _)| r.clone()).collect();
    let uid = reqs.first().map(|r| r.pod.uid.clone()).unwrap_or_default();
    // Pod scope sizes the first container's nodes for the whole pod.
    d.expect_pod(&uid, PodTotals::of(&reqs));
    let who = format!("{}/{}", pod.namespace, pod.name);
    for (r, short) in planned {
        let outcome = match short {
            Some(reason) => Err(reason),
            None => d.place(&r).map_err(|e| e.to_string()),
        };
        match outcome {
            Ok(a) => {
                let idx: Vec<usize> = a
                    .gpus
                    .iter()
                    .filter_map(|b| topo.gpus.iter().position(|g| &g.pci_bus_id == b))
                    .collect();
                decisions.push(Decision {
                    step,
                    pod: who.clone(),
                    container: r.container_name.clone(),
                    admitted: true,
                    exclusive: a.exclusive,
                    cpus: a.cpus.to_string(),
                    mems: a.mems.to_string(),
                    gpus: a.gpus.clone(),
                    nics: a.nics.clone(),
                    devices: a.generic_devices.clone(),
                    aligned: a.aligned,
                    gpu_link_score: plugin.links.set_score(&idx),
                    reason: a.reason.clone(),
                    split: split::device_split(topo, &a),
                });
                placed.push(r.container_id.clone());
            }
            Err(e) => {
                decisions.push(Decision {
                    step,
                    pod: who.clone(),
                    container: r.container_name.clone(),
                    admitted: false,
                    exclusive: false,
                    cpus: String::new(),
                    mems: String::new(),
                    gpus: Vec::new(),
                    nics: Vec::new(),
                    devices: Vec::new(),
                    aligned: false,
                    gpu_link_score: 0,
                    reason: e,
                    split: String::new(),
                });
                failed = Some(r.container_name.clone());
                break;
            }
        }
    }
    let Some(bad) = failed else {
        return Ok((decisions, Some(placed)));
    };
    for id in &placed {
        d.release(id);
    }
    d.forget_pod(&uid);
    for dec in decisions.iter_mut().filter(|x| x.admitted) {
        dec.admitted = false;
        dec.reason = format!("pod rejected because container {bad} was: rolled back");
    }
    Ok((decisions, None))
}

/// `keep` or `remap`, as the configuration spells it.
pub fn gpu_mode_name(mode: GpuMode) -> &'static str {
    match mode {
        GpuMode::Keep => "keep",
        GpuMode::Remap => "remap",
    }
}

/// One line per node: `node 0: cpu 32 mem 200Gi gpu 2 nic 1`, then the free pages of each
/// huge page size the node has (`hugepages-2Mi 256`).
pub fn format_free(free: &[NodeFree]) -> String {
    free.iter()
        .map(|n| {
            let mut line = format!(
                "node {}: cpu {} mem {} gpu {} nic {}",
                n.node,
                n.cpus.len(),
                fmt_bytes(n.memory_bytes),
                n.gpus.len(),
                n.nics.len()
            );
            for (size_kb, _, pages) in &n.hugepages {
                line.push_str(&format!(
                    " {} {pages}",
                    align_core::placement::hugepages::resource_name(*size_kb)
                ));
            }
            line
        })
        .collect::<Vec<_>>()
        .join(" | ")
}
