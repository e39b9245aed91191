//! Rejection messages of the engine: what was asked, what the host or the best candidate node
//! had, and what the user can change (a smaller request, another policy or scope). Kept apart
//! from the choice itself so the engine reads as the algorithm.

pub(super) mod given;

use self::given::Fixed;
use super::annotations::DOMAIN;
use super::error::{fmt_bytes, fmt_nodes, Ask, NodeOffer, PlacementError};
use super::hugepages;
use super::ledger::Ledger;
use super::nics;
use super::numa::{self, Cap, Need};
use super::policy::PlacementConfig;
use super::resolve::Resolved;
use crate::topology::NodeSet;

/// The node-set shape the policy allowed when nothing fitted.
pub struct Shape<'a> {
    /// The pod's node set, in pod scope once its first container is placed.
    pub pin: Option<&'a NodeSet>,
    /// Widest node set the policy admits (1 for single-numa-node, `usize::MAX` for best-effort).
    pub limit: usize,
}

/// The host as a whole lacks something `r` asks for, whatever the alignment. Names the first
/// resource short, in the order a user would look at them.
pub fn insufficient(
    ledger: &Ledger,
    config: &PlacementConfig,
    r: &Resolved,
    caps: &[Cap],
) -> PlacementError {
    let free_cpu: u32 = caps.iter().map(|c| c.cpu).sum();
    // Memory sizes come from the topology source: saturate rather than wrap past u64.
    let free_mem: u64 = caps
        .iter()
        .filter(|c| c.has_cpus)
        .map(|c| c.mem)
        .fold(0, u64::saturating_add);
    let free_gpu = ledger.free_gpus().len();
    let nics = nics::eligible(ledger);
    let unused = nics.iter().filter(|x| ledger.nic_users(**x) == 0).count();
    let nics = nics.len();
    let cpu_nodes: Vec<usize> = (0..caps.len()).filter(|i| caps[*i].has_cpus).collect();
    let huge_short = numa::huge_short(caps, &cpu_nodes, &r.hugepages);
    let (resource, asked, free) = if r.exclusive && free_cpu < r.cpus {
        let what = if config.full_pcpus_only {
            "whole-core cpu"
        } else {
            "cpu"
        };
        (what, r.cpus.to_string(), format!("{free_cpu} free"))
    } else if free_mem < r.memory {
        (
            "memory",
            fmt_bytes(r.memory),
            format!("{} free", fmt_bytes(free_mem)),
        )
    } else if let Some((h, free)) = huge_short {
        (
            "huge pages",
            hugepages::fmt_pages(h.size_kb, h.pages),
            format!("{} free", hugepages::fmt_pages(h.size_kb, free)),
        )
    } else if free_gpu < r.gpu_count {
        ("gpu", r.gpu_count.to_string(), format!("{free_gpu} free"))
    } else if nics < r.nic_count {
        // Containers share NICs: the host is short of NICs in all, not of unused ones.
        (
            "nic",
            r.nic_count.to_string(),
            format!("{nics} in all ({unused} unused)"),
        )
    } else {
        (
            "shared-pool cpu",
            "1".to_string(),
            format!("{} free", ledger.shared_pool().len()),
        )
    };
    PlacementError::Insufficient {
        container: r.who.clone(),
        resource: resource.into(),
        asked,
        free,
    }
}

/// The node sets a refusal says nothing fitted: the pod's nodes, one node, the narrowest width
/// `restricted` admits, or, where the policy sets no width (`best-effort`'s limit is
/// `usize::MAX`, never a number to print), the nodes that were searched.
fn shape_text(ledger: &Ledger, shape: &Shape, allowed: &[bool]) -> String {
    let searched: Vec<usize> = (0..allowed.len()).filter(|i| allowed[*i]).collect();
    match (shape.pin, shape.limit) {
        (Some(p), _) => format!("the pod's NUMA {}", fmt_nodes(p)),
        (None, 1) => "one NUMA node".to_string(),
        (None, _) if searched.len() < allowed.len() => {
            format!("the allowed NUMA {}", fmt_nodes(&ledger.ids(&searched)))
        }
        (None, w) if w >= allowed.len() => "any number of NUMA nodes".to_string(),
        (None, w) => format!("{w} NUMA nodes (the narrowest this request can be)"),
    }
}

