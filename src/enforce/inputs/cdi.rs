//! Source 2 of [`super::devices::find`]: CDI devices.
//!
//! Names come from NRI's `CDI_devices` (the CRI field, containerd 2.3 and later), the
//! `cdi.k8s.io/` annotations device plugins set, and the kubelet's PodResources
//! `dynamic_resources` (DRA claims). A name the CDI spec registry knows was resolved to host
//! devices before the engine was locked (`ContainerView::cdi_resolved`): a GPU or RDMA NIC of
//! the topology is an allocation like any other source's, any other PCI function a generic
//! device the container's CPUs and memory are aligned to. A name the registry does not know
//! (no spec on this host, or a spec that was skipped) falls back to what its name alone says
//! for NVIDIA's device-plugin vendors, and is otherwise noted, never refused.

use std::collections::{HashMap, HashSet};

use k8s_devices::cdi::{self, QualifiedName};
use k8s_devices::nvidia;

use super::found::{resolve_ref, unknown_gpu, Found, Resolved};
use super::RequestError;
use crate::enforce::container::{ContainerView, KubeletClaimDevice};
use crate::host::cdi::{CdiDevice, CdiIndex, CdiTarget, PciFunction};
use crate::placement::GenericDevice;
use crate::topology::Topology;

/// Every CDI name of `c` (CRI field, annotations) and of its kubelet `claims` as text,
/// unparsed.
fn raw_names<'a>(
    c: &'a ContainerView,
    claims: &'a [KubeletClaimDevice],
) -> impl Iterator<Item = &'a str> {
    let annotations = c
        .annotations
        .iter()
        .filter(|(k, _)| k.starts_with(cdi::ANNOTATION_PREFIX))
        .flat_map(|(_, v)| v.split(','));
    c.cdi_devices
        .iter()
        .map(String::as_str)
        .chain(annotations)
        .chain(
            claims
                .iter()
                .flat_map(|k| k.cdi_names.iter().map(String::as_str)),
        )
}

/// Where a device matched back from what the runtime injected (no name named it) came from,
/// in notes and log lines.
pub const INJECTED: &str = "CDI device the runtime injected";

/// The devices of `c` (with the DRA `claims` the kubelet lists for it) that `index` knows:
/// what the plugin puts in `ContainerView::cdi_resolved` before deciding (a map lookup per name or injected node, no
/// file read). First the named ones, then those matched back from the device nodes and env
/// the runtime injected ([`CdiIndex::match_injected`]): a runtime that applies the CRI
/// `CDI_devices` field but does not send it to NRI (containerd before 2.3, CRI-O) still tells
/// which spec devices the container got.
pub fn resolve_cdi(
    index: &CdiIndex,
    c: &ContainerView,
    claims: &[KubeletClaimDevice],
) -> Vec<CdiDevice> {
    if index.is_empty() {
        return Vec::new();
    }
    let max = k8s_devices::MAX_ENTRIES;
    let mut out = index.resolve(raw_names(c, claims).take(max));
    let devices = &c.devices[..c.devices.len().min(max)];
    let env = &c.env[..c.env.len().min(max)];
    let mut seen: HashSet<String> = out.iter().map(|d| d.name.clone()).collect();
    for d in index.match_injected(devices, env) {
        if seen.insert(d.name.clone()) {
            out.push(CdiDevice::clone(&d));
        }
    }
    out
}

/// The names of the devices in `c.cdi_resolved` that no source named: those matched back
/// from what the runtime injected.
pub fn matched_back(c: &ContainerView) -> Vec<&str> {
    let named: HashSet<&str> = raw_names(c, &c.kubelet_claims)
        .take(k8s_devices::MAX_ENTRIES)
        .map(str::trim)
        .collect();
    c.cdi_resolved
        .iter()
        .map(|d| d.name.as_str())
        .filter(|n| !named.contains(n))
        .collect()
}

