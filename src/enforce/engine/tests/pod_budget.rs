//! Pod budgets (`pod_budgets`) on the engine with the real allocator: a pod Guaranteed at pod
//! level (cpu 8) with a trainer asking 4 whole CPUs and two sidecars without limits gets its 8
//! CPUs on one node, the trainer 4 of them exclusively, the sidecars the other 4 as the pod's
//! own pool, and the node's shared pool none of them; UpdatePodSandbox grows and shrinks the
//! budget keeping the CPUs it holds; the pod's removal returns it all; a restart keeps it.

use std::sync::Arc;

use super::kubernetes::{kctr, kpod};
use super::*;
use crate::enforce::testing::AllDevices;
use crate::placement::Allocator;
use crate::topology::testing::TopologyBuilder;

/// 2 nodes x 8 CPUs (0-7, 8-15), no SMT, 16 GiB each.
fn host() -> crate::topology::Topology {
    TopologyBuilder::new()
        .sockets(2)
        .cores(8)
        .threads(1)
        .memory_gib(16)
        .build()
}

fn engine_with(budgets: bool, store: Option<StateStore>) -> Engine<Allocator> {
    let c = Config {
        pod_budgets: budgets,
        ..Config::default()
    };
    let a = Allocator::new(Arc::new(host()), c.placement.clone());
    Engine::new(
        a,
        c,
        store,
        Some(Arc::new(Metrics::new())),
        Box::new(AllDevices),
    )
}

fn set(s: &str) -> CpuSet {
    s.parse().expect("set")
}

/// Pod-level resources of `cpus` whole CPUs, requests equal to limits, and 4 GiB.
fn pod_resources(cpus: u64) -> ResourcesView {
    ResourcesView {
        cpu_shares: Some(cpus * 1024),
        cpu_quota: Some(cpus as i64 * 100_000),
        cpu_period: Some(100_000),
        memory_limit: Some(4 << 30),
        ..Default::default()
    }
}

fn train_pod(cpus: u64) -> PodView {
    PodView {
        resources: Some(pod_resources(cpus)),
        ..kpod("ml", "train", &[])
    }
}

fn create(e: &mut Engine<Allocator>, p: &PodView, c: &ContainerView) -> CreateOutcome {
    e.create_container(p, c)
        .unwrap_or_else(|err| panic!("{}: {err}", c.id))
        .expect("not exempt")
}

fn cpus_of(e: &Engine<Allocator>, id: &str) -> CpuSet {
    e.records().containers[id].applied_cpus.clone()
}

fn node_of(cpus: &CpuSet) -> Vec<u32> {
    let mut nodes: Vec<u32> = cpus.iter().map(|c| c / 8).collect();
    nodes.dedup();
    nodes
}

/// A shared container of another pod, then the trainer (4 exclusive) and its two sidecars.
fn the_issues_pod(e: &mut Engine<Allocator>) -> PodView {
    let web = kpod("default", "web", &[]);
    create(e, &web, &kctr(&web, "web", "nginx", 100, None));
    assert_eq!(cpus_of(e, "web"), set("0-15"));
    let p = train_pod(8);
    let trainer = create(e, &p, &kctr(&p, "trainer", "trainer", 4000, Some(4000)));
    assert_eq!(trainer.adjustment.cpuset_cpus.len(), 4);
    let moved: Vec<&str> = trainer
        .updates
        .iter()
        .map(|u| u.container_id.as_str())
        .collect();
    assert_eq!(
        moved,
        ["web"],
        "the node's pool lost the pod's 8 CPUs at once"
    );
    for s in ["loader", "metrics"] {
        create(e, &p, &kctr(&p, s, s, 100, None));
    }
    p
}

#[test]
fn the_trainer_gets_four_and_the_sidecars_the_other_four_of_the_same_node() {
    let mut e = engine_with(true, None);
    the_issues_pod(&mut e);
    let trainer = cpus_of(&e, "trainer");
    let pool = cpus_of(&e, "loader");
    assert_eq!(trainer.len(), 4);
    assert_eq!(pool.len(), 4);
    assert!(trainer.is_disjoint(&pool));
    assert_eq!(
        cpus_of(&e, "metrics"),
        pool,
        "both sidecars share the pod's pool"
    );
    let budget = trainer.union(&pool);
    assert_eq!(node_of(&budget).len(), 1, "one node: {budget}");
    assert!(e.records().containers["trainer"].assignment.exclusive);
    // The node's shared pool has none of the pod's 8 CPUs, and the other pod runs there.
    let node_pool = e.placer().shared_pool();
    assert_eq!(node_pool, set("0-15").difference(&budget));
    assert_eq!(cpus_of(&e, "web"), node_pool);
    // The sidecars' memory nodes are the budget's node.
    let mems = &e.records().containers["loader"].assignment.mems;
    assert_eq!(mems.iter().collect::<Vec<_>>(), node_of(&budget));
    assert_eq!(e.resync_placer(), 0, "the records and the placer agree");
}

