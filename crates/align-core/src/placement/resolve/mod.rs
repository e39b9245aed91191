//! Turning a container's request into what placement needs: effective annotation settings,
//! the kubelet's Guaranteed rule (exclusive CPUs when request == limit and integer), memory
//! from the limit, and device-plugin allocations as topology indices; a scheduler's choice in
//! this host's indices, checked against what is free ([`honour`]).

pub mod honour;

use self::honour::{Demand, Honour};
use super::annotations::{self, Effective};
use super::cpus;
use super::error::PlacementError;
use super::ledger::Ledger;
use super::numa;
use super::policy::{CpuPreference, GpuMode, PlacementConfig, SchedulerChoiceMode};
use super::request::Request;
use super::scheduler::Scheduler;
use crate::untrusted::excerpt;

/// A request with its settings resolved and its devices turned into indices.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Effective annotation settings.
    pub eff: Effective,
    /// Exclusive CPUs or the shared pool.
    pub exclusive: bool,
    /// Exclusive CPU count.
    pub cpus: u32,
    /// Memory limit (0 = none).
    pub memory: u64,
    /// Huge pages per size, merged by size, none empty.
    pub hugepages: Vec<super::hugepages::HugePageNeed>,
    /// GPUs wanted.
    pub gpu_count: usize,
    /// GPUs the device plugin allocated to this container alone (indices).
    pub alloc_gpus: Vec<usize>,
    /// GPUs it uses without holding them alone (indices): aligned to, never recorded as held.
    pub shared_gpus: Vec<usize>,
    /// Whether its exclusive CPUs come from the isolated CPUs (and only from them).
    pub isolated: bool,
    /// NICs wanted.
    pub nic_count: usize,
    /// NICs the device plugin allocated (indices).
    pub alloc_nics: Vec<usize>,
    /// Node indices of the generic devices (`Request::generic_devices`), each once: the
    /// chosen nodes must hold them, as they must hold the GPUs.
    pub device_nodes: Vec<usize>,
    /// Each generic device by name with its node index (`None`: the host does not say), for
    /// the CPU split by device (`placement::spread`).
    pub generic_nodes: Vec<(String, Option<usize>)>,
    /// `namespace/pod/container`.
    pub who: String,
    /// The scheduler's choice, checked: what the search must hold.
    pub choice: Option<Honour>,
    /// The scheduler's choice that could not be had, with why, when `scheduler_choice` is
    /// `preferred` (the node's own search places the container instead).
    pub overridden: Option<(Scheduler, String)>,
}

/// Each generic device of `req` by name with its node index (`None`: the host does not say).
fn generic_nodes(ledger: &Ledger, req: &Request) -> Vec<(String, Option<usize>)> {
    req.generic_devices
        .iter()
        .map(|d| {
            // Where the request does not say, the topology may (its node resolved through
            // the function's local_cpulist).
            let node = d
                .numa_node
                .or_else(|| ledger.topo().pci(&d.pci_bus_id)?.numa_node);
            (d.name.clone(), node.and_then(|n| ledger.device_node(n)))
        })
        .collect()
}

