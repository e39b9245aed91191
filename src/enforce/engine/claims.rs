//! DRA devices shared within a pod, as the kubelet treats claims: a claim is the pod's, and
//! every container of the pod that references it uses the same devices. So a device one
//! container holds through a CDI name (a DRA driver's per-claim spec names one claim's
//! devices, `k8s.gpu.nvidia.com/claim=<claimUID>-gpu-<minor>`) is used shared by a sibling
//! that names it too: neither a second allocation nor a refusal. The hold is the pod's and
//! the claim's: the first referencing container holds it, the others count as its sharers,
//! and when the holder is removed the hold passes to a sharer that still runs, so the device
//! is released only with the last referencing container. A restarted container (same pod,
//! same name) is not its own sibling: it takes over its predecessor's decision, CPUs
//! included, as for device-plugin devices.
//!
//! What holding means differs by kind. A GPU is held in the placer's ledger (one holder;
//! sharers in `shared_gpus`). An RDMA NIC counts its users in the ledger: the holder is one
//! user for the whole claim, and a sharer is aligned to the NIC as to a generic device
//! without being counted, so that a claim's NIC counts once however many containers of the
//! pod use it. A generic device is never held in the ledger (the runtime gives it whatever
//! placement says): its holder is the record that lists it without naming it among its
//! `shared_devices`. Either way a device passes only between containers of one pod.

use super::{Engine, Placer};
use crate::enforce::container::{ContainerView, PodView};
use crate::enforce::inputs::Built;
use crate::enforce::state::Record;
use crate::placement::{Assignment, GenericDevice};
use crate::topology::Topology;

/// One device a claim can give, by the key its kind is recorded under.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ClaimDevice {
    /// A GPU, by PCI bus id.
    Gpu(String),
    /// An RDMA NIC of the topology, by name.
    Nic(String),
    /// A generic device, by PCI bus id.
    Generic(String),
}

impl ClaimDevice {
    /// Whether `r` holds this device (see the module's words on each kind).
    fn held_by(&self, r: &Record) -> bool {
        let a = &r.assignment;
        match self {
            Self::Gpu(b) => a.gpus.contains(b),
            Self::Nic(n) => a.nics.contains(n),
            Self::Generic(b) => a.generic_devices.contains(b) && !r.shared_devices.contains(b),
        }
    }

    /// Whether `r` uses this device as a sharer of a sibling's hold.
    fn shared_by(&self, r: &Record) -> bool {
        match self {
            Self::Gpu(b) => r.assignment.shared_gpus.contains(b),
            Self::Nic(n) | Self::Generic(n) => r.shared_devices.contains(n),
        }
    }

    /// Whether `r` uses this device at all.
    fn used_by(&self, r: &Record) -> bool {
        self.held_by(r) || self.shared_by(r)
    }
}

/// The key a NIC is aligned to under when it is used shared, as a generic device: its PCI bus
/// id, or its name for a NIC the host gives none.
fn nic_key(topo: &Topology, name: &str) -> Option<String> {
    let nic = topo.nics.iter().find(|n| n.name == name)?;
    Some(nic.pci_bus_id.clone().unwrap_or_else(|| nic.name.clone()))
}

/// The claim devices `r` holds: its GPUs, its NICs, and its generic devices that are not a
/// sibling's (a shared NIC's alignment entry is listed as shared too).
fn held_devices(r: &Record) -> Vec<ClaimDevice> {
    let a = &r.assignment;
    let generic = a
        .generic_devices
        .iter()
        .filter(|b| !r.shared_devices.contains(b))
        .map(|b| ClaimDevice::Generic(b.clone()));
    a.gpus
        .iter()
        .map(|b| ClaimDevice::Gpu(b.clone()))
        .chain(a.nics.iter().map(|n| ClaimDevice::Nic(n.clone())))
        .chain(generic)
        .collect()
}

/// Whether record `r` names one of `names` (the same claim's device).
fn names_any(r: &Record, names: &[String]) -> bool {
    r.cdi_names.iter().any(|n| names.contains(n))
}

/// Whether record `r` names one of `names` and uses GPU `bus` (held or shared).
#[cfg(test)]
fn uses_through(r: &Record, names: &[String], bus: &str) -> bool {
    names_any(r, names) && ClaimDevice::Gpu(bus.to_string()).used_by(r)
}

