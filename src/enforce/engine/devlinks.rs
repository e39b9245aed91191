//! Devices the systemd cgroup driver cannot keep. runc names a container's devices to systemd
//! as `DeviceAllow=/dev/char/MAJ:MIN` and leaves out any device without that link (or a
//! `/sys/dev/char` entry): NVIDIA's nodes, unless `nvidia-ctk system
//! create-dev-char-symlinks` made the links. The container still opens its GPU at first (runc's
//! own device filter allows it), but the scope's policy is strict without it, and systemd
//! re-applies that policy on every `runc update`: nri-align's pool updates make the loss
//! certain. The cgroup driver shows in the cgroups path (`slice:prefix:name`), so each device
//! of a container in a systemd scope is checked; the first container holding a device without
//! the link gets one warning with the fix, and every one is counted.
//!
//! nri-align does not make the links itself: `/dev` belongs to the node's device manager
//! (udev, the NVIDIA driver's tooling), the daemon has dropped every capability and its unit
//! and DaemonSet never give it the host's `/dev` to write, and links made after a container
//! was created would not put its device back into the scope's policy before the next update.

use crate::enforce::container::{ContainerView, DeviceNode};
use crate::host::cgroup::{CgroupDriver, ContainerCgroup};

use super::{Engine, Placer};

impl<P: Placer> Engine<P> {
    /// Checks the char and block devices container `c` holds (its spec's and `added`) when
    /// its cgroup is a systemd scope. Returns the devices systemd cannot be told about.
    pub(super) fn check_systemd_device_links(
        &mut self,
        c: &ContainerView,
        added: &[DeviceNode],
    ) -> Vec<String> {
        let systemd = ContainerCgroup::parse(&c.cgroups_path)
            .is_ok_and(|cg| cg.driver() == CgroupDriver::Systemd);
        if !systemd {
            return Vec::new();
        }
        let mut missing = Vec::new();
        for d in c.devices.iter().chain(added) {
            if self.devices.systemd_can_name(d) || missing.contains(&d.path) {
                continue;
            }
            missing.push(d.path.clone());
            if let Some(m) = &self.metrics {
                m.device_link_missing(&d.path);
            }
            if self.device_links_warned.insert(d.path.clone()) {
                let (kind, maj, min) = (
                    if d.kind == "b" { "block" } else { "char" },
                    d.major,
                    d.minor,
                );
                tracing::warn!(
                    container = %c.id,
                    device = %d.path,
                    "{} ({maj}:{min}) has no /dev/{kind}/{maj}:{min} link: runc's systemd cgroup \
                     driver leaves it out of the container scope's DeviceAllow=, so the container \
                     loses it at its next cpuset update; on this node run `nvidia-ctk system \
                     create-dev-char-symlinks --create-all` (or link /dev/{kind}/{maj}:{min} to \
                     the node) before containers start (warned once per device; counted in \
                     nri_align_systemd_device_link_missing_total)",
                    d.path
                );
            }
        }
        missing
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::Config;
    use crate::enforce::container::{ContainerState, PodView, ResourcesView};
    use crate::enforce::inputs::tests::node;
    use crate::enforce::testing::FakePlacer;
    use crate::host::devices::DeviceLookup;
    use crate::metrics::Metrics;

    /// GPU nodes 195:N; only GPU 0 has a `/dev/char` link.
    struct OneLink;
    impl DeviceLookup for OneLink {
        fn lookup(&self, path: &str) -> Option<DeviceNode> {
            let minor = crate::host::devices::nvidia_minor(path)?;
            Some(node(path, 195, i64::from(minor)))
        }
        fn systemd_can_name(&self, n: &DeviceNode) -> bool {
            n.minor == 0
        }
    }

    fn gpu_ctr(id: &str, cgroups_path: &str, minors: &[i64]) -> ContainerView {
        ContainerView {
            id: id.into(),
            name: id.into(),
            pod_sandbox_id: "sb".into(),
            state: ContainerState::Running,
            cgroups_path: cgroups_path.into(),
            resources: ResourcesView {
                cpu_shares: Some(102),
                ..Default::default()
            },
            devices: minors
                .iter()
                .map(|m| node(&format!("/dev/nvidia{m}"), 195, *m))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_device_without_its_link_is_counted_for_every_systemd_container() {
        let metrics = Arc::new(Metrics::new());
        let mut e = Engine::new(
            FakePlacer::new(),
            Config::default(),
            None,
            Some(metrics.clone()),
            Box::new(OneLink),
        );
        let pod = PodView {
            id: "sb".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        let sd = "kubepods-burstable-pod1.slice:cri-containerd:";
        for (id, path) in [("a", format!("{sd}a")), ("b", format!("{sd}b"))] {
            let c = gpu_ctr(id, &path, &[0, 1]);
            assert_eq!(e.check_systemd_device_links(&c, &[]), vec!["/dev/nvidia1"]);
        }
        // The cgroupfs driver keeps device rules across updates: nothing to say.
        let c = gpu_ctr("c", "/kubepods/burstable/pod1/c", &[1]);
        assert!(e.check_systemd_device_links(&c, &[]).is_empty());
        // Through a real create, too.
        e.create_container(&pod, &gpu_ctr("d", &format!("{sd}d"), &[1]))
            .expect("create");
        let text = metrics.encode();
        assert!(
            text.contains("nri_align_systemd_device_link_missing_total{device=\"/dev/nvidia1\"} 3"),
            "{text}"
        );
        assert!(!text.contains("/dev/nvidia0"), "{text}");
        assert_eq!(e.device_links_warned.len(), 1, "one warning per device");
    }
}