/// Resolves annotations, the Guaranteed rule and the devices of a request.
pub fn resolve(
    ledger: &Ledger,
    config: &PlacementConfig,
    req: &Request,
) -> Result<Resolved, PlacementError> {
    let mut eff = annotations::effective(&req.pod.annotations, &req.container_name, config)?;
    // The scheduler's CPU policy (Crane's) stands where nri-align's own annotation says nothing.
    if eff.cpus == CpuPreference::Auto {
        eff.cpus = req
            .scheduler
            .as_ref()
            .and_then(honour::preference)
            .unwrap_or(eff.cpus);
    }
    // Names come from the runtime; every rejection message repeats them.
    let who = format!(
        "{}/{}/{}",
        excerpt(&req.pod.namespace),
        excerpt(&req.pod.name),
        excerpt(&req.container_name)
    );
    let (exclusive, cpus) = cpu_demand(config, req, &eff, &who)?;
    if exclusive && config.full_pcpus_only {
        whole_cores(ledger, cpus, &who)?;
    }
    let mut alloc_gpus = req
        .allocated_gpus
        .iter()
        .map(|b| ledger.gpu_index(b))
        .collect::<Result<Vec<_>, _>>()?;
    let mut shared_gpus = req
        .shared_gpus
        .iter()
        .map(|b| ledger.gpu_index(b))
        .collect::<Result<Vec<_>, _>>()?;
    let alloc_nics = req
        .allocated_nics
        .iter()
        .map(|n| ledger.nic_index(n))
        .collect::<Result<Vec<_>, _>>()?;
    // A GPU nri-align gave a container by remap is one the kubelet believes free: a
    // container that would use it without holding it is refused (see the function).
    refuse_gpus_held_by_remap(ledger, &shared_gpus)?;
    if config.gpu_mode == GpuMode::Keep {
        share_held_gpus(ledger, &mut alloc_gpus, &mut shared_gpus)?;
    }
    shared_gpus.retain(|g| !alloc_gpus.contains(g));
    let isolated = exclusive && eff.cpus == CpuPreference::Isolated;
    let demand = Demand {
        who: &who,
        pod_uid: &req.pod.uid,
        cpus: if exclusive { cpus } else { 0 },
        memory: req.memory_limit_bytes.unwrap_or(0),
    };
    let (choice, overridden) = check_choice(ledger, config, req, &demand, isolated)?;
    let mut alloc_nics = alloc_nics;
    if let Some(h) = &choice {
        take_devices(h, &mut alloc_gpus, &mut shared_gpus, &mut alloc_nics);
    }
    let gpu_count = alloc_gpus.len().max(eff.gpus.unwrap_or(0) as usize);
    let nic_count = alloc_nics.len().max(eff.nics.unwrap_or(0) as usize);
    let device_nodes = generic_device_nodes(ledger, req);
    let generic_nodes = generic_nodes(ledger, req);
    Ok(Resolved {
        eff,
        exclusive,
        cpus,
        memory: req.memory_limit_bytes.unwrap_or(0),
        hugepages: super::hugepages::merged(&req.hugepages),
        gpu_count,
        alloc_gpus,
        shared_gpus,
        isolated,
        nic_count,
        alloc_nics,
        device_nodes,
        generic_nodes,
        who,
        choice,
        overridden,
    })
}

/// The NUMA nodes (ledger indices) of the generic devices the runtime gives the container
/// (CDI devices that are neither GPUs nor RDMA NICs), each once: the search must include them.
fn generic_device_nodes(ledger: &Ledger, req: &Request) -> Vec<usize> {
    let mut nodes: Vec<usize> = Vec::new();
    for i in req
        .generic_devices
        .iter()
        .filter_map(|d| ledger.device_node(d.numa_node?))
    {
        if !nodes.contains(&i) {
            nodes.push(i);
        }
    }
    nodes
}

/// The scheduler's devices are the container's allocation: held (or shared), never remapped.
fn take_devices(h: &Honour, gpus: &mut Vec<usize>, shared: &mut Vec<usize>, nics: &mut Vec<usize>) {
    if !h.gpus.is_empty() {
        *gpus = h.gpus.clone();
    }
    if !h.nics.is_empty() {
        *nics = h.nics.clone();
    }
    for g in &h.shared_gpus {
        if !shared.contains(g) {
            shared.push(*g);
        }
    }
    shared.retain(|g| !gpus.contains(g));
}

/// The scheduler's choice of `req`, checked against what is free: the constraints; with
/// `scheduler_choice: preferred`, a choice that cannot be had is set aside with why.
type Checked = (Option<Honour>, Option<(Scheduler, String)>);

fn check_choice(
    ledger: &Ledger,
    config: &PlacementConfig,
    req: &Request,
    demand: &Demand<'_>,
    isolated: bool,
) -> Result<Checked, PlacementError> {
    let Some(choice) = &req.scheduler else {
        return Ok((None, None));
    };
    let caps = numa::caps_for(ledger, config.full_pcpus_only, isolated);
    match honour::check(ledger, &caps, choice, demand) {
        Ok(h) => Ok((Some(h), None)),
        Err(e) if config.scheduler_choice == SchedulerChoiceMode::Preferred => {
            Ok((None, Some((choice.scheduler, e.to_string()))))
        }
        Err(e) => Err(e),
    }
}

