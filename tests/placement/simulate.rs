//! `simulate`: workload parsing, replay through both strategies, the JSON contract, and the
//! command line end to end.

use std::process::Command;
use std::sync::Arc;

use nri_align::placement::policy::GpuMode;
use nri_align::placement::PlacementConfig;
use nri_align::simulate::{replay, replay_with, GpuChoice, Strategy, Workload};
use nri_align::topology::testing;

const DGX1: &str = r#"
pods:
  - name: small-a
    containers: [{name: t, cpu: "4", memory: 16Gi, gpus: 2}]
  - name: small-b
    containers: [{name: t, cpu: "4", memory: 16Gi, gpus: 2}]
  - name: big
    annotations: {policy.nri-align.io/pod: single-numa-node}
    containers:
      - {name: t, cpu: "8", memory: 64Gi, gpus: 4, nics: 2}
      - {name: side, cpu: 250m, cpu_limit: "1", memory: 1Gi}
"#;

#[test]
fn nri_align_keeps_a_quad_whole_and_a_kubelet_without_preferred_allocation_is_blind_to_links() {
    let wl = Workload::parse(DGX1).expect("workload");
    let topo = Arc::new(testing::shipped("dgx1-v100"));
    let ours = replay(
        Arc::clone(&topo),
        PlacementConfig::default(),
        &wl,
        Strategy::NriAlign,
    )
    .expect("replay");
    assert_eq!(ours.summary.pods_admitted, 3);
    assert_eq!(ours.summary.containers_aligned, 4);
    let big = ours
        .decisions
        .iter()
        .find(|d| d.pod == "default/big" && d.container == "t")
        .expect("big");
    assert!(big.admitted && big.aligned, "{big:?}");
    assert_eq!(big.gpus.len(), 4);
    // Node 0's quad splits into two NV2 pairs (230 + 230). Greedy would take the best single
    // pair (NV2 under one switch, 250) and strand an NV1 pair (150) for the second pod.
    for pair in &ours.decisions[..2] {
        assert_eq!(pair.gpu_link_score, 230, "{pair:?}");
        assert_eq!(pair.mems, "0", "{pair:?}");
    }
    // The NVIDIA device plugin's preferred allocation (the default) picks a best-linked pair
    // within the hint, as nri-align does for the first pod.
    let preferred = replay(
        Arc::clone(&topo),
        PlacementConfig::default(),
        &wl,
        Strategy::Kubelet,
    )
    .expect("replay");
    assert!(
        preferred.decisions[0].gpu_link_score > 150,
        "{:?}",
        preferred.decisions[0]
    );
    let theirs = replay_with(
        topo,
        PlacementConfig::default(),
        &wl,
        Strategy::Kubelet,
        GpuChoice::Lowest,
    )
    .expect("replay");
    assert_eq!(
        theirs.decisions[0].gpus,
        vec![
            testing::shipped("dgx1-v100").gpus[0].pci_bus_id.clone(),
            testing::shipped("dgx1-v100").gpus[1].pci_bus_id.clone()
        ]
    );
    assert_eq!(
        theirs.decisions[0].gpu_link_score, 150,
        "lowest index pair 0-1: one NVLink"
    );
    assert_eq!(ours.steps.len(), 3);
    assert_eq!(
        ours.steps[2]
            .free
            .iter()
            .map(|f| f.gpus.len())
            .sum::<usize>(),
        0
    );
}

#[test]
fn rejected_pods_roll_back_and_removals_free_capacity() {
    let wl = Workload::parse(
        r#"{"pods": [
              {"name": "a", "annotations": {"policy.nri-align.io/pod": "single-numa-node"},
               "containers": [{"name": "x", "cpu": 10}, {"name": "y", "cpu": 10}]},
              {"name": "b", "containers": [{"name": "x", "cpu": 16}]}],
            "events": [{"add": "a"}, {"add": "b"}, {"remove": "a"}, {"add": "b"}]}"#,
    )
    .expect("json workload");
    let r = replay(
        Arc::new(testing::two_node()),
        PlacementConfig::default(),
        &wl,
        Strategy::NriAlign,
    )
    .expect("replay");
    // a: x fits node 0, y fits node 1 (each on one node): admitted.
    assert!(r.decisions[0].admitted && r.decisions[1].admitted);
    // b needs 16 but only 6+6 are free: rejected.
    assert!(!r.decisions[2].admitted);
    assert!(
        r.decisions[2].reason.contains("not enough free cpu")
            || r.decisions[2].reason.contains("cannot align"),
        "{}",
        r.decisions[2].reason
    );
    assert_eq!(
        r.steps[1].free.iter().map(|f| f.cpus.len()).sum::<usize>(),
        12,
        "nothing of b stays"
    );
    // Once a is gone, b fits one node.
    assert!(r.decisions[3].admitted, "{:?}", r.decisions[3]);
    assert_eq!(
        r.steps[3].free.iter().map(|f| f.cpus.len()).sum::<usize>(),
        16
    );
    assert_eq!((r.summary.pods_admitted, r.summary.pods_rejected), (2, 1));
}

