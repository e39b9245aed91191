//! A GPU that nri-align hands out keeps working under runc's systemd cgroup driver after
//! `systemctl daemon-reload` and a runtime restart, though its node has neither a
//! `/sys/dev/char` entry (the guest's stand-ins are made with mknod, as NVIDIA's driver makes
//! its nodes, so the kernel registers none) nor, at the start, a `/dev/char` link: nri-align
//! makes the link the scope's `DeviceAllow=` needs. With `create_dev_char_links: false` the
//! same reload takes the GPU away, which shows the test would see the loss.

use std::path::{Path, PathBuf};
use std::time::Duration;

use test_support::e2e::ContainerSpec;

use crate::guest::{guest, Guest, Ids, PLUGIN_CONFIG};
use crate::kubepods::Qos;
use crate::unit;

/// The NVIDIA character major.
const NVIDIA_MAJOR: u32 = 195;
/// `/dev/nvidiactl`'s minor: handed out with any GPU.
const CTL_MINOR: u32 = 255;

fn char_link(minor: u32) -> PathBuf {
    PathBuf::from(format!("/dev/char/{NVIDIA_MAJOR}:{minor}"))
}

/// Takes away the `/dev/char` links hack/vm/guest-run made for the GPU stand-ins (as
/// `nvidia-ctk` would have), and puts back on drop those nri-align did not make meanwhile,
/// so the other tests find the guest as it was.
struct NoLinks(Vec<(PathBuf, PathBuf)>);

impl NoLinks {
    fn take(minors: impl Iterator<Item = u32>) -> Self {
        let mut taken = Vec::new();
        for minor in minors {
            let link = char_link(minor);
            if let Ok(target) = std::fs::read_link(&link) {
                std::fs::remove_file(&link)
                    .unwrap_or_else(|e| panic!("remove {}: {e}", link.display()));
                taken.push((link, target));
            }
        }
        NoLinks(taken)
    }
}

impl Drop for NoLinks {
    fn drop(&mut self) {
        for (link, target) in &self.0 {
            if std::fs::symlink_metadata(link).is_err() {
                let _ = std::os::unix::fs::symlink(target, link);
            }
        }
    }
}

/// Writes the unit's config back to the suite's on drop (the control changes it).
struct ConfigBack;

impl Drop for ConfigBack {
    fn drop(&mut self) {
        let _ = unit::write_config(PLUGIN_CONFIG);
        let _ = unit::reload();
    }
}

/// Lines of the unit's journal containing `text`.
fn journal_count(text: &str) -> usize {
    unit::journal().matches(text).count()
}

/// A Burstable pod asking nri-align for one GPU by annotation (no device node in the spec:
/// every GPU node the container gets is nri-align's), and its container, which may mknod
/// (the probe). Returns the container's id and its GPU's minor.
fn gpu_from_nri_align(g: &Guest, name: &str) -> (String, u32) {
    let pod = g.pod(name, Qos::Burstable, &[("gpus", "1")]);
    let spec = ContainerSpec::new("cuda")
        .capability("MKNOD")
        .cpu_millis(500, None)
        .memory(64 << 20);
    let id = g.run(&pod, &spec);
    let s = g.seen(&id);
    assert_eq!(
        s.gpu_usable.len(),
        1,
        "{name}: nri-align should have handed out exactly one GPU node\n  seen: {s}"
    );
    let minor = *s.gpu_usable.iter().next().expect("one GPU");
    (id, minor)
}

/// The GPU `minor` is what container `id` can use, a fresh node of it opens, and GPU
/// `other`'s does not.
fn assert_gpu_kept(g: &Guest, id: &str, minor: u32, other: u32, when: &str) {
    let s = g.seen(id);
    assert_eq!(
        s.gpu_usable,
        Ids::from([minor]),
        "{when}: /dev/nvidia{minor} must stay usable, and only it\n  seen: {s}\n  scope: {}",
        g.scope_devices(id)
    );
    assert_eq!(
        g.may_open_char(id, minor),
        Ok(true),
        "{when}: a fresh node {NVIDIA_MAJOR}:{minor} must open\n  scope: {}",
        g.scope_devices(id)
    );
    assert_eq!(
        g.may_open_char(id, other),
        Ok(false),
        "{when}: GPU {other} must stay denied"
    );
}

