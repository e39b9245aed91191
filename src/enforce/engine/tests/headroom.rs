//! The exclusive headroom on the engine with the real allocator: exclusive containers taken
//! from it send no update, one that needs pool CPUs moves the shared containers once, releases
//! move them only past twice the headroom, a restart (state file, Synchronize) keeps the pool
//! the shared containers run on, a reload to 0 restores the pool without headroom, and no
//! shared container ever runs on an exclusive CPU.

use std::sync::Arc;

use proptest::prelude::*;

use super::kubernetes::{kctr, kpod};
use super::*;
use crate::enforce::testing::AllDevices;
use crate::placement::Allocator;
use crate::topology::testing::TopologyBuilder;

/// 2 nodes x 8 CPUs (0-7, 8-15), no SMT.
fn host() -> crate::topology::Topology {
    TopologyBuilder::new()
        .sockets(2)
        .cores(8)
        .threads(1)
        .memory_gib(16)
        .build()
}

fn config(headroom: u32) -> Config {
    let mut c = Config::default();
    c.placement.exclusive_headroom = headroom;
    c
}

fn engine(headroom: u32, store: Option<StateStore>) -> Engine<Allocator> {
    let c = config(headroom);
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

/// Creates a container of `milli` CPUs in its own pod (Guaranteed when `exclusive`).
fn create(e: &mut Engine<Allocator>, id: &str, milli: u64, exclusive: bool) -> CreateOutcome {
    let p = kpod("default", id, &[]);
    let c = kctr(&p, id, "main", milli, exclusive.then_some(milli));
    e.create_container(&p, &c)
        .unwrap_or_else(|err| panic!("{id}: {err}"))
        .expect("not exempt")
}

fn cpus_of(e: &Engine<Allocator>, id: &str) -> CpuSet {
    e.records().containers[id].applied_cpus.clone()
}

fn moved(updates: &[CpusetUpdate]) -> Vec<&str> {
    updates.iter().map(|u| u.container_id.as_str()).collect()
}

#[test]
fn an_exclusive_container_from_the_headroom_moves_nobody() {
    let mut e = engine(2, None);
    create(&mut e, "s1", 100, false);
    create(&mut e, "s2", 100, false);
    let shared = cpus_of(&e, "s1");
    assert_eq!(shared, set("2-7,10-15"), "the headroom is 0-1 and 8-9");
    let x = create(&mut e, "x1", 2000, true);
    assert!(x.updates.is_empty(), "{:?}", x.updates);
    assert!(cpus_of(&e, "x1").is_disjoint(&shared));
    assert_eq!(cpus_of(&e, "s2"), shared);
}

#[test]
fn the_headroom_is_in_the_metrics() {
    let mut e = engine(2, None);
    create(&mut e, "x1", 2000, true);
    let text = e.metrics.as_ref().expect("metrics").encode();
    for line in [
        // Node 0 gave its headroom to x1; node 1 keeps 2 of its 8 free CPUs.
        "nri_align_exclusive_headroom_cpus{numa_node=\"0\"} 0",
        "nri_align_exclusive_headroom_cpus{numa_node=\"1\"} 2",
        "nri_align_free_cpus{numa_node=\"1\"} 8",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
    }
}

#[test]
fn one_that_needs_pool_cpus_moves_each_shared_container_once_and_refills() {
    let mut e = engine(2, None);
    create(&mut e, "s1", 100, false);
    create(&mut e, "s2", 100, false);
    create(&mut e, "x1", 2000, true);
    // Node 0's headroom is spent: the next one there takes pool CPUs, one move.
    let x2 = create(&mut e, "x2", 2000, true);
    assert_eq!(moved(&x2.updates), ["s1", "s2"]);
    let after = cpus_of(&e, "s1");
    assert!(after.is_disjoint(&cpus_of(&e, "x1").union(&cpus_of(&e, "x2"))));
    // The move refilled node 0's headroom: the next one moves nobody.
    let x3 = create(&mut e, "x3", 2000, true);
    assert!(x3.updates.is_empty(), "{:?}", x3.updates);
    assert!(cpus_of(&e, "x3").is_disjoint(&after));
    assert_eq!(cpus_of(&e, "s1"), after);
}

#[test]
fn releases_keep_the_pool_until_the_headroom_passes_twice_the_setting() {
    let mut e = engine(2, None);
    create(&mut e, "s1", 100, false);
    for x in ["x1", "x2", "x3"] {
        create(&mut e, x, 2000, true);
    }
    let pool = cpus_of(&e, "s1");
    assert!(
        e.release_container("x3").is_empty(),
        "headroom 0 -> 2: kept"
    );
    assert!(e.release_container("x2").is_empty(), "2 -> 4 = 2 x 2: kept");
    assert_eq!(cpus_of(&e, "s1"), pool);
    // 4 -> 6 > 2 x 2: the pool grows back in one move, leaving 2.
    let grown = e.release_container("x1");
    assert_eq!(moved(&grown), ["s1"]);
    let now = cpus_of(&e, "s1");
    assert!(pool.is_subset(&now) && now.len() == pool.len() + 4);
    assert_eq!(e.placer().ledger().headroom_cpus().len(), 4);
}

#[test]
fn a_restart_keeps_the_pool_the_shared_containers_run_on() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = || Some(StateStore::open(dir.path()).expect("store"));
    let mut first = engine(2, store());
    create(&mut first, "s1", 100, false);
    create(&mut first, "x1", 2000, true);
    create(&mut first, "x2", 2000, true);
    create(&mut first, "x3", 2000, true);
    first.release_container("x3");
    first.release_container("x2");
    // Node 0's headroom is 4 (2-5), twice the setting: kept out of the pool, where a pool
    // computed afresh would leave only 2 out.
    let pool = cpus_of(&first, "s1");
    assert_eq!(first.placer().ledger().headroom_cpus(), set("2-5,8-9"));
    let live: Vec<ContainerView> = ["s1", "x1"]
        .iter()
        .map(|id| {
            let r = &first.records().containers[*id];
            let p = kpod("default", id, &[]);
            let mut c = kctr(&p, id, "main", 100, None);
            c.state = ContainerState::Running;
            c.resources.cpuset_cpus = r.applied_cpus.to_string().into();
            c
        })
        .collect();
    let pods: Vec<PodView> = ["s1", "x1"]
        .iter()
        .map(|id| kpod("default", id, &[]))
        .collect();
    drop(first);

    let mut second = engine(2, store());
    assert!(matches!(
        second.start(),
        StartState::Restored { restored: 2, .. }
    ));
    // The headroom freed by x2 and x3 is still out of the pool: nothing moves.
    assert_eq!(second.placer().shared_pool(), pool);
    assert!(second.synchronize(&pods, &live).is_empty());
    let x4 = create(&mut second, "x4", 2000, true);
    assert!(x4.updates.is_empty(), "{:?}", x4.updates);
    assert_eq!(cpus_of(&second, "s1"), pool);
}

