//! Turning a container's request into what placement needs: effective annotation settings,
//! the kubelet's Guaranteed rule (exclusive CPUs when request == limit and integer), memory
//! from the limit, and device-plugin allocations as topology indices.

use super::annotations::{self, Effective};
use super::cpus;
use super::error::PlacementError;
use super::ledger::Ledger;
use super::policy::{CpuPreference, GpuMode, PlacementConfig};
use super::request::Request;
use crate::limits::excerpt;

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
    /// GPUs wanted.
    pub gpu_count: usize,
    /// GPUs the device plugin allocated (indices).
    pub alloc_gpus: Vec<usize>,
    /// NICs wanted.
    pub nic_count: usize,
    /// NICs the device plugin allocated (indices).
    pub alloc_nics: Vec<usize>,
    /// `namespace/pod/container`.
    pub who: String,
}

/// Resolves annotations, the Guaranteed rule and the devices of a request.
pub fn resolve(
    ledger: &Ledger,
    config: &PlacementConfig,
    req: &Request,
) -> Result<Resolved, PlacementError> {
    let eff = annotations::effective(&req.pod.annotations, &req.container_name, config)?;
    // Names come from the runtime; every rejection message repeats them.
    let who = format!(
        "{}/{}/{}",
        excerpt(&req.pod.namespace),
        excerpt(&req.pod.name),
        excerpt(&req.container_name)
    );
    let req_m = req.cpu_request_milli;
    let (exclusive, cpus) = match eff.cpus {
        // Counts beyond u32 saturate: such a request then fails as "not enough free cpu"
        // instead of wrapping around to a small one.
        CpuPreference::Auto => {
            let g = req.cpu_limit_milli == Some(req_m) && req_m > 0 && req_m % 1000 == 0;
            (g, if g { saturate(req_m / 1000) } else { 0 })
        }
        CpuPreference::Exclusive => {
            let m = req.cpu_limit_milli.unwrap_or(req_m).max(req_m).max(1);
            (true, saturate(m.div_ceil(1000)))
        }
        CpuPreference::Shared => (false, 0),
    };
    if exclusive && config.full_pcpus_only {
        let t = cpus::threads_per_core(ledger.topo());
        if cpus % t != 0 {
            // The next multiple, or for a count near u32::MAX (a saturated request) the one
            // below: either is a count the rule accepts.
            let suggest = cpus.div_ceil(t).checked_mul(t).unwrap_or(cpus / t * t);
            return Err(PlacementError::SmtAlignment {
                container: who,
                cpus,
                threads: t,
                suggest,
            });
        }
    }
    let alloc_gpus = req
        .allocated_gpus
        .iter()
        .map(|b| ledger.gpu_index(b))
        .collect::<Result<Vec<_>, _>>()?;
    let alloc_nics = req
        .allocated_nics
        .iter()
        .map(|n| ledger.nic_index(n))
        .collect::<Result<Vec<_>, _>>()?;
    if config.gpu_mode == GpuMode::Keep {
        for g in &alloc_gpus {
            if let Some(holder) = ledger.gpu_holder(*g) {
                return Err(PlacementError::Conflict {
                    resource: "gpu".into(),
                    id: ledger.topo().gpus[*g].pci_bus_id.clone(),
                    holder: holder.to_string(),
                });
            }
        }
    }
    let gpu_count = alloc_gpus.len().max(eff.gpus.unwrap_or(0) as usize);
    let nic_count = alloc_nics.len().max(eff.nics.unwrap_or(0) as usize);
    Ok(Resolved {
        eff,
        exclusive,
        cpus,
        memory: req.memory_limit_bytes.unwrap_or(0),
        gpu_count,
        alloc_gpus,
        nic_count,
        alloc_nics,
        who,
    })
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