/// Whether the container gets exclusive CPUs, and how many: the kubelet's Guaranteed rule
/// (a whole number of CPUs, request equal to limit) unless the annotations say otherwise; an
/// exclusive annotation outside that rule only in the namespaces the configuration allows.
fn cpu_demand(
    config: &PlacementConfig,
    req: &Request,
    eff: &Effective,
    who: &str,
) -> Result<(bool, u32), PlacementError> {
    let req_m = req.cpu_request_milli;
    // The kubelet's Guaranteed rule for CPUs: a whole number of CPUs, request equal to limit.
    let guaranteed = req.cpu_limit_milli == Some(req_m) && req_m > 0 && req_m % 1000 == 0;
    Ok(match eff.cpus {
        // Counts beyond u32 saturate: such a request then fails as "not enough free cpu"
        // instead of wrapping around to a small one.
        CpuPreference::Auto => (
            guaranteed,
            if guaranteed {
                saturate(req_m / 1000)
            } else {
                0
            },
        ),
        CpuPreference::Exclusive | CpuPreference::Isolated => {
            let m = req.cpu_limit_milli.unwrap_or(req_m).max(req_m).max(1);
            let n = saturate(m.div_ceil(1000));
            let allowed = config
                .exclusive_annotation_namespaces
                .iter()
                .any(|ns| ns == &req.pod.namespace);
            if !guaranteed && !allowed {
                let (key, value) = cpus_annotation(req);
                return Err(PlacementError::NotGuaranteed {
                    container: who.to_string(),
                    annotation: format!("{key}={value}"),
                    cpus: n,
                    request_milli: req_m,
                    limit: req
                        .cpu_limit_milli
                        .map_or_else(|| "none".to_string(), |l| format!("{l}m")),
                    namespace: req.pod.namespace.clone(),
                });
            }
            if eff.cpus == CpuPreference::Isolated
                && !config.isolated_namespaces.contains(&req.pod.namespace)
            {
                let (key, value) = cpus_annotation(req);
                return Err(PlacementError::IsolatedNotAllowed {
                    container: who.to_string(),
                    annotation: format!("{key}={value}"),
                    namespace: req.pod.namespace.clone(),
                    allowed: config.isolated_namespaces.clone(),
                });
            }
            (true, n)
        }
        CpuPreference::Shared => (false, 0),
    })
}

/// `full_pcpus_only`: an exclusive count must fill whole cores.
fn whole_cores(ledger: &Ledger, cpus: u32, who: &str) -> Result<(), PlacementError> {
    let t = cpus::threads_per_core(ledger.topo());
    if cpus % t != 0 {
        // The next multiple, or for a count near u32::MAX (a saturated request) the one
        // below: either is a count the rule accepts.
        let suggest = cpus.div_ceil(t).checked_mul(t).unwrap_or(cpus / t * t);
        return Err(PlacementError::SmtAlignment {
            container: who.to_string(),
            cpus,
            threads: t,
            suggest,
        });
    }
    Ok(())
}

/// `keep` mode: allocated GPUs another container already holds move to `shared`.
///
/// The kubelet hands a device id to one container at a time, so a kept GPU that
/// another container already holds (or shares) was advertised more than once: the
/// device plugin shares it (time-slicing or MPS replicas whose ids the container does
/// not see). Each holder is aligned to it; none of them holds it alone from now on.
/// A GPU nri-align itself gave another container (a remap) is different: the kubelet
/// believes it free and the runtime gives this container it whatever nri-align says,
/// so sharing it would break the promise made to that container: refused.
fn share_held_gpus(
    ledger: &Ledger,
    alloc: &mut Vec<usize>,
    shared: &mut Vec<usize>,
) -> Result<(), PlacementError> {
    refuse_gpus_held_by_remap(ledger, alloc)?;
    alloc.retain(|g| {
        let taken = !ledger.gpu_free(*g);
        if taken && !shared.contains(g) {
            shared.push(*g);
        }
        !taken
    });
    Ok(())
}

/// A GPU nri-align gave a container by remap is one the kubelet believes free: it may hand it
/// to the next pod, and that pod's runtime hook gives it whatever its env names. A container
/// that would use such a GPU without holding it (its GPUs read from an env the kubelet did not
/// confirm, or a replica) is refused rather than run beside the remapped one: keeping it and
/// flagging the overlap would still put two containers on one GPU.
fn refuse_gpus_held_by_remap(ledger: &Ledger, shared: &[usize]) -> Result<(), PlacementError> {
    let topo = ledger.topo();
    for g in shared {
        let Some(holder) = ledger.gpu_holder(*g) else {
            continue;
        };
        let bus = &topo.gpus[*g].pci_bus_id;
        if ledger
            .get(holder)
            .is_some_and(|a| a.chosen_gpus.contains(bus))
        {
            return Err(PlacementError::Conflict {
                resource: "gpu".into(),
                id: bus.clone(),
                holder: holder.to_string(),
            });
        }
    }
    Ok(())
}

/// The `cpus.` annotation that decided the preference: the container's own key if it has one,
/// else the pod's.
fn cpus_annotation(req: &Request) -> (String, String) {
    let own = format!(
        "cpus.{}/container.{}",
        super::annotations::DOMAIN,
        req.container_name
    );
    let pod = format!("cpus.{}/pod", super::annotations::DOMAIN);
    [own, pod]
        .into_iter()
        .find_map(|k| req.pod.annotations.get(&k).map(|v| (k.clone(), v.clone())))
        .unwrap_or_default()
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