/// The host has the resources, but not on a node set the policy (or the pod's pin) accepts.
/// `need` is the whole request (GPUs included); `allowed` marks the nodes that were searched;
/// `fixed`, the devices the search could not choose, which the message names with their nodes.
pub fn unalignable(
    ledger: &Ledger,
    r: &Resolved,
    caps: &[Cap],
    allowed: &[bool],
    shape: &Shape,
    need: &Need,
    fixed: &Fixed,
) -> PlacementError {
    let best = numa::best_offer(caps, allowed, need);
    let asked = Ask {
        cpus: need.cpus,
        memory_bytes: need.memory,
        gpus: need.gpus,
        nics: need.nics,
        hugepages: need.hugepages.clone(),
    };
    let (mut what, reduce) = shortfalls(&asked, &best);
    if what.is_empty() {
        // Every amount fits the best node on its own; the devices' locality is what failed
        // (e.g. the free GPUs sit on another node than the free CPUs).
        what.push("devices and cpus together".into());
    }
    let shape_text = shape_text(ledger, shape, allowed);
    let given = given::given(ledger, r, fixed);
    // What to do about the given devices first: they decided the refusal, not the amounts.
    let mut alternatives = given.remedies;
    let everywhere = vec![true; caps.len()];
    let without_gpus = Need {
        gpus: 0,
        ..need.clone()
    };
    if shape.limit == 1 && shape.limit < numa::min_width(ledger, need) {
        // Never fits one node on this host: only a wider policy can admit it.
        alternatives.push("use policy restricted or best-effort".to_string());
    } else if numa::choose(
        ledger.topo(),
        caps,
        &everywhere,
        &without_gpus,
        super::policy::NumaChoice::BestFit,
    )
    .is_some()
    {
        alternatives.push(format!("use policy best-effort (policy.{DOMAIN}/pod)"));
    }
    if shape.pin.is_some() {
        alternatives.push("use scope container".to_string());
    }
    let mut suggestion = String::new();
    if !reduce.is_empty() {
        suggestion = format!("would fit: reduce {}", reduce.join(", "));
    }
    if !alternatives.is_empty() {
        // The given devices' remedies are clauses of their own: "; or " keeps them apart.
        let alternatives = alternatives.join("; or ");
        if suggestion.is_empty() {
            suggestion = alternatives;
        } else {
            suggestion = format!("{suggestion}, or {alternatives}");
        }
    }
    if suggestion.is_empty() {
        suggestion = "wait for capacity to free up".into();
    }
    PlacementError::Unalignable {
        container: r.who.clone(),
        policy: r.eff.policy,
        what: what.join(", "),
        shape: format!("{shape_text}{}", given.text),
        asked: Box::new(asked),
        best: Box::new(best),
        suggestion,
    }
}

/// What the best node lacks of what was asked (`cpu`, `memory`, `gpus`, `nics`,
/// `hugepages-2Mi`), and how far each would have to shrink to fit it.
fn shortfalls(asked: &Ask, best: &NodeOffer) -> (Vec<String>, Vec<String>) {
    let mut what: Vec<String> = Vec::new();
    let mut reduce = Vec::new();
    if best.cpus < asked.cpus {
        what.push("cpu".into());
        reduce.push(format!("cpu to {}", best.cpus));
    }
    if best.memory_bytes < asked.memory_bytes {
        what.push("memory".into());
        reduce.push(format!("memory to {}", fmt_bytes(best.memory_bytes)));
    }
    if best.gpus < asked.gpus {
        what.push("gpus".into());
        reduce.push(format!("gpus to {}", best.gpus));
    }
    // NICs are shared: those in use count towards what a node can give.
    let best_nics = best.nics.saturating_add(best.nics_in_use);
    if best_nics < asked.nics {
        what.push("nics".into());
        reduce.push(format!("nics to {best_nics}"));
    }
    // The page size and what the best node has free of it: pages of one node are not another's.
    for (h, (_, free)) in asked.hugepages.iter().zip(&best.hugepages) {
        if *free < h.pages {
            what.push(h.resource());
            reduce.push(format!("{} to {free} pages", h.resource()));
        }
    }
    (what, reduce)
}

#[cfg(test)]
mod tests;
