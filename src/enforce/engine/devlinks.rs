//! Devices the systemd cgroup driver cannot keep. runc names a container's devices to systemd
//! as `DeviceAllow=/dev/char/MAJ:MIN`, and the runc 1.1 of Debian 12 and other stable
//! distributions leaves out any device without that link or a `/sys/dev/char` entry
//! (opencontainers/runc libcontainer/cgroups/systemd/common.go, v1.1; current runc skips only
//! under systemd older than 240, libcontainer/cgroups/devices/systemd.go). NVIDIA's nodes have
//! neither, unless `nvidia-ctk system create-dev-char-symlinks` made the links. The container
//! still opens its GPU at first (runc's own device filter allows it), but the scope's policy is
//! strict without it, and systemd re-applies that policy on `systemctl daemon-reload` and every
//! `runc update`: nri-align's pool updates make the loss certain.
//!
//! The cgroup driver shows in the cgroups path (`slice:prefix:name`), so each device of a
//! container in a systemd scope is checked. For a device nri-align hands out (`added`) whose
//! link is missing it makes the link, `/dev/char/195:N -> ../nvidiaN` as nvidia-ctk does, under
//! the host root, unless `create_dev_char_links: false`. That happens during CreateContainer,
//! before the runtime asks runc to create the scope, so the scope's first `DeviceAllow=` already
//! names the device. A device it did not hand out (the device plugin's), one whose link cannot
//! be made (a read-only `/dev`, as the DaemonSet mounts it) or every device with the key off is
//! reported instead: one warning per device with the fix, a counter per container, the
//! `systemd_devices_at_risk` gauge and a `devices` line in `/readyz`, until the link exists
//! (checked again at each container creation).
//!
//! The list holds the devices of live containers only: a device leaves it, with its counter
//! series and its `/readyz` entry, once the last recorded container that carries it is gone
//! (checked whenever the records are persisted). Otherwise every device path ever seen would
//! stay, one series and one `/readyz` name each, for the life of the daemon.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use crate::enforce::container::{ContainerView, DeviceNode};
use crate::enforce::state::Records;
use crate::host::cgroup::{CgroupDriver, ContainerCgroup};
use crate::host::devices::DeviceLookup;
use crate::metrics::{Health, Metrics};

use super::{Engine, Placer};

/// The devices systemd cannot be told about, and who hears of them: owned by this file.
#[derive(Default)]
pub(super) struct DeviceLinks {
    /// Devices already warned about for lacking a `/dev/char` link.
    warned: HashSet<String>,
    /// Device nodes (by path) given to live systemd-scoped containers that still lack the
    /// link, with those containers.
    at_risk: BTreeMap<String, AtRisk>,
    /// Where `/readyz` lists what is degraded (the devices at risk), when served.
    health: Option<Arc<Health>>,
}

/// What checking a container's devices reads of the host and the configuration.
struct LinkHost<'a> {
    devices: &'a dyn DeviceLookup,
    metrics: Option<&'a Metrics>,
    /// `create_dev_char_links`: whether the links of nri-align's devices may be made.
    make_links: bool,
}

impl<P: Placer> Engine<P> {
    /// Lists the devices at risk among `health`'s degraded parts.
    pub fn set_health(&mut self, health: Arc<Health>) {
        self.device_links.health = Some(health);
    }

    /// Checks the char and block devices container `c` holds (its spec's and `added`) when
    /// its cgroup is a systemd scope, making the missing links of `added` when allowed.
    /// Returns the devices systemd still cannot be told about.
    pub(super) fn check_systemd_device_links(
        &mut self,
        c: &ContainerView,
        added: &[DeviceNode],
    ) -> Vec<String> {
        let host = LinkHost {
            devices: &*self.devices,
            metrics: self.metrics.as_deref(),
            make_links: self.config.create_dev_char_links,
        };
        self.device_links.check(c, added, &host)
    }

    /// Drops from the at-risk list the containers no longer recorded (see
    /// [`DeviceLinks::forget_gone`]).
    pub(super) fn forget_gone_device_holders(&mut self) {
        self.device_links
            .forget_gone(&self.doc.containers, self.metrics.as_deref());
    }
}

impl DeviceLinks {
    /// [`Engine::check_systemd_device_links`] with what it reads of the host.
    fn check(&mut self, c: &ContainerView, added: &[DeviceNode], host: &LinkHost) -> Vec<String> {
        let systemd = ContainerCgroup::parse(&c.cgroups_path)
            .is_ok_and(|cg| cg.driver() == CgroupDriver::Systemd);
        if !systemd {
            return Vec::new();
        }
        let before = self.at_risk.len();
        // Links made since (by nvidia-ctk, udev or an operator) take a device off the list.
        self.at_risk
            .retain(|_, d| !host.devices.systemd_can_name(&d.node));
        let mut missing = Vec::new();
        let spec = c.devices.iter().map(|d| (d, false));
        for (d, ours) in spec.chain(added.iter().map(|d| (d, true))) {
            if host.devices.systemd_can_name(d) || missing.contains(&d.path) {
                continue;
            }
            let why = match ours.then(|| link_device(c, d, host)).flatten() {
                Some(Ok(())) => continue,
                Some(Err(why)) => why,
                None => not_linked_why(ours),
            };
            missing.push(d.path.clone());
            self.report_at_risk(c, d, &why, host.metrics);
        }
        if self.at_risk.len() != before || !missing.is_empty() {
            self.publish(host.metrics);
        }
        missing
    }