fn daemon_reload() {
    unit::systemctl(&["daemon-reload"]).expect("systemctl daemon-reload");
    // systemd re-applies every unit's cgroup settings after the reload returns.
    std::thread::sleep(Duration::from_secs(2));
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario in the multi-NUMA guest, step by step: each step checks what the steps before left in the guest"
)]
fn t6_a_gpu_nri_align_hands_out_survives_daemon_reload_and_a_runtime_restart() {
    let Some(g) = guest("t6") else { return };
    if !matches!(g.plugin, unit::Daemon::Unit { .. }) {
        eprintln!("SKIP t6: the systemd cgroup driver and the unit run in the systemd guest only");
        return;
    }
    let f = &g.facts;
    let minors: Vec<u32> = f.gpu_node.keys().copied().collect();
    let _restore = NoLinks::take(minors.iter().copied().chain([CTL_MINOR]));
    // Nothing but nri-align may give systemd a way to name the GPUs, or this passes for the
    // wrong reason.
    for &m in minors.iter().chain([&CTL_MINOR]) {
        let sys = format!("/sys/dev/char/{NVIDIA_MAJOR}:{m}");
        assert!(
            !Path::new(&sys).exists(),
            "{sys} exists: the stand-in is registered"
        );
        assert!(
            std::fs::symlink_metadata(char_link(m)).is_err(),
            "{} exists at the start",
            char_link(m).display()
        );
    }

    let (id, minor) = gpu_from_nri_align(g, "sd-gpu");
    let other = *minors.iter().find(|m| **m != minor).expect("a second GPU");
    assert_eq!(
        std::fs::read_link(char_link(minor)).ok(),
        Some(PathBuf::from(format!("../nvidia{minor}"))),
        "nri-align did not link /dev/nvidia{minor}; journal:\n{}",
        unit::journal()
    );
    let scope = g.scope_devices(&id);
    assert!(
        scope.contains(&format!("/dev/char/{NVIDIA_MAJOR}:{minor}")),
        "the scope's DeviceAllow= lacks the GPU: {scope}"
    );
    eprintln!("sd-gpu holds /dev/nvidia{minor}; scope: {scope}");
    assert_gpu_kept(g, &id, minor, other, "at start");

    daemon_reload();
    assert_gpu_kept(g, &id, minor, other, "after systemctl daemon-reload");

    // The runtime restarts; nri-align registers again and synchronizes (its updates reach
    // the scope through runc update, which re-applies the device policy too).
    let registered = journal_count("configured by runtime");
    g.ctrd.restart().expect("restart the runtime");
    assert!(
        Guest::wait(180, || journal_count("configured by runtime") > registered),
        "nri-align did not register with the restarted runtime:\n{}",
        unit::journal()
    );
    assert_gpu_kept(g, &id, minor, other, "after a runtime restart");
    daemon_reload();
    assert_gpu_kept(
        g,
        &id,
        minor,
        other,
        "after a runtime restart and a daemon-reload",
    );

    // The control: with the key off the next GPU gets no link, and the same reload takes it.
    let _config_back = ConfigBack;
    let reloaded = journal_count("configuration reloaded");
    unit::write_config(&format!("{PLUGIN_CONFIG}create_dev_char_links: false\n"))
        .expect("write the config");
    unit::reload().expect("systemctl reload");
    assert!(
        Guest::wait(60, || journal_count("configuration reloaded") > reloaded),
        "the config with create_dev_char_links: false was not applied:\n{}",
        unit::journal()
    );
    let (id2, minor2) = gpu_from_nri_align(g, "sd-gpu-unlinked");
    assert!(
        std::fs::symlink_metadata(char_link(minor2)).is_err(),
        "a link to /dev/nvidia{minor2} was made with create_dev_char_links: false"
    );
    assert!(
        unit::journal().contains(&format!(
            "/dev/nvidia{minor2} ({NVIDIA_MAJOR}:{minor2}) has no"
        )),
        "no warning about /dev/nvidia{minor2}:\n{}",
        unit::journal()
    );
    assert_eq!(g.may_open_char(&id2, minor2), Ok(true), "before the reload");
    daemon_reload();
    assert_eq!(
        g.may_open_char(&id2, minor2),
        Ok(false),
        "without the link the daemon-reload should have taken /dev/nvidia{minor2}: scope {}",
        g.scope_devices(&id2)
    );
    assert_gpu_kept(
        g,
        &id,
        minor,
        other,
        "the linked GPU, after the control's reload",
    );
}
