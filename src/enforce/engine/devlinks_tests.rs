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
    assert_eq!(e.device_links.warned.len(), 1, "one warning per device");
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
    crate::host::testing::char_node(t.path(), "dev/nvidia0", 1, 3);
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

#[test]
fn the_list_and_the_series_keep_only_devices_of_live_containers() {
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(crate::metrics::Health::default());
    let mut e = Engine::new(
        FakePlacer::new(),
        Config::default(),
        None,
        Some(metrics.clone()),
        Box::new(OneLink),
    );
    e.set_health(health.clone());
    let pod = PodView {
        id: "sb".into(),
        namespace: "default".into(),
        ..Default::default()
    };
    // Each container carries its own device without a link (a VFIO group of its own).
    for i in 1..=50 {
        let c = ContainerView {
            devices: vec![node(&format!("/dev/vfio/{i}"), 240, i)],
            ..gpu_ctr(&format!("c{i}"), &format!("{SCOPE}c{i}"), &[])
        };
        e.create_container(&pod, &c).expect("create");
    }
    assert!(metrics
        .encode()
        .contains("nri_align_systemd_devices_at_risk 50"));
    for i in 1..50 {
        e.release_container(&format!("c{i}"));
    }
    let text = metrics.encode();
    let series = text
        .lines()
        .filter(|l| l.starts_with("nri_align_systemd_device_link_missing_total{"))
        .collect::<Vec<_>>();
    assert_eq!(
        series,
        vec!["nri_align_systemd_device_link_missing_total{device=\"/dev/vfio/50\"} 1"],
        "{text}"
    );
    assert!(
        text.contains("nri_align_systemd_devices_at_risk 1"),
        "{text}"
    );
    let degraded = health.degraded();
    assert_eq!(degraded.len(), 1, "{degraded:?}");
    assert!(degraded[0].ends_with(": /dev/vfio/50"), "{degraded:?}");
    assert_eq!(e.device_links.warned.len(), 1);
    // The last one gone: nothing left to say.
    e.release_container("c50");
    let text = metrics.encode();
    assert!(!text.contains("/dev/vfio/"), "{text}");
    assert!(
        text.contains("nri_align_systemd_devices_at_risk 0"),
        "{text}"
    );
    assert!(health.degraded().is_empty());
}