#[test]
fn without_pod_budgets_the_sidecars_run_on_the_nodes_pool() {
    let mut e = engine_with(false, None);
    let web = kpod("default", "web", &[]);
    create(&mut e, &web, &kctr(&web, "web", "nginx", 100, None));
    let p = train_pod(8);
    create(
        &mut e,
        &p,
        &kctr(&p, "trainer", "trainer", 4000, Some(4000)),
    );
    create(&mut e, &p, &kctr(&p, "loader", "loader", 100, None));
    assert_eq!(cpus_of(&e, "loader"), cpus_of(&e, "web"));
    assert_eq!(e.placer().shared_pool().len(), 12);
}

#[test]
fn an_update_to_ten_adds_two_to_the_pods_pool_and_a_shrink_gives_them_back() {
    let mut e = engine_with(true, None);
    let p = the_issues_pod(&mut e);
    let trainer = cpus_of(&e, "trainer");
    let pool = cpus_of(&e, "loader");
    let updates = e.update_pod(&p, &pod_resources(10)).expect("grows");
    let grown = cpus_of(&e, "loader");
    assert_eq!(grown.len(), 6);
    assert!(
        pool.is_subset(&grown),
        "the pod keeps its CPUs: {pool} in {grown}"
    );
    assert_eq!(cpus_of(&e, "trainer"), trainer, "the trainer never moves");
    assert_eq!(cpus_of(&e, "metrics"), grown);
    let mut moved: Vec<&str> = updates.iter().map(|u| u.container_id.as_str()).collect();
    moved.sort_unstable();
    assert_eq!(moved, ["loader", "metrics", "web"]);
    let budget = trainer.union(&grown);
    assert_eq!(
        e.placer().shared_pool(),
        set("0-15").difference(&budget),
        "the node's pool gave the 2 CPUs"
    );
    // Back to 8: the two newest go, nothing else moves.
    e.update_pod(&p, &pod_resources(8)).expect("shrinks");
    assert_eq!(cpus_of(&e, "loader"), pool);
    assert_eq!(cpus_of(&e, "trainer"), trainer);
    // Below what the trainer holds plus one for the sidecars: refused, the budget kept.
    let err = e.update_pod(&p, &pod_resources(4)).expect_err("too small");
    assert!(err.to_string().contains("exclusively"), "{err}");
    assert_eq!(cpus_of(&e, "loader"), pool);
    assert_eq!(e.resync_placer(), 0, "the records and the placer agree");
}

#[test]
fn the_pods_removal_returns_all_of_it_and_a_slice_goes_back_to_the_pods_pool() {
    let mut e = engine_with(true, None);
    let p = the_issues_pod(&mut e);
    let pool = cpus_of(&e, "loader");
    let trainer = cpus_of(&e, "trainer");
    // The trainer goes: its 4 CPUs are the pod's again, not the node's.
    let updates = e.release_container("trainer");
    assert_eq!(cpus_of(&e, "loader"), pool.union(&trainer));
    assert!(
        updates.iter().all(|u| u.container_id != "web"),
        "{updates:?}"
    );
    assert_eq!(e.placer().shared_pool().len(), 8);
    e.release_pod(&p.id);
    assert_eq!(e.placer().shared_pool(), set("0-15"));
    assert_eq!(cpus_of(&e, "web"), set("0-15"));
    assert_eq!(e.records().containers.len(), 1, "only web is left");
}

#[test]
fn a_slice_bigger_than_the_pods_pool_is_refused_with_the_budget() {
    let mut e = engine_with(true, None);
    let p = the_issues_pod(&mut e);
    let big = kctr(&p, "big", "big", 4000, Some(4000));
    let err = e.create_container(&p, &big).expect_err("no room");
    assert!(err.to_string().contains("budget of 8 CPUs"), "{err}");
    assert_eq!(cpus_of(&e, "loader").len(), 4);
}

#[test]
fn a_restart_keeps_the_budget() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = || Some(StateStore::open(dir.path()).expect("store"));
    let mut first = engine_with(true, store());
    let p = the_issues_pod(&mut first);
    let pool = cpus_of(&first, "loader");
    let node_pool = first.placer().shared_pool();
    drop(first);
    let mut second = engine_with(true, store());
    assert!(matches!(
        second.start(),
        StartState::Restored { restored: 5, .. }
    ));
    assert_eq!(second.placer().shared_pool(), node_pool);
    // The budget is still the pod's: a grow adds to the same pool.
    second.update_pod(&p, &pod_resources(9)).expect("grows");
    let grown = cpus_of(&second, "loader");
    assert!(pool.is_subset(&grown) && grown.len() == 5, "{grown}");
}

