//! DRA devices shared within a pod, as the kubelet treats claims: a claim is the pod's, and
//! every container of the pod that references it uses the same devices. So a GPU one
//! container holds through a CDI name (a DRA driver's per-claim spec names one claim's
//! devices, `k8s.gpu.nvidia.com/claim=<claimUID>-gpu-<minor>`) is used shared by a sibling
//! that names it too: neither a second allocation nor a refusal. The hold is the pod's and
//! the claim's: the first referencing container holds it in the ledger, the others count as
//! its sharers, and when the holder is removed the hold passes to a sharer that still runs,
//! so the device is released only with the last referencing container. A restarted
//! container (same pod, same name) is not its own sibling: it takes over its predecessor's
//! decision, CPUs included, as for device-plugin devices.

use super::{Engine, Placer};
use crate::enforce::container::{ContainerView, PodView};
use crate::enforce::inputs::Built;
use crate::enforce::state::Record;

/// The CDI names of `c` that resolved to devices, for its record.
pub(super) fn cdi_names(c: &ContainerView) -> Vec<String> {
    c.cdi_resolved.iter().map(|d| d.name.clone()).collect()
}

/// Whether record `r` names one of `names` and uses GPU `bus` (held or shared).
fn uses_through(r: &Record, names: &[String], bus: &str) -> bool {
    let a = &r.assignment;
    r.cdi_names.iter().any(|n| names.contains(n))
        && (a.gpus.iter().any(|g| g == bus) || a.shared_gpus.iter().any(|g| g == bus))
}

impl<P: Placer> Engine<P> {
    /// Before `c` is placed: its GPUs that a running sibling of its pod already uses through
    /// the same CDI name become shared (aligned to, not held a second time).
    pub(super) fn share_pod_claims(&self, pod: &PodView, c: &ContainerView, built: &mut Built) {
        let names = cdi_names(c);
        if names.is_empty() || pod.uid.is_empty() {
            return;
        }
        let sibling_uses = |bus: &str| {
            self.doc.containers.of_pod_uid(&pod.uid).any(|(id, r)| {
                *id != c.id
                    && r.assignment.container_name != c.name
                    && !r.stopped
                    && uses_through(r, &names, bus)
            })
        };
        // A restart of the holder holds again what its predecessor held, so that it takes
        // the predecessor's decision over (its CPUs) rather than being placed anew.
        let predecessor_holds = |bus: &str| {
            self.doc.containers.of_pod_uid(&pod.uid).any(|(id, r)| {
                *id != c.id
                    && r.assignment.container_name == c.name
                    && r.assignment.gpus.iter().any(|g| g == bus)
            })
        };
        let (shared, own): (Vec<String>, Vec<String>) = built
            .request
            .allocated_gpus
            .drain(..)
            .partition(|bus| sibling_uses(bus) && !predecessor_holds(bus));
        built.request.allocated_gpus = own;
        if !shared.is_empty() {
            tracing::info!(pod = %super::pod_name(pod), container = %c.name, gpus = %shared.join(","), "claim's devices shared with a container of the pod");
            for bus in shared {
                if !built.request.shared_gpus.contains(&bus) {
                    built.request.shared_gpus.push(bus);
                }
            }
        }
    }

    /// After `gone` (its record `rec`) was released from the placer: each GPU it held that a
    /// sibling still uses through the same CDI name passes to that sibling, so the claim's
    /// device stays held until its last container goes.
    pub(super) fn pass_on_claims(&mut self, gone: &str, rec: &Record) {
        if rec.cdi_names.is_empty() {
            return;
        }
        for bus in &rec.assignment.gpus {
            let heir = self
                .doc
                .containers
                .of_pod_uid(&rec.assignment.pod_uid)
                .find(|(id, r)| {
                    id.as_str() != gone
                        && r.assignment.shared_gpus.contains(bus)
                        && uses_through(r, &rec.cdi_names, bus)
                })
                .map(|(id, r)| (id.clone(), r.assignment.clone()));
            let Some((id, old)) = heir else {
                continue;
            };
            let mut a = old.clone();
            a.shared_gpus.retain(|g| g != bus);
            a.gpus.push(bus.clone());
            self.placer.release(&id);
            if let Err(r) = self.placer.restore(a.clone()) {
                tracing::warn!(container = %id, gpu = %bus, "claim's device not passed on: {}", r.message);
                if self.placer.restore(old).is_err() {
                    tracing::error!(container = %id, "decision lost while passing a claim's device on");
                }
                continue;
            }
            tracing::info!(container = %id, from = %gone, gpu = %bus, "claim's device now held by the pod's next container");
            if let Some(mut r) = self.doc.containers.get_mut(&id) {
                r.assignment = a;
            }
        }
    }
}

#[cfg(test)]
#[path = "claims_tests.rs"]
mod tests;