#[test]
fn bad_workloads_and_the_kubelet_node_limit_are_errors() {
    let e =
        Workload::parse("pods: [{name: a, containers: [{name: x, cpus: 2}]}]").expect_err("typo");
    assert!(e.to_string().contains("cpus"), "{e}");
    let wl =
        Workload::parse("pods: [{name: a, containers: [{name: x, cpu: lots}]}]").expect("parses");
    let e = replay(
        Arc::new(testing::two_node()),
        PlacementConfig::default(),
        &wl,
        Strategy::NriAlign,
    )
    .expect_err("bad cpu");
    assert!(e.to_string().contains("invalid cpu"), "{e}");
    let wl = Workload::parse("pods: []\nevents: [{add: ghost}]").expect("parses");
    let e = replay(
        Arc::new(testing::two_node()),
        PlacementConfig::default(),
        &wl,
        Strategy::NriAlign,
    )
    .expect_err("ghost");
    assert!(e.to_string().contains("no pod named \"ghost\""), "{e}");
    let wl = Workload::parse("pods: []").expect("parses");
    let e = replay(
        Arc::new(testing::shipped("numa16-1024")),
        PlacementConfig::default(),
        &wl,
        Strategy::Kubelet,
    )
    .expect_err("16 nodes");
    assert!(e.to_string().contains("max-allowable-numa-nodes"), "{e}");
}

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
fn a_pod_whose_second_container_is_refused_is_rolled_back() {
    let wl = Workload::parse(
        "pods:\n  - name: a\n    annotations: {policy.nri-align.io/pod: single-numa-node, scope.nri-align.io/pod: pod}\n    containers:\n      - {name: x, cpu: \"12\"}\n      - {name: y, cpu: \"8\"}\n",
    )
    .expect("workload");
    let r = replay(
        Arc::new(testing::two_node()),
        PlacementConfig::default(),
        &wl,
        Strategy::NriAlign,
    )
    .expect("replay");
    assert_eq!(r.decisions.len(), 2);
    assert!(!r.decisions[0].admitted);
    assert!(
        r.decisions[0].reason.contains("rolled back"),
        "{}",
        r.decisions[0].reason
    );
    assert!(
        r.decisions[1].reason.contains("the pod's NUMA node"),
        "{}",
        r.decisions[1].reason
    );
    assert_eq!(
        r.steps[0].free.iter().map(|f| f.cpus.len()).sum::<usize>(),
        32,
        "x was released"
    );
    assert_eq!(r.summary.pods_rejected, 1);
}

#[test]
fn best_fit_admits_what_lowest_index_first_strands() {
    // 31 of the 32 CPUs: one always stays in the shared pool.
    let wl = Workload::parse(
        "pods:\n  - {name: a, containers: [{name: c, cpu: \"10\"}]}\n  - {name: b, containers: [{name: c, cpu: \"12\"}]}\n  - {name: c, containers: [{name: c, cpu: \"4\"}]}\n  - {name: d, containers: [{name: c, cpu: \"5\"}]}\n",
    )
    .expect("workload");
    let cfg = PlacementConfig {
        policy: nri_align::placement::Policy::SingleNumaNode,
        ..PlacementConfig::default()
    };
    let topo = Arc::new(testing::two_node());
    let ours = replay(Arc::clone(&topo), cfg.clone(), &wl, Strategy::NriAlign).expect("replay");
    assert_eq!(ours.summary.pods_admitted, 4, "{:#?}", ours.decisions);
    let theirs = replay(topo, cfg, &wl, Strategy::Kubelet).expect("replay");
    assert_eq!(theirs.summary.pods_admitted, 3);
    assert!(
        theirs.decisions[3].reason.contains("TopologyAffinityError"),
        "{}",
        theirs.decisions[3].reason
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

/// A workload carries a scheduler's choice as the scheduler annotates the pod: the replay
/// places it there, refuses a malformed one and one whose CPUs another pod holds.
#[test]
fn a_workload_carries_scheduler_choices() {
    let wl = Workload::parse(
        r#"
pods:
  - name: koord
    annotations:
      scheduling.koordinator.sh/resource-status: '{"numaNodeResources":[{"node":3}]}'
    containers: [{name: c, cpu: "2", memory: 2Gi}]
  - name: exact
    annotations:
      scheduling.koordinator.sh/resource-status: '{"cpuset":"20-21"}'
    containers: [{name: c, cpu: "2", memory: 1Gi}]
  - name: late
    annotations:
      scheduling.koordinator.sh/resource-status: '{"cpuset":"21-22"}'
    containers: [{name: c, cpu: "2", memory: 1Gi}]
  - name: bad
    annotations:
      topology.crane.io/topology-result: '[{"name":"numa1","type":"Node"}]'
    containers: [{name: c, cpu: "1", memory: 1Gi}]
"#,
    )
    .expect("workload");
    let topo = Arc::new(testing::shipped("epyc-nps4"));
    let report = replay(topo, PlacementConfig::default(), &wl, Strategy::NriAlign).expect("replay");
    let d = |pod: &str| {
        report
            .decisions
            .iter()
            .find(|d| d.pod.ends_with(pod))
            .unwrap_or_else(|| panic!("{pod}: {:?}", report.decisions))
    };
    assert!(
        d("/koord").admitted && d("/koord").mems == "3",
        "{:?}",
        d("/koord")
    );
    assert!(
        d("/koord").reason.starts_with("koordinator's choice"),
        "{:?}",
        d("/koord")
    );
    assert_eq!(d("/exact").cpus, "20-21");
    assert!(!d("/late").admitted);
    assert!(
        d("/late").reason.contains("cpu 21 is held"),
        "{:?}",
        d("/late")
    );
    assert!(!d("/bad").admitted);
    assert!(d("/bad").reason.contains("node<N>"), "{:?}", d("/bad"));
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