impl<P: Placer> Engine<P> {
    /// Before `c` is placed: its devices that a running sibling of its pod already uses
    /// through the same CDI name become shared (aligned to, not held a second time). GPUs go
    /// to the request's shared GPUs; NICs and generic devices into
    /// `built.shared_claim_devices` (a NIC also becomes a generic device of the request, so
    /// that it is aligned to without being counted as the NIC's user again).
    pub(super) fn share_pod_claims(&self, pod: &PodView, c: &ContainerView, built: &mut Built) {
        let names = built.devices.spec.cdi_names.clone();
        if names.is_empty() || pod.uid.is_empty() {
            return;
        }
        let siblings: Vec<&Record> = self
            .doc
            .containers
            .of_pod_uid(&pod.uid)
            .filter(|(id, r)| {
                **id != c.id
                    && r.assignment.container_name != c.name
                    && !r.stopped
                    && names_any(r, &names)
            })
            .map(|(_, r)| r)
            .collect();
        // A restart of the holder holds again what its predecessor held, so that it takes
        // the predecessor's decision over (its CPUs) rather than being placed anew.
        let predecessors: Vec<&Record> = self
            .doc
            .containers
            .of_pod_uid(&pod.uid)
            .filter(|(id, r)| **id != c.id && r.assignment.container_name == c.name)
            .map(|(_, r)| r)
            .collect();
        let share = |d: &ClaimDevice| {
            siblings.iter().any(|r| d.used_by(r)) && !predecessors.iter().any(|r| d.held_by(r))
        };
        let req = &mut built.request;
        let (gpus, own): (Vec<String>, Vec<String>) = req
            .allocated_gpus
            .drain(..)
            .partition(|b| share(&ClaimDevice::Gpu(b.clone())));
        req.allocated_gpus = own;
        for bus in &gpus {
            if !req.shared_gpus.contains(bus) {
                req.shared_gpus.push(bus.clone());
            }
        }
        let (nics, own): (Vec<String>, Vec<String>) = req
            .allocated_nics
            .drain(..)
            .partition(|n| share(&ClaimDevice::Nic(n.clone())));
        req.allocated_nics = own;
        // A shared NIC is listed by name and by the key of its alignment entry, so that the
        // entry is never taken for a generic device this container holds.
        let topo = self.placer.topology();
        let mut others: Vec<String> = Vec::new();
        for n in &nics {
            others.push(n.clone());
            if let Some(key) = aligned_to_nic(topo, n, &mut req.generic_devices) {
                others.push(key);
            }
        }
        for g in &req.generic_devices {
            let b = &g.pci_bus_id;
            if !others.contains(b) && share(&ClaimDevice::Generic(b.clone())) {
                others.push(b.clone());
            }
        }
        if !gpus.is_empty() || !others.is_empty() {
            tracing::info!(pod = %super::pod_name(pod), container = %c.name, gpus = %gpus.join(","), devices = %others.join(","), "claim's devices shared with a container of the pod");
        }
        built.shared_claim_devices = others;
    }

    /// For a container recorded as it runs (Synchronize after the state was lost, or one
    /// created while nri-align was away): a device it has that a recorded container of its
    /// pod already uses through the same CDI name is that sibling's claim. It becomes shared
    /// (a GPU in `shared_gpus`, a NIC with its alignment entry in `shared_devices`), never a
    /// second hold, so that a claim's NIC is counted once in the ledger after a restart.
    pub(super) fn share_running_claims(&self, rec: &mut Record) {
        if rec.cdi_names.is_empty() || rec.assignment.pod_uid.is_empty() {
            return;
        }
        let id = rec.assignment.container_id.clone();
        let siblings: Vec<&Record> = self
            .doc
            .containers
            .of_pod_uid(&rec.assignment.pod_uid)
            .filter(|(i, r)| **i != id && names_any(r, &rec.cdi_names))
            .map(|(_, r)| r)
            .collect();
        if siblings.is_empty() {
            return;
        }
        let used = |d: &ClaimDevice| siblings.iter().any(|r| d.used_by(r));
        let a = &mut rec.assignment;
        let (gpus, own): (Vec<String>, Vec<String>) = a
            .gpus
            .drain(..)
            .partition(|b| used(&ClaimDevice::Gpu(b.clone())));
        a.gpus = own;
        for b in gpus {
            if !a.shared_gpus.contains(&b) {
                a.shared_gpus.push(b);
            }
        }
        let (nics, own): (Vec<String>, Vec<String>) = a
            .nics
            .drain(..)
            .partition(|n| used(&ClaimDevice::Nic(n.clone())));
        a.nics = own;
        let topo = self.placer.topology();
        for n in nics {
            if let Some(key) = nic_key(topo, &n) {
                if !a.generic_devices.contains(&key) {
                    a.generic_devices.push(key.clone());
                }
                rec.shared_devices.push(key);
            }
            tracing::info!(container = %id, nic = %n, "running container's claim NIC is a sibling's: recorded shared");
            rec.shared_devices.push(n);
        }
    }

