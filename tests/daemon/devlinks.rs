//! `/dev/char` links through the `nri-align run` binary under a fake host root (an emulated
//! host with real GPU device nodes made by mknod, and no `/dev/char` at all): a GPU handed to a
//! container in a systemd scope gets its link before the answer; with `create_dev_char_links:
//! false` none is made and the node is at risk: the warning, the gauge and `/readyz`'s
//! `devices` line (readiness stays 200).

use std::path::{Path, PathBuf};
use std::process::Command;

use test_support::daemon::{burstable, connect, create_in, pod};
use test_support::e2e::{self, metric, probe, scrape, write_private, PluginProcess};
use test_support::nri_sim::RuntimeSide;
use tokio::net::UnixListener;

/// An emulated 4-GPU host under `root` with `/dev/nvidiaN` (195:N) and `/dev/nvidiactl`.
fn gpu_root(root: &Path) {
    let out = Command::new(e2e::nri_align_bin())
        .args(["emulate", "--host", "pcie-4gpu", "--out"])
        .arg(root)
        .output()
        .expect("emulate");
    assert!(out.status.success(), "{out:?}");
    let dev = root.join("dev");
    std::fs::create_dir_all(&dev).expect("mkdir dev");
    for (name, minor) in [
        ("nvidia0", 0),
        ("nvidia1", 1),
        ("nvidia2", 2),
        ("nvidia3", 3),
        ("nvidiactl", 255),
    ] {
        nix::sys::stat::mknod(
            &dev.join(name),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(195, minor),
        )
        .unwrap_or_else(|e| panic!("mknod {name}: {e}"));
    }
}

fn start(dir: &Path, root: &Path, links: bool) -> PluginProcess {
    let config = dir.join("c.yaml");
    write_private(
        &config,
        &format!(
            "metrics_address: \"127.0.0.1:0\"\nallow_device_annotations: true\n\
             create_dev_char_links: {links}\n"
        ),
    )
    .expect("config");
    let mut cmd = Command::new(e2e::nri_align_bin());
    cmd.arg("run")
        .arg("--socket")
        .arg(dir.join("nri.sock"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--config")
        .arg(&config)
        .arg("--host-root")
        .arg(root)
        .arg("--nvml-lib")
        .arg(e2e::EmulatedHost::nvml_lib().expect("fake NVML"))
        .env("FAKE_NVML_FIXTURE", root.join("nvml.json"))
        .env("RUST_LOG", "info");
    PluginProcess::spawn_logged(cmd, dir.join("run.log")).expect("start")
}

/// Creates a container asking for one GPU by annotation in a systemd scope (the cgroups path
/// runc's systemd driver takes); returns the minor of the GPU node it was given.
async fn create_gpu_container(rt: &RuntimeSide, id: &str) -> i64 {
    let mut p = pod();
    p.annotations
        .insert("gpus.nri-align.io/pod".into(), "1".into());
    let mut c = burstable(id);
    c.linux.mut_or_insert_default().cgroups_path =
        format!("kubepods-burstable-poduid_full.slice:cri-containerd:{id}");
    let reply = create_in(rt, p, c).await;
    let gpus: Vec<i64> = reply
        .adjust
        .linux
        .devices
        .iter()
        .filter(|d| {
            d.path
                .strip_prefix("/dev/nvidia")
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .map(|d| d.minor)
        .collect();
    assert_eq!(
        gpus.len(),
        1,
        "one GPU node added: {:?}",
        reply.adjust.linux.devices
    );
    gpus[0]
}

fn link(root: &Path, minor: i64) -> PathBuf {
    root.join(format!("dev/char/195:{minor}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_handed_out_in_a_systemd_scope_gets_its_dev_char_link() {
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().join("root");
    gpu_root(&root);
    let listener = UnixListener::bind(dir.path().join("nri.sock")).expect("runtime socket");
    let mut d = start(dir.path(), &root, true);
    let rt = connect(&listener).await;
    let minor = create_gpu_container(&rt, "gpu-a").await;
    assert_eq!(
        std::fs::read_link(link(&root, minor)).ok(),
        Some(PathBuf::from(format!("../nvidia{minor}"))),
        "{}",
        d.output()
    );
    // The control nodes go with any GPU: linked too.
    assert_eq!(
        std::fs::read_link(link(&root, 255)).ok(),
        Some(PathBuf::from("../nvidiactl"))
    );
    let addr = d.metrics_address().expect("metrics");
    let m = scrape(&addr).expect("metrics");
    assert_eq!(
        metric(&m, "nri_align_systemd_device_links_created_total"),
        Some(2.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "nri_align_systemd_devices_at_risk"),
        Some(0.0),
        "{m}"
    );
    let (code, body) = probe(&addr, "/readyz").expect("readyz");
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains("degraded: devices"), "{body}");
    d.stop(nix::sys::signal::Signal::SIGTERM);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_links_off_the_gpu_is_reported_at_risk_and_readyz_says_so() {
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().join("root");
    gpu_root(&root);
    let listener = UnixListener::bind(dir.path().join("nri.sock")).expect("runtime socket");
    let mut d = start(dir.path(), &root, false);
    let rt = connect(&listener).await;
    let minor = create_gpu_container(&rt, "gpu-b").await;
    assert!(
        !root.join("dev/char").exists(),
        "nothing written under /dev"
    );
    let addr = d.metrics_address().expect("metrics");
    let m = scrape(&addr).expect("metrics");
    assert_eq!(
        metric(&m, "nri_align_systemd_devices_at_risk"),
        Some(2.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            &format!(
                "nri_align_systemd_device_link_missing_total{{device=\"/dev/nvidia{minor}\"}}"
            )
        ),
        Some(1.0),
        "{m}"
    );
    let (code, body) = probe(&addr, "/readyz").expect("readyz");
    assert_eq!(code, 200, "at risk is degraded, not unready: {body}");
    assert!(
        body.lines()
            .any(|l| l.starts_with("degraded: devices: 2 device node(s)")
                && l.contains(&format!("/dev/nvidia{minor}"))),
        "{body}"
    );
    let out = d.output();
    assert_eq!(
        out.matches(&format!(
            "/dev/nvidia{minor} (195:{minor}) has no /dev/char/195:{minor} link"
        ))
        .count(),
        1,
        "one warning for the device:\n{out}"
    );
    assert!(out.contains("link (create_dev_char_links is off)"), "{out}");
    d.stop(nix::sys::signal::Signal::SIGTERM);
}
