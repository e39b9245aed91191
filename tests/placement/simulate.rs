//! `nri-align simulate` end to end: the JSON contract, the headers and the tables of the
//! command line (the replay itself is tested by the simulate crate, `crates/simulate/tests/`).

use std::process::Command;
use std::sync::Arc;

use nri_align::placement::policy::GpuMode;
use nri_align::placement::PlacementConfig;
use nri_align::simulate::{replay_with, GpuChoice, Strategy, Workload};
use nri_align::topology::testing;

const DGX1: &str = include_str!("../fixtures/workloads/dgx1-mixed.yaml");

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "command-line checks of `nri-align simulate` on one workload and configuration: the JSON contract, the note without reserved CPUs, the refused flags"
)]
fn command_line_json_has_the_contract_fields() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wl = dir.path().join("w.yaml");
    std::fs::write(&wl, DGX1).expect("write");
    let cfg = dir.path().join("c.yaml");
    // `gpu_mode: remap`, as `PlacementConfig::default()` has it: the replay places the
    // workload's GPU counts itself (the daemon's default, `keep`, takes the device plugin's).
    std::fs::write(
        &cfg,
        "policy: restricted\nreserved_cpus: \"0-1\"\ngpu_mode: remap\n",
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args(["simulate", "--host", "dgx1-v100", "--json", "--workload"])
        .arg(&wl)
        .arg("--config")
        .arg(&cfg)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let d = &v["decisions"][0];
    for k in [
        "pod",
        "container",
        "admitted",
        "cpus",
        "mems",
        "gpus",
        "nics",
        "reason",
    ] {
        assert!(d.get(k).is_some(), "missing {k} in {d}");
    }
    assert!(
        !d["cpus"]
            .as_str()
            .expect("cpus")
            .split(['-', ','])
            .any(|c| c == "0" || c == "1"),
        "reserved cpus used: {d}"
    );
    assert_eq!(v["summary"]["pods_admitted"], 3);
    let text = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args([
            "simulate",
            "--host",
            "dgx1-v100",
            "--strategy",
            "kubelet",
            "--workload",
        ])
        .arg(&wl)
        .output()
        .expect("run");
    let s = String::from_utf8_lossy(&text.stdout);
    assert!(
        s.contains("summary (kubelet)") && s.contains("free: node 0"),
        "{s}"
    );
    // No reserved CPUs: a kubelet with the static policy would not start; the replay says so
    // and names the first core (CPUs 0 and 40 on the DGX-1V description).
    let note = String::from_utf8_lossy(&text.stderr);
    assert!(
        note.contains("refuses to start without kube-reserved + system-reserved CPU")
            && note.contains("\"0,40\""),
        "{note}"
    );
    let with_reserved = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args(["simulate", "--host", "dgx1-v100", "--strategy", "kubelet"])
        .arg("--config")
        .arg(&cfg)
        .arg("--workload")
        .arg(&wl)
        .output()
        .expect("run");
    assert!(with_reserved.status.success());
    assert!(with_reserved.stderr.is_empty(), "{with_reserved:?}");
    let bad = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args([
            "simulate",
            "--host",
            "dgx1-v100",
            "--strategy",
            "fast",
            "--workload",
        ])
        .arg(&wl)
        .output()
        .expect("run");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("[possible values: nri-align, kubelet]"));
    let bad = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args([
            "simulate",
            "--host",
            "dgx1-v100",
            "--kubelet-gpu-choice",
            "best",
            "--workload",
        ])
        .arg(&wl)
        .output()
        .expect("run");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("[possible values: preferred, lowest]"));
}

#[test]
fn churn_prints_one_row_per_strategy_and_the_optimum() {
    let out = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args([
            "simulate", "--churn", "--host", "dgx-h100", "--seeds", "1", "--pods", "20",
        ])
        .output()
        .expect("run");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for label in [
        "| nri-align, best-fit |",
        "| nri-align, most-allocated |",
        "| nri-align, least-allocated |",
        "| kubelet + NVIDIA plugin |",
        "| kubelet, lowest-index GPUs |",
        "| offline optimum |",
    ] {
        assert!(s.contains(label), "{s}");
    }
    // Each strategy as a fraction of the optimum; the optimum is 100 % of itself.
    assert!(s.contains("| of the optimum |"), "{s}");
    assert!(
        s.contains("| offline optimum | ") && s.contains("/ 20 | 100.0 % | - |"),
        "{s}"
    );
    assert!(!s.contains("not proven"), "{s}");
    assert!(s.contains("/ 20 |"), "{s}");
    assert!(s.contains("| refused, fit if moved |"), "{s}");
    assert!(!s.contains("search bound"), "{s}");
    // The kubelet's RDMA NICs: the shared plugin unless told; the plugin named in the heading.
    assert!(
        s.contains("RDMA shared device plugin (rdmaHcaMax 63"),
        "{s}"
    );
    let run = |plugin: &str| {
        Command::new(env!("CARGO_BIN_EXE_nri-align"))
            .args([
                "simulate",
                "--churn",
                "--host",
                "dgx1-v100",
                "--seeds",
                "1",
                "--pods",
                "10",
                "--kubelet-nic-plugin",
                plugin,
                "--kubelet-sriov-vfs",
                "4",
            ])
            .output()
            .expect("run")
    };
    let sriov = run("sriov");
    assert!(sriov.status.success());
    assert!(String::from_utf8_lossy(&sriov.stdout).contains("SR-IOV device plugin (4 VFs per"));
    let bad = run("vf");
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("[possible values: shared, sriov, per-nic]")
    );
}