/// The CDI names of `c` with where each came from: the CRI field's, the annotations', then
/// the kubelet's claims'. Names that do not parse are noted in `f`.
fn cdi_names(c: &ContainerView, f: &mut Found) -> Vec<(String, QualifiedName)> {
    let mut names: Vec<(String, QualifiedName)> = Vec::new();
    for n in &c.cdi_devices {
        match cdi::parse_qualified_name(n) {
            Ok(q) => names.push(("CDI device".into(), q)),
            Err(e) => f.note("CDI device", e.to_string()),
        }
    }
    match cdi::parse_annotations(c.annotations.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
        Ok(reqs) => {
            for r in reqs {
                names.extend(r.devices.into_iter().map(|q| (r.key.clone(), q)));
            }
        }
        Err(e) => f.note("cdi.k8s.io annotations", e.to_string()),
    }
    for k in &c.kubelet_claims {
        let origin = format!(
            "kubelet DRA claim {} ({}/{}/{})",
            k.claim, k.driver, k.pool, k.device
        );
        for n in &k.cdi_names {
            match cdi::parse_qualified_name(n) {
                Ok(q) => names.push((origin.clone(), q)),
                Err(e) => f.note(origin.clone(), e.to_string()),
            }
        }
    }
    // One name reached by two routes (the CRI field and a claim) is one device. A set, not a
    // scan of the names kept: a runtime or kubelet may send tens of thousands of names, and
    // this runs under the engine lock.
    let mut seen: HashSet<QualifiedName> = HashSet::with_capacity(names.len());
    names.retain(|(_, q)| seen.insert(q.clone()));
    names
}

/// Source 2, CDI devices: their RDMA NICs, generic devices and notes go into `f`; their GPUs
/// are returned, for `find` to take when no earlier source named any.
pub(super) fn cdi_devices(
    topo: &Topology,
    c: &ContainerView,
    f: &mut Found,
) -> Result<Found, RequestError> {
    let mut gpus = Found::default();
    let names = cdi_names(c, f);
    let by_resolved: HashMap<&str, &CdiDevice> = c
        .cdi_resolved
        .iter()
        .map(|d| (d.name.as_str(), d))
        .collect();
    let mut named: HashSet<String> = HashSet::with_capacity(names.len());
    for (origin, q) in &names {
        let name = q.to_string();
        if let Some(d) = by_resolved.get(name.as_str()) {
            if resolved(topo, c, origin, d, f, &mut gpus)? {
                named.insert(name);
                continue;
            }
        }
        named.insert(name);
        by_name(topo, c, origin, q, f, &mut gpus)?;
    }
    // The devices no name named: matched back from what the runtime injected.
    for d in &c.cdi_resolved {
        if !named.contains(&d.name) {
            resolved(topo, c, INJECTED, d, f, &mut gpus)?;
        }
    }
    Ok(gpus)
}

/// A device the registry resolved: its GPUs into `gpus`, its NICs and generic devices into
/// `f`. `false` when its spec names no host device at all (an NVIDIA `all` device whose env
/// does the work, a spec of control nodes only): its name is then read as before.
fn resolved(
    topo: &Topology,
    c: &ContainerView,
    origin: &str,
    d: &CdiDevice,
    f: &mut Found,
    gpus: &mut Found,
) -> Result<bool, RequestError> {
    // MIG capability nodes beside the GPU node: the GPU is a MIG device's parent, shared.
    let mig = d.targets.contains(&CdiTarget::MigCapability);
    let mut any = false;
    for t in &d.targets {
        match t {
            CdiTarget::MigCapability => {}
            CdiTarget::NvidiaGpu { minor } => {
                let Some(g) = topo.gpus.iter().find(|g| g.minor == Some(*minor)) else {
                    return Err(unknown_gpu(c, origin, &d.name));
                };
                gpus.push(&g.pci_bus_id, mig);
                gpus.name_via(&g.pci_bus_id, &d.name);
                any = true;
            }
            CdiTarget::Uverbs { name, pci } => {
                if let Some(nic) = topo
                    .nics
                    .iter()
                    .find(|n| n.uverbs.iter().any(|u| u == name))
                {
                    add_nic(f, &nic.name, &d.name);
                } else if let Some(p) = pci {
                    pci_target(topo, &d.name, p, mig, f, gpus);
                } else {
                    f.note(
                        origin,
                        format!("{}: {name} is no RDMA device of this host", d.name),
                    );
                }
                any = true;
            }
            CdiTarget::Pci(p) => {
                pci_target(topo, &d.name, p, mig, f, gpus);
                any = true;
            }
        }
    }
    for u in &d.unmapped {
        f.note(origin, format!("{}: device node {u}", d.name));
    }
    Ok(any)
}

