use super::*;
use crate::enforce::container::{ContainerState, ResourcesView};
use crate::enforce::inputs::tests::{gpu_topology, node};

fn topo() -> Topology {
    let mut t = gpu_topology();
    t.cpus = crate::enforce::testing::eight_cpus_on_two_nodes();
    t
}

fn rec(id: &str) -> Record {
    Record {
        assignment: Assignment {
            container_id: id.into(),
            ..Default::default()
        },
        pod_sandbox_id: "p".into(),
        namespace: "ns".into(),
        cgroups_path: String::new(),
        applied_cpus: CpuSet::new(),
        devices: Vec::new(),
        resources: Default::default(),
        ..Record::default()
    }
}

fn live(id: &str, state: ContainerState, cpus: &str, quota_cores: i64) -> ContainerView {
    ContainerView {
        id: id.into(),
        pod_sandbox_id: "p".into(),
        state,
        resources: ResourcesView {
            cpuset_cpus: cpus.into(),
            cpu_shares: Some((quota_cores as u64) * 1024),
            cpu_quota: Some(quota_cores * 100_000),
            cpu_period: Some(100_000),
            ..Default::default()
        },
        devices: vec![node("/dev/nvidia1", 195, 1)],
        ..Default::default()
    }
}

#[test]
fn kept_released_and_rebuilt() {
    let mut doc = StateDoc::default();
    doc.containers.insert("kept".into(), rec("kept"));
    doc.containers.insert("gone".into(), rec("gone"));
    doc.containers.insert("stopped".into(), rec("stopped"));
    let pods = vec![PodView {
        id: "p".into(),
        namespace: "ns".into(),
        ..Default::default()
    }];
    let mut kept = live("kept", ContainerState::Running, "", 0);
    kept.env.push(format!("{DECISION_ENV}=cpus=0"));
    let containers = vec![
        kept,
        live("stopped", ContainerState::Stopped, "", 0),
        live("new", ContainerState::Running, "4-5", 2),
    ];
    let r = reconcile(
        &doc,
        &pods,
        &containers,
        &topo(),
        &PlacementConfig::default(),
    );
    // A listed stopped container keeps its record until removed (its restart takes it).
    let stopped = Record {
        stopped: true,
        ..rec("stopped")
    };
    assert_eq!(r.keep, vec![rec("kept"), stopped]);
    assert_eq!(r.release, vec!["gone".to_string()]);
    assert_eq!(r.rebuild.len(), 1);
    let a = &r.rebuild[0].assignment;
    assert_eq!(a.cpus.to_string(), "4-5");
    assert!(a.exclusive, "2 guaranteed cores pinned to 2 CPUs");
    assert_eq!(a.numa_nodes.to_string(), "1");
    assert_eq!(a.gpus, vec!["0000:3b:00.0"]);
    assert_eq!(r.rebuild[0].namespace, "ns");
}

#[test]
fn a_record_whose_remap_never_reached_the_container_follows_its_real_gpus() {
    // Recorded with GPU 0 (a remap), but the runtime created it without the adjustment:
    // no decision in its env, and its device plugin's GPU 1 (/dev/nvidia1) in its spec.
    let mut doc = StateDoc::default();
    let mut recorded = rec("x");
    recorded.assignment.gpus = vec!["0000:1b:00.0".into()];
    recorded.assignment.exclusive = true;
    doc.containers.insert("x".into(), recorded.clone());
    let lost = live("x", ContainerState::Running, "", 2);
    let r = reconcile(
        &doc,
        &[],
        std::slice::from_ref(&lost),
        &topo(),
        &PlacementConfig::default(),
    );
    assert_eq!(r.release, vec!["x".to_string()]);
    assert_eq!(r.rebuild.len(), 1);
    assert_eq!(r.rebuild[0].assignment.gpus, vec!["0000:3b:00.0"]);
    assert!(!r.rebuild[0].assignment.exclusive, "no cpuset: shared");

    // The same container with its decision applied keeps its record.
    let mut applied = lost;
    applied
        .env
        .push(format!("{DECISION_ENV}=gpus=0000:1b:00.0"));
    let r = reconcile(&doc, &[], &[applied], &topo(), &PlacementConfig::default());
    assert_eq!(r.keep, vec![recorded.clone()]);
    assert!(r.release.is_empty() && r.rebuild.is_empty());

    // Lost, but the devices agree (GPUs kept): keep the record, the cpuset is re-applied.
    let mut same = recorded;
    same.assignment.gpus = vec!["0000:3b:00.0".into()];
    doc.containers.insert("x".into(), same.clone());
    let r = reconcile(
        &doc,
        &[],
        &[live("x", ContainerState::Running, "", 2)],
        &topo(),
        &PlacementConfig::default(),
    );
    assert_eq!(r.keep, vec![same]);
}

