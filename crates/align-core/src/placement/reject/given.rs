//! The devices a refusal must name: those the search could not choose because they were given
//! (the device plugin's under `gpu_mode: keep`, a scheduler's choice, GPUs used shared, generic
//! devices the runtime adds whatever placement says), each with its NUMA node, and the remedy
//! that fits who gave them. Without them a refusal reads as if the free capacity sufficed
//! ("best candidate node 1 had free cpu 72, … gpus 2, nics 2", all that was asked) when what
//! decided was where the given devices sit.

use crate::placement::ledger::Ledger;
use crate::placement::resolve::Resolved;

/// The devices the search held fixed (see `Search::new`): GPUs and NICs by index, and whether
/// they are fixed because `gpu_mode` is `keep`.
pub struct Fixed<'a> {
    /// GPUs the search had to take.
    pub gpus: &'a [usize],
    /// NICs the search had to take.
    pub nics: &'a [usize],
    /// `gpu_mode: keep` (else only a scheduler's choice fixes GPUs and NICs).
    pub keep: bool,
}

/// What a refusal says about the given devices.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Given {
    /// `: the device plugin gave GPU … on node 1 and NIC … on node 0, and gpu_mode: keep does
    /// not move them`, or nothing when no device was given.
    pub text: String,
    /// What the user can change about them, most direct first.
    pub remedies: Vec<String>,
}

/// Devices of one kind grouped by node, in the order first met: "GPUs a, b on node 1".
fn by_node(one: &str, many: &str, items: &[(String, Option<u32>)]) -> Vec<String> {
    let mut nodes: Vec<Option<u32>> = Vec::new();
    for (_, n) in items {
        if !nodes.contains(n) {
            nodes.push(*n);
        }
    }
    nodes
        .into_iter()
        .map(|node| {
            let names: Vec<&str> = items
                .iter()
                .filter(|(_, n)| *n == node)
                .map(|(name, _)| name.as_str())
                .collect();
            let kind = if names.len() == 1 { one } else { many };
            let place = match node {
                Some(id) => format!("on node {id}"),
                None => "on no NUMA node".to_string(),
            };
            format!("{kind} {} {place}", names.join(", "))
        })
        .collect()
}

/// "a", "a and b", "a, b and c".
fn and_list(parts: &[String]) -> String {
    match parts.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// The given devices of `r` with their nodes and the remedies for them; empty when the search
/// was free to choose every device.
pub fn given(ledger: &Ledger, r: &Resolved, fixed: &Fixed) -> Given {
    let topo = ledger.topo();
    let node_id = |i: Option<usize>| i.map(|i| topo.numa_nodes[i].id);
    let gpu = |g: &usize| {
        let bus = topo.gpus[*g].pci_bus_id.clone();
        (bus, node_id(ledger.gpu_node(*g)))
    };
    let gpus: Vec<(String, Option<u32>)> = fixed.gpus.iter().map(gpu).collect();
    let nics: Vec<(String, Option<u32>)> = fixed
        .nics
        .iter()
        .map(|x| (topo.nics[*x].name.clone(), node_id(ledger.nic_node(*x))))
        .collect();
    let mut sentences = Vec::new();
    let mut remedies = Vec::new();
    let mut parts = by_node("GPU", "GPUs", &gpus);
    parts.extend(by_node("NIC", "NICs", &nics));
    if !parts.is_empty() {
        let chooser = r
            .choice
            .as_ref()
            .filter(|h| !h.gpus.is_empty() || !h.nics.is_empty())
            .map(|h| h.scheduler);
        match chooser {
            Some(s) => {
                sentences.push(format!(
                    "the scheduler ({}) chose {}",
                    s.label(),
                    and_list(&parts)
                ));
                remedies.push("reschedule the pod or set scheduler_choice: preferred".into());
            }
            None => {
                sentences.push(format!(
                    "the device plugin gave {}, and gpu_mode: keep does not move them",
                    and_list(&parts)
                ));
                remedies.extend(plugin_remedies(&gpus, &nics, fixed.keep));
            }
        }
    }
    let mut others: Vec<String> = by_node(
        "shared GPU",
        "shared GPUs",
        &r.shared_gpus.iter().map(gpu).collect::<Vec<_>>(),
    );
    let generic: Vec<(String, Option<u32>)> = r
        .generic_nodes
        .iter()
        .filter(|(_, n)| n.is_some())
        .map(|(name, n)| (name.clone(), node_id(*n)))
        .collect();
    others.extend(by_node("device", "devices", &generic));
    if !others.is_empty() {
        sentences.push(format!(
            "the container uses {} whatever placement says",
            and_list(&others)
        ));
    }
    Given {
        text: if sentences.is_empty() {
            String::new()
        } else {
            format!(": {}", sentences.join("; "))
        },
        remedies,
    }
}

/// Remedies for devices the device plugin gave under `keep`: remap lets nri-align choose them
/// all; a NIC on a node none of the GPUs is on comes from a NIC plugin that reports no NUMA
/// node (the kubelet's Topology Manager then cannot pair it); GPUs across nodes, from a
/// Topology Manager that does not align them.
fn plugin_remedies(
    gpus: &[(String, Option<u32>)],
    nics: &[(String, Option<u32>)],
    keep: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    if keep {
        out.push("set gpu_mode: remap (nri-align then chooses the GPUs and NICs)".to_string());
    }
    let gpu_nodes: Vec<Option<u32>> = gpus.iter().map(|(_, n)| *n).collect();
    if !gpus.is_empty() && nics.iter().any(|(_, n)| !gpu_nodes.contains(n)) {
        out.push(
            "have the NIC device plugin report each NIC's NUMA node, so the kubelet's Topology \
             Manager gives a NIC on the GPUs' node"
                .to_string(),
        );
    }
    if gpu_nodes.iter().any(|n| *n != gpu_nodes[0]) {
        out.push(
            "set the kubelet's Topology Manager policy to single-numa-node or restricted, so \
             the device plugin's GPUs come on one node"
                .to_string(),
        );
    }
    out
}

#[cfg(test)]
#[path = "given_tests.rs"]
mod tests;