/// A PCI function: a GPU of the topology, an RDMA NIC of it, or a generic device.
fn pci_target(
    topo: &Topology,
    name: &str,
    p: &PciFunction,
    mig: bool,
    f: &mut Found,
    gpus: &mut Found,
) {
    let bus = p.bus_id.as_str();
    if let Some(g) = topo
        .gpus
        .iter()
        .find(|g| g.pci_bus_id.eq_ignore_ascii_case(bus))
    {
        gpus.push(&g.pci_bus_id, mig);
        gpus.name_via(&g.pci_bus_id, name);
        return;
    }
    let rdma_nic = topo.nics.iter().find(|n| {
        n.rdma_device.is_some()
            && n.pci_bus_id
                .as_deref()
                .is_some_and(|b| b.eq_ignore_ascii_case(bus))
    });
    if let Some(nic) = rdma_nic {
        add_nic(f, &nic.name, name);
        return;
    }
    if f.generic.iter().any(|g| g.pci_bus_id == bus) {
        return;
    }
    // The topology's own reading of the function (its NUMA node resolved through the parents
    // and `local_cpulist`) is better than the raw sysfs value, where it has one.
    let numa_node = topo.pci(bus).and_then(|d| d.numa_node).or(p.numa_node);
    f.generic.push(GenericDevice {
        name: name.to_string(),
        pci_bus_id: bus.to_string(),
        numa_node,
        pcie_path: p.pcie_path.clone(),
    });
}

/// NIC `name` of the topology, reached through CDI name `via`.
fn add_nic(f: &mut Found, name: &str, via: &str) {
    if !f.nics.iter().any(|n| n == name) {
        f.nics.push(name.to_string());
    }
    f.name_via(name, via);
}

/// A name no spec of this host resolves: NVIDIA's device-plugin names read from the name
/// alone; anything else noted, so it is logged and counted, and the container placed as if it
/// had none (never refused, never widened).
fn by_name(
    topo: &Topology,
    c: &ContainerView,
    origin: &str,
    q: &QualifiedName,
    f: &mut Found,
    gpus: &mut Found,
) -> Result<(), RequestError> {
    let not_aligned = |f: &mut Found| {
        f.note(
            origin,
            format!("{q}: CDI device of a kind nri-align does not align"),
        )
    };
    if !nvidia::CDI_VENDORS.contains(&q.vendor.as_str()) {
        not_aligned(f);
        return Ok(());
    }
    match q.class.as_str() {
        "gpu" | "mig" => cdi_gpu(topo, c, origin, q, f, gpus),
        "net-rdma" => {
            cdi_nic(topo, origin, q, f);
            Ok(())
        }
        _ => {
            not_aligned(f);
            Ok(())
        }
    }
}

/// One NVIDIA CDI GPU or MIG device: its GPU into `gpus`, what cannot be used noted in `f`.
fn cdi_gpu(
    topo: &Topology,
    c: &ContainerView,
    origin: &str,
    q: &QualifiedName,
    f: &mut Found,
    gpus: &mut Found,
) -> Result<(), RequestError> {
    if q.name == "all" {
        f.note(origin, format!("{q}: `all` is not an allocation"));
        return Ok(());
    }
    let Ok(r) = nvidia::parse_gpu_ref(&q.name) else {
        f.note(origin, format!("{q}: device name is no NVIDIA id"));
        return Ok(());
    };
    match resolve_ref(topo, &r) {
        Resolved::Whole(b) => {
            gpus.push(&b, q.class == "mig");
            gpus.name_via(&b, &q.to_string());
        }
        Resolved::MigParent(b) => {
            gpus.push(&b, true);
            gpus.name_via(&b, &q.to_string());
        }
        Resolved::MigUnknownParent => f.note(
            origin,
            format!("{q}: MIG device whose parent GPU its name does not give"),
        ),
        Resolved::Unknown => return Err(unknown_gpu(c, origin, &q.to_string())),
    }
    Ok(())
}

/// One CDI RDMA device, named by its PCI address: its NIC into `f`, or a note.
fn cdi_nic(topo: &Topology, origin: &str, q: &QualifiedName, f: &mut Found) {
    match topo.nics.iter().find(|n| {
        n.pci_bus_id
            .as_deref()
            .is_some_and(|b| b.eq_ignore_ascii_case(&q.name))
    }) {
        Some(nic) => add_nic(f, &nic.name, &q.to_string()),
        None => f.note(
            origin,
            format!("{q}: no RDMA NIC of this host has that PCI address"),
        ),
    }
}

#[cfg(test)]
#[path = "cdi_tests.rs"]
mod tests;