    /// Warns once per device, counts the container and keeps `d` on the at-risk list.
    fn report_at_risk(
        &mut self,
        c: &ContainerView,
        d: &DeviceNode,
        why: &str,
        metrics: Option<&Metrics>,
    ) {
        self.at_risk
            .entry(d.path.clone())
            .or_insert_with(|| AtRisk {
                node: d.clone(),
                holders: BTreeSet::new(),
            })
            .holders
            .insert(c.id.clone());
        if let Some(m) = metrics {
            m.device_link_missing(&d.path);
        }
        if !self.warned.insert(d.path.clone()) {
            return;
        }
        let (kind, maj, min) = (
            if d.kind == "b" { "block" } else { "char" },
            d.major,
            d.minor,
        );
        tracing::warn!(
            container = %c.id,
            device = %d.path,
            "{} ({maj}:{min}) has no /dev/{kind}/{maj}:{min} link ({why}): runc's systemd \
             cgroup driver leaves it out of the container scope's DeviceAllow=, so the \
             container loses it at the next daemon-reload or cpuset update; on this node run \
             `nvidia-ctk system create-dev-char-symlinks --create-all` (or link \
             /dev/{kind}/{maj}:{min} to the node) before containers start (warned once per \
             device; counted in nri_align_systemd_device_link_missing_total)",
            d.path
        );
    }

    /// Drops from the at-risk list the containers not in `records`, and the devices no live
    /// container carries any more: their counter series, their `/readyz` name and their
    /// warned mark go with them (a later container carrying one is warned about again).
    fn forget_gone(&mut self, records: &Records, metrics: Option<&Metrics>) {
        let mut gone = Vec::new();
        for (path, d) in self.at_risk.iter_mut() {
            d.holders.retain(|id| records.get(id).is_some());
            if d.holders.is_empty() {
                gone.push(path.clone());
            }
        }
        if gone.is_empty() {
            return;
        }
        for path in &gone {
            self.at_risk.remove(path);
            self.warned.remove(path);
            if let Some(m) = metrics {
                m.forget_device_link_missing(path);
            }
        }
        self.publish(metrics);
    }

    /// Sets the at-risk gauge and `/readyz`'s `devices` line from the list.
    fn publish(&self, metrics: Option<&Metrics>) {
        if let Some(m) = metrics {
            m.set_devices_at_risk(self.at_risk.len());
        }
        if let Some(h) = &self.health {
            h.set_degraded("devices", devices_at_risk_line(&self.at_risk));
        }
    }
}

/// Makes `d`'s `/dev/char` link when the configuration allows (`None` when it does not):
/// `Ok` once it exists, else why it could not be made.
fn link_device(c: &ContainerView, d: &DeviceNode, host: &LinkHost) -> Option<Result<(), String>> {
    if !host.make_links {
        return None;
    }
    Some(match host.devices.create_systemd_link(d) {
        Ok(link) => {
            tracing::info!(
                container = %c.id,
                device = %d.path,
                link = %link.display(),
                "made the device's link so that runc's systemd cgroup driver keeps it in \
                 the container's scope"
            );
            if let Some(m) = host.metrics {
                m.device_link_created();
            }
            Ok(())
        }
        Err(e) => Err(format!("nri-align could not make it: {e}")),
    })
}

/// A device node without its link, and the containers carrying it (by id).
#[derive(Debug)]
struct AtRisk {
    node: DeviceNode,
    holders: BTreeSet<String>,
}

/// Why a device without its link was not linked, when nri-align did not try.
fn not_linked_why(ours: bool) -> String {
    if ours {
        "create_dev_char_links is off".into()
    } else {
        "the device plugin's, not nri-align's to link".into()
    }
}

/// What `/readyz` says of the devices at risk, when there are any.
fn devices_at_risk_line(at_risk: &BTreeMap<String, AtRisk>) -> Option<String> {
    if at_risk.is_empty() {
        return None;
    }
    let names: Vec<&str> = at_risk.keys().map(String::as_str).collect();
    Some(format!(
        "{} device node(s) without a /dev/char link lose access at the next daemon-reload under \
         the systemd cgroup driver: {}",
        names.len(),
        names.join(", ")
    ))
}

#[cfg(test)]
#[path = "devlinks_tests.rs"]
mod tests;
