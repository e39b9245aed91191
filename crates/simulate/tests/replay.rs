//! `simulate` as a library: workload parsing, replay through both strategies, rollbacks,
//! errors and scheduler choices (the command line end to end is tested by the nri-align
//! crate, `tests/placement/simulate.rs`).

use std::sync::Arc;

use align_core::placement::PlacementConfig;
use align_core::topology::testing;
use simulate::{replay, replay_with, GpuChoice, Strategy, Workload};

const DGX1: &str = include_str!("../../../tests/fixtures/workloads/dgx1-mixed.yaml");

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
        policy: align_core::placement::Policy::SingleNumaNode,
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