    /// For a re-made decision of `rec`'s container (a CRI update keeps its devices): the
    /// claim NICs it uses as a sibling's sharer stay aligned to, uncounted.
    pub(super) fn keep_shared_nics(&self, rec: &Record, req: &mut crate::placement::Request) {
        let topo = self.placer.topology();
        for n in &rec.shared_devices {
            if topo.nics.iter().any(|x| x.name == *n) {
                aligned_to_nic(topo, n, &mut req.generic_devices);
            }
        }
    }

    /// After `gone` (its record `rec`) was released from the placer: each device it held that
    /// a sibling still uses through the same CDI name passes to that sibling, so the claim's
    /// device stays held until its last container goes.
    pub(super) fn pass_on_claims(&mut self, gone: &str, rec: &Record) {
        if rec.cdi_names.is_empty() {
            return;
        }
        for d in held_devices(rec) {
            let heir = self
                .doc
                .containers
                .of_pod_uid(&rec.assignment.pod_uid)
                .find(|(id, r)| {
                    id.as_str() != gone && d.shared_by(r) && names_any(r, &rec.cdi_names)
                })
                .map(|(id, r)| (id.clone(), r.clone()));
            if let Some((id, old)) = heir {
                self.hand_over(gone, &id, old, &d);
            }
        }
    }

    /// `d` passes from `gone` to `id` (its record `old`): the ledger's hold for a GPU or a NIC,
    /// the record's alone for a generic device.
    fn hand_over(&mut self, gone: &str, id: &str, old: Record, d: &ClaimDevice) {
        let mut r = old.clone();
        let in_ledger = match d {
            ClaimDevice::Gpu(b) => {
                r.assignment.shared_gpus.retain(|g| g != b);
                r.assignment.gpus.push(b.clone());
                true
            }
            ClaimDevice::Nic(n) => {
                if let Some(key) = nic_key(self.placer.topology(), n) {
                    r.assignment.generic_devices.retain(|g| *g != key);
                    r.shared_devices.retain(|s| *s != key);
                }
                r.shared_devices.retain(|s| s != n);
                r.assignment.nics.push(n.clone());
                true
            }
            ClaimDevice::Generic(b) => {
                r.shared_devices.retain(|s| s != b);
                false
            }
        };
        if in_ledger && !self.restore_as(id, &r.assignment, &old.assignment, d) {
            return;
        }
        tracing::info!(container = %id, from = %gone, device = ?d, "claim's device now held by the pod's next container");
        if let Some(mut rec) = self.doc.containers.get_mut(id) {
            rec.assignment = r.assignment;
            rec.shared_devices = r.shared_devices;
        }
    }

    /// Replaces `id`'s decision in the placer by `a`; on a refusal its decision `old` is put
    /// back and `false` returned.
    fn restore_as(&mut self, id: &str, a: &Assignment, old: &Assignment, d: &ClaimDevice) -> bool {
        self.placer.release(id);
        let Err(r) = self.placer.restore(a.clone()) else {
            return true;
        };
        tracing::warn!(container = %id, device = ?d, "claim's device not passed on: {}", r.message);
        if self.placer.restore(old.clone()).is_err() {
            tracing::error!(container = %id, "decision lost while passing a claim's device on");
        }
        false
    }
}

/// Adds NIC `name` to `generic` as a device to align to (its NUMA node), once; returns the
/// entry's key.
fn aligned_to_nic(topo: &Topology, name: &str, generic: &mut Vec<GenericDevice>) -> Option<String> {
    let nic = topo.nics.iter().find(|n| n.name == name)?;
    let key = nic_key(topo, name)?;
    if !generic.iter().any(|g| g.pci_bus_id == key) {
        generic.push(GenericDevice {
            name: name.to_string(),
            pci_bus_id: key.clone(),
            numa_node: nic.numa_node,
            pcie_path: Vec::new(),
        });
    }
    Some(key)
}

#[cfg(test)]
#[path = "claims_tests.rs"]
mod tests;