/// What the runtime lists after a restart: `ids` running with their recorded cpusets.
fn listed(e: &Engine<Allocator>, pod: &PodView, ids: &[&str]) -> Vec<ContainerView> {
    ids.iter()
        .map(|id| {
            let r = &e.records().containers[*id];
            let mut c = kctr(pod, id, id, 100, None);
            c.state = ContainerState::Running;
            c.resources.cpuset_cpus = r.applied_cpus.to_string().into();
            c
        })
        .collect()
}

#[test]
fn synchronize_keeps_the_budget_of_a_listed_pod_and_releases_one_gone() {
    let mut e = engine_with(true, None);
    let p = the_issues_pod(&mut e);
    let web = kpod("default", "web", &[]);
    let node_pool = e.placer().shared_pool();
    let mut live = listed(&e, &web, &["web"]);
    live.extend(listed(&e, &p, &["trainer", "loader", "metrics"]));
    let updates = e.synchronize(&[web.clone(), p.clone()], &live);
    assert!(updates.is_empty(), "{updates:?}");
    assert_eq!(e.placer().shared_pool(), node_pool);
    assert_eq!(e.records().containers.len(), 5);
    // The trainer went while nri-align was away: its CPUs are the pod's pool's again.
    let trainer = cpus_of(&e, "trainer");
    let pool = cpus_of(&e, "loader");
    let mut live = listed(&e, &web, &["web"]);
    live.extend(listed(&e, &p, &["loader", "metrics"]));
    let updates = e.synchronize(&[web.clone(), p.clone()], &live);
    assert_eq!(cpus_of(&e, "loader"), pool.union(&trainer));
    assert_eq!(updates.len(), 2, "the sidecars: {updates:?}");
    assert_eq!(e.placer().shared_pool(), node_pool);
    // The pod went while nri-align was away: its budget goes with it.
    let live = listed(&e, &web, &["web"]);
    e.synchronize(&[web], &live);
    assert_eq!(e.records().containers.len(), 1);
    assert_eq!(e.placer().shared_pool(), set("0-15"));
}

#[test]
fn a_pod_of_whole_cpu_containers_slices_its_whole_budget() {
    let mut e = engine_with(true, None);
    let p = train_pod(4);
    create(&mut e, &p, &kctr(&p, "a", "a", 2000, Some(2000)));
    create(&mut e, &p, &kctr(&p, "b", "b", 2000, Some(2000)));
    let both = cpus_of(&e, "a").union(&cpus_of(&e, "b"));
    assert_eq!(both.len(), 4);
    assert_eq!(node_of(&both).len(), 1, "one node: {both}");
    // Nothing left to share: a container without limits is refused, with the budget named.
    let err = e
        .create_container(&p, &kctr(&p, "s", "s", 100, None))
        .expect_err("no pool left");
    assert!(err.to_string().contains("budget of 4 CPUs"), "{err}");
    assert_eq!(e.resync_placer(), 0, "the records and the placer agree");
    e.release_container("a");
    e.release_container("b");
    assert_eq!(e.placer().shared_pool(), set("0-15"));
    assert!(e.records().containers.is_empty(), "the budget went with b");
}

#[test]
fn pruning_keeps_a_budget_while_a_container_of_its_pod_runs() {
    let mut e = engine_with(true, None);
    the_issues_pod(&mut e);
    let pool = cpus_of(&e, "loader");
    let trainer = cpus_of(&e, "trainer");
    let live: std::collections::HashSet<String> = ["web", "loader", "metrics"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let gone = e.prune_gone(Some(&live));
    assert_eq!(gone, ["trainer"]);
    assert_eq!(
        e.records()
            .containers
            .values()
            .filter(|r| r.pod_budget.is_some())
            .count(),
        1
    );
    let budget = e
        .records()
        .containers
        .values()
        .find(|r| r.pod_budget.is_some())
        .map(|r| r.assignment.cpus.clone());
    assert_eq!(
        budget,
        Some(pool.union(&trainer)),
        "the trainer's CPUs are the pod's again"
    );
    let live: std::collections::HashSet<String> = ["web".to_string()].into();
    e.prune_gone(Some(&live));
    assert_eq!(e.records().containers.len(), 1);
    assert_eq!(e.placer().shared_pool(), set("0-15"));
}

#[test]
fn a_budget_alone_lifts_no_pod_quota() {
    let mut e = engine_with(true, None);
    let p = train_pod(2);
    let mut c = kctr(&p, "loader", "loader", 100, None);
    c.cgroups_path = "/kubepods/pod-train/loader".into();
    create(&mut e, &p, &c);
    e.take_pod_quota_writes();
    let live = listed(&e, &p, &["loader"]);
    e.synchronize(std::slice::from_ref(&p), &live);
    // The budget holds the pod's pool, not a container's exclusive CPUs: the kubelet's pod
    // quota stays.
    assert!(e.take_pod_quota_writes().is_empty());
}
