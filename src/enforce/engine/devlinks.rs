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

use std::collections::BTreeMap;

use crate::enforce::container::{ContainerView, DeviceNode};
use crate::host::cgroup::{CgroupDriver, ContainerCgroup};

use super::{Engine, Placer};

impl<P: Placer> Engine<P> {
    /// Checks the char and block devices container `c` holds (its spec's and `added`) when
    /// its cgroup is a systemd scope, making the missing links of `added` when allowed.
    /// Returns the devices systemd still cannot be told about.
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
        let before = self.devices_at_risk.len();
        // Links made since (by nvidia-ctk, udev or an operator) take a device off the list.
        let devices = &self.devices;
        self.devices_at_risk
            .retain(|_, d| !devices.systemd_can_name(d));
        let mut missing = Vec::new();
        let spec = c.devices.iter().map(|d| (d, false));
        for (d, ours) in spec.chain(added.iter().map(|d| (d, true))) {
            if self.devices.systemd_can_name(d) || missing.contains(&d.path) {
                continue;
            }
            let why = match ours.then(|| self.link_device(c, d)).flatten() {
                Some(Ok(())) => continue,
                Some(Err(why)) => why,
                None => not_linked_why(ours),
            };
            missing.push(d.path.clone());
            self.report_device_at_risk(c, d, &why);
        }
        if self.devices_at_risk.len() != before || !missing.is_empty() {
            self.publish_devices_at_risk();
        }
        missing
    }

    /// Makes `d`'s `/dev/char` link when the configuration allows (`None` when it does not):
    /// `Ok` once it exists, else why it could not be made.
    fn link_device(&mut self, c: &ContainerView, d: &DeviceNode) -> Option<Result<(), String>> {
        if !self.config.create_dev_char_links {
            return None;
        }
        Some(match self.devices.create_systemd_link(d) {
            Ok(link) => {
                tracing::info!(
                    container = %c.id,
                    device = %d.path,
                    link = %link.display(),
                    "made the device's link so that runc's systemd cgroup driver keeps it in \
                     the container's scope"
                );
                if let Some(m) = &self.metrics {
                    m.device_link_created();
                }
                Ok(())
            }
            Err(e) => Err(format!("nri-align could not make it: {e}")),
        })
    }

    /// Warns once per device, counts the container and keeps `d` on the at-risk list.
    fn report_device_at_risk(&mut self, c: &ContainerView, d: &DeviceNode, why: &str) {
        self.devices_at_risk.insert(d.path.clone(), d.clone());
        if let Some(m) = &self.metrics {
            m.device_link_missing(&d.path);
        }
        if !self.device_links_warned.insert(d.path.clone()) {
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

    /// Sets the at-risk gauge and `/readyz`'s `devices` line from the list.
    fn publish_devices_at_risk(&self) {
        if let Some(m) = &self.metrics {
            m.set_devices_at_risk(self.devices_at_risk.len());
        }
        if let Some(h) = &self.health {
            h.set_degraded("devices", devices_at_risk_line(&self.devices_at_risk));
        }
    }
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
fn devices_at_risk_line(at_risk: &BTreeMap<String, DeviceNode>) -> Option<String> {
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

    /// An engine over a fake host root whose `/dev/nvidia0` is the real `/dev/null` (char
    /// 1:3) through a link (a test cannot make device nodes), with `/readyz`'s health.
    fn engine_on_root(
        config: Config,
    ) -> (
        tempfile::TempDir,
        Engine<FakePlacer>,
        Arc<Metrics>,
        Arc<crate::metrics::Health>,
        DeviceNode,
    ) {
        let t = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(t.path().join("dev")).expect("mkdir");
        std::os::unix::fs::symlink("/dev/null", t.path().join("dev/nvidia0")).expect("stand-in");
        let host = crate::host::devices::HostDevices::new(t.path());
        let gpu = host.lookup("/dev/nvidia0").expect("stand-in");
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(crate::metrics::Health::default());
        let mut e = Engine::new(
            FakePlacer::new(),
            config,
            None,
            Some(metrics.clone()),
            Box::new(host),
        );
        e.set_health(health.clone());
        (t, e, metrics, health, gpu)
    }

    const SCOPE: &str = "kubepods-burstable-pod1.slice:cri-containerd:";

    #[test]
    fn a_device_handed_out_gets_its_link_before_runc_makes_the_scope() {
        let (t, mut e, metrics, health, gpu) = engine_on_root(Config::default());
        let c = gpu_ctr("a", &format!("{SCOPE}a"), &[]);
        assert!(e.check_systemd_device_links(&c, &[gpu]).is_empty());
        let link = t.path().join("dev/char/1:3");
        assert_eq!(
            std::fs::read_link(&link).expect("link made"),
            std::path::PathBuf::from("../nvidia0")
        );
        let text = metrics.encode();
        assert!(
            text.contains("nri_align_systemd_device_links_created_total 1"),
            "{text}"
        );
        assert!(
            text.contains("nri_align_systemd_devices_at_risk 0"),
            "{text}"
        );
        assert!(health.degraded().is_empty());
        // A device in the spec that nri-align did not hand out is never linked, only reported.
        let theirs = DeviceNode {
            path: "/dev/nvidia0".into(),
            minor: 7,
            ..node("/dev/nvidia0", 1, 7)
        };
        let c = ContainerView {
            devices: vec![theirs],
            ..gpu_ctr("b", &format!("{SCOPE}b"), &[])
        };
        assert_eq!(e.check_systemd_device_links(&c, &[]), vec!["/dev/nvidia0"]);
        assert!(!t.path().join("dev/char/1:7").exists());
    }

    #[test]
    fn with_links_off_the_node_is_at_risk_until_someone_makes_the_link() {
        let config = Config {
            create_dev_char_links: false,
            ..Config::default()
        };
        let (t, mut e, metrics, health, gpu) = engine_on_root(config);
        let c = gpu_ctr("a", &format!("{SCOPE}a"), &[]);
        assert_eq!(
            e.check_systemd_device_links(&c, std::slice::from_ref(&gpu)),
            vec!["/dev/nvidia0"]
        );
        assert!(!t.path().join("dev/char").exists(), "nothing written");
        let text = metrics.encode();
        assert!(
            text.contains("nri_align_systemd_devices_at_risk 1"),
            "{text}"
        );
        assert!(
            !text.contains("nri_align_systemd_device_links_created_total 1"),
            "{text}"
        );
        let degraded = health.degraded();
        assert_eq!(degraded.len(), 1, "{degraded:?}");
        assert!(
            degraded[0].starts_with("devices: 1 device node(s)"),
            "{degraded:?}"
        );
        assert!(degraded[0].ends_with(": /dev/nvidia0"), "{degraded:?}");
        // The operator runs nvidia-ctk: the next creation finds the link and clears both.
        std::fs::create_dir_all(t.path().join("dev/char")).expect("mkdir");
        std::os::unix::fs::symlink("../nvidia0", t.path().join("dev/char/1:3")).expect("link");
        let c = gpu_ctr("b", &format!("{SCOPE}b"), &[]);
        assert!(e.check_systemd_device_links(&c, &[gpu]).is_empty());
        assert!(metrics
            .encode()
            .contains("nri_align_systemd_devices_at_risk 0"));
        assert!(health.degraded().is_empty());
    }

    #[test]
    fn a_link_that_cannot_be_made_is_reported_at_risk() {
        let (t, mut e, metrics, health, gpu) = engine_on_root(Config::default());
        // A file where /dev/char should be: the write fails as on a read-only /dev.
        std::fs::write(t.path().join("dev/char"), "").expect("file");
        let c = gpu_ctr("a", &format!("{SCOPE}a"), &[]);
        assert_eq!(
            e.check_systemd_device_links(&c, &[gpu]),
            vec!["/dev/nvidia0"]
        );
        let text = metrics.encode();
        assert!(
            text.contains("nri_align_systemd_devices_at_risk 1"),
            "{text}"
        );
        assert!(
            text.contains("nri_align_systemd_device_link_missing_total{device=\"/dev/nvidia0\"} 1"),
            "{text}"
        );
        assert_eq!(health.degraded().len(), 1);
    }
}