#[test]
fn a_container_on_every_cpu_is_shared() {
    let c = live("x", ContainerState::Running, "", 2);
    let r = record_as_running(
        &topo(),
        &PlacementConfig::default(),
        &PodView::default(),
        &c,
    );
    assert!(!r.assignment.exclusive);
    assert_eq!(r.assignment.cpus.to_string(), "0-7");
    assert!(r.found_running && r.assignment.reason.starts_with(RECORDED_AS_RUNNING));
    let exempt = exempt_record_as_running(&topo(), &PodView::default(), &c);
    assert!(exempt.found_running && exempt.exempt);
    let burstable = live("y", ContainerState::Running, "4-6", 2);
    assert!(
        !record_as_running(
            &topo(),
            &PlacementConfig::default(),
            &PodView::default(),
            &burstable
        )
        .assignment
        .exclusive
    );
}

/// An 80 KB cpuset (Synchronize, PostStart) held the engine for 21 s: now it is refused
/// before parsing, and the container counts as running on every CPU.
#[test]
fn a_runtime_cpuset_longer_than_the_host_could_need_is_refused_at_once() {
    let huge = vec!["0-1048575"; 8_000].join(",");
    let mut c = live("x", ContainerState::Running, "", 2);
    // From the view's reading of the text on.
    let started = std::time::Instant::now();
    c.resources.cpuset_cpus = huge.clone().into();
    c.resources.cpuset_mems = huge.into();
    let r = record_as_running(
        &topo(),
        &PlacementConfig::default(),
        &PodView::default(),
        &c,
    );
    assert!(
        started.elapsed() < std::time::Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r.assignment.cpus.to_string(), "0-7");
    assert!(!r.assignment.exclusive);
    // Ids this host does not have are refused the same way; its own are read.
    assert_eq!(runtime_cpus(&topo(), &"0-8".into(), "x"), None);
    assert_eq!(
        runtime_cpus(&topo(), &"1,3-4\n".into(), "x").map(|s| s.to_string()),
        Some("1,3-4".into())
    );
}

#[test]
fn a_rebuilt_record_shows_the_policy_asked_and_whether_it_holds() {
    let pod = |policy: &str| PodView {
        id: "p".into(),
        annotations: [("policy.nri-align.io/pod".to_string(), policy.to_string())]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    let node_default = PlacementConfig::default();
    // GPU 0000:3b:00.0 (/dev/nvidia1) sits on node 0.
    let near = live("near", ContainerState::Running, "0-1", 2);
    let far = live("far", ContainerState::Running, "4-5", 2);

    let a = record_as_running(&topo(), &node_default, &PodView::default(), &near).assignment;
    assert_eq!(a.policy, Policy::BestEffort, "the node default");
    assert!(a.aligned, "CPUs, memory and GPU on node 0");
    let a = record_as_running(&topo(), &node_default, &PodView::default(), &far).assignment;
    assert!(!a.aligned, "CPUs on node 1, its GPU on node 0");

    let snn = record_as_running(&topo(), &node_default, &pod("single-numa-node"), &near);
    assert_eq!(
        snn.assignment.policy,
        Policy::SingleNumaNode,
        "the pod's annotation"
    );
    assert!(snn.assignment.aligned);
    let wide = live("wide", ContainerState::Running, "2-5", 4);
    let a = record_as_running(&topo(), &node_default, &pod("single-numa-node"), &wide);
    assert!(!a.assignment.aligned, "two nodes under single-numa-node");
    let a = record_as_running(&topo(), &node_default, &pod("none"), &near).assignment;
    assert_eq!((a.policy, a.aligned), (Policy::None, false));

    // An annotation that does not parse: the node default, and why, in the reason.
    let bad = record_as_running(&topo(), &node_default, &pod("strict"), &near).assignment;
    assert_eq!(bad.policy, Policy::BestEffort);
    assert!(
        bad.reason.contains("node default policy shown")
            && bad.reason.contains("policy.nri-align.io/pod"),
        "{}",
        bad.reason
    );
}

/// nri-align lifts the CFS quota of the exclusive containers it places: after a lost state,
/// such a container shows no CPU limit. Its own decision, which it carries, says it is
/// exclusive on the CPUs it runs on; without it, or on other CPUs, it is shared.
#[test]
fn a_running_container_without_a_quota_is_exclusive_where_its_own_decision_says_so() {
    let unlimited = |cpus: &str, decision: Option<&str>, annotation: bool| {
        let mut c = live("x", ContainerState::Running, cpus, 2);
        c.resources.cpu_quota = Some(-1);
        if let Some(d) = decision {
            if annotation {
                c.annotations
                    .insert(crate::enforce::adjust::DECISION_KEY.into(), d.into());
            } else {
                c.env.push(format!("{DECISION_ENV}={d}"));
            }
        }
        record_as_running(
            &topo(),
            &PlacementConfig::default(),
            &PodView::default(),
            &c,
        )
        .assignment
        .exclusive
    };
    let placed = "policy=best-effort cpus=4-5 exclusive=true mems=1 nodes=1";
    assert!(
        unlimited("4-5", Some(placed), true),
        "its decision, annotated"
    );
    assert!(
        unlimited("4-5", Some(placed), false),
        "its decision, in the env"
    );
    assert!(
        !unlimited("4-5", None, false),
        "no decision: no limit, shared"
    );
    assert!(
        !unlimited("4-6", Some(placed), true),
        "on other CPUs than decided: shared"
    );
    let shared = "policy=best-effort cpus=4-5 exclusive=false mems=1 nodes=1";
    assert!(!unlimited("4-5", Some(shared), true), "decided shared");
}