#[test]
fn a_reload_to_zero_restores_the_pool_without_headroom_in_one_move() {
    let mut e = engine(2, None);
    create(&mut e, "s1", 100, false);
    create(&mut e, "x1", 2000, true);
    let updates = e.reload(config(0)).expect("reload");
    assert_eq!(moved(&updates), ["s1"]);
    let all = set("0-15").difference(&cpus_of(&e, "x1"));
    assert_eq!(cpus_of(&e, "s1"), all);
    assert_eq!(e.placer().shared_pool(), all);
    // And back: the headroom is taken out of the pool once.
    let updates = e.reload(config(2)).expect("reload");
    assert_eq!(moved(&updates), ["s1"]);
    assert_eq!(e.placer().ledger().headroom_cpus().len(), 4);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn no_shared_container_ever_runs_on_an_exclusive_cpu(
        h in 0u32..4,
        steps in proptest::collection::vec((0u64..4, 0usize..8, proptest::bool::ANY), 1..40),
    ) {
        let mut e = engine(h, None);
        let mut live: Vec<String> = Vec::new();
        for (n, (cpus, pick, remove)) in steps.into_iter().enumerate() {
            if remove && !live.is_empty() {
                let id = live.remove(pick % live.len());
                e.release_container(&id);
            } else {
                let id = format!("c{n}");
                let p = kpod("default", &id, &[]);
                let milli = if cpus == 0 { 100 } else { cpus * 1000 };
                let c = kctr(&p, &id, "main", milli, (cpus > 0).then_some(milli));
                if let Ok(Some(_)) = e.create_container(&p, &c) {
                    live.push(id);
                }
            }
            let mut held = CpuSet::new();
            for r in e.records().containers.values().filter(|r| r.assignment.exclusive) {
                prop_assert!(r.applied_cpus.is_disjoint(&held));
                held.extend_from(&r.applied_cpus);
            }
            for r in e.records().containers.values().filter(|r| !r.assignment.exclusive) {
                prop_assert!(!r.applied_cpus.is_empty());
                prop_assert!(
                    r.applied_cpus.is_disjoint(&held),
                    "{} runs on {} with exclusive {}",
                    r.assignment.container_id, r.applied_cpus, held
                );
            }
        }
    }
}