#[test]
fn command_line_reads_topology_json_and_reports_missing_sources() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = dir.path().join("host.json");
    std::fs::write(
        &host,
        serde_json::to_string(&testing::shipped("epyc-nps4")).expect("json"),
    )
    .expect("write");
    let wl = dir.path().join("w.yaml");
    std::fs::write(
        &wl,
        "pods: [{name: a, containers: [{name: c, cpu: \"40\", memory: 8Gi}]}]",
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args(["simulate", "--json", "--host"])
        .arg(&host)
        .arg("--workload")
        .arg(&wl)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["decisions"][0]["mems"], "0-1", "{v}");
    let out = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args(["simulate", "--hwloc-xml", "/nonexistent.xml", "--workload"])
        .arg(&wl)
        .output()
        .expect("run");
    assert!(!out.status.success());
    // Names the file whether or not this build has the hwloc importer.
    assert!(String::from_utf8_lossy(&out.stderr).contains("nonexistent.xml"));
}

/// Under keep both strategies start from the same device plugin: on the DGX-1V training
/// workload nri-align, handed the NVIDIA plugin's preferred GPUs (no Topology Manager hint),
/// scores the links as the kubelet does within its hint (1580 each), where lowest-index GPUs
/// left it 1520; `--device-plugin lowest` hands both the lowest indices, and the header says
/// which mode and which plugin produced the figures.
#[test]
fn keep_hands_both_strategies_the_same_device_plugins_gpus() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/workloads/dgx1-training.yaml"
    ))
    .expect("example");
    let wl = Workload::parse(&text).expect("workload");
    let topo = Arc::new(testing::shipped("dgx1-v100"));
    let keep = PlacementConfig {
        gpu_mode: GpuMode::Keep,
        ..PlacementConfig::default()
    };
    let run = |strategy, choice| {
        replay_with(Arc::clone(&topo), keep.clone(), &wl, strategy, choice).expect("replay")
    };
    let ours = run(Strategy::NriAlign, GpuChoice::Preferred);
    let theirs = run(Strategy::Kubelet, GpuChoice::Preferred);
    assert_eq!(ours.summary.gpu_link_score, 1580, "{:?}", ours.summary);
    assert_eq!(theirs.summary.gpu_link_score, 1580, "{:?}", theirs.summary);
    assert_eq!(ours.summary.gpu_mode.as_deref(), Some("keep"));
    assert_eq!(ours.summary.device_plugin, "preferred");
    assert_eq!(theirs.summary.gpu_mode, None);
    let lowest = run(Strategy::NriAlign, GpuChoice::Lowest);
    assert_eq!(lowest.summary.gpu_link_score, 1520, "{:?}", lowest.summary);
    assert_eq!(lowest.summary.device_plugin, "lowest");
    let out = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args([
            "simulate",
            "--host",
            "dgx1-v100",
            "--device-plugin",
            "lowest",
        ])
        .args(["--gpu-mode", "remap", "--workload"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/workloads/dgx1-training.yaml"
        ))
        .output()
        .expect("run");
    let s = String::from_utf8_lossy(&out.stdout);
    let first = s.lines().next().unwrap_or_default();
    assert!(
        first.contains("gpu_mode: remap") && first.contains("device plugin: lowest"),
        "{s}"
    );
}

/// `simulate --churn` replays nri-align under the daemon's default `gpu_mode` unless told: the
/// simulate crate's copy of it is the configuration's.
#[test]
fn churn_runs_under_the_daemons_default_gpu_mode() {
    assert_eq!(
        nri_align::simulate::churn::DAEMON_GPU_MODE,
        nri_align::config::DEFAULT_GPU_MODE
    );
    assert_eq!(
        nri_align::simulate::churn::ChurnSpec::default().gpu_mode,
        nri_align::config::DEFAULT_GPU_MODE
    );
}
