//! In-place resize on the engine with the real allocator: a grow keeps the CPUs held, a shrink
//! gives back only what was added, the shared pool follows in the same update, a refusal
//! leaves the container as it was, and the admitted CPUs survive a restart.

use std::sync::Arc;

use super::kubernetes::{kctr, kpod};
use super::*;
use crate::enforce::testing::AllDevices;
use crate::placement::{Allocator, ResizeShrink};
use crate::topology::testing::TopologyBuilder;

fn set(s: &str) -> CpuSet {
    s.parse().expect("set")
}

/// 2 nodes x 8 CPUs (0-7, 8-15), no SMT.
fn engine(shrink: ResizeShrink, store: Option<StateStore>) -> Engine<Allocator> {
    let mut c = Config::default();
    c.placement.resize_shrink = shrink;
    engine_with(c, store)
}

fn engine_with(c: Config, store: Option<StateStore>) -> Engine<Allocator> {
    let topo = TopologyBuilder::new()
        .sockets(2)
        .cores(8)
        .threads(1)
        .build();
    let a = Allocator::new(Arc::new(topo), c.placement.clone());
    Engine::new(
        a,
        c,
        store,
        Some(Arc::new(Metrics::new())),
        Box::new(AllDevices),
    )
}

fn create(e: &mut Engine<Allocator>, id: &str, cpus: u64) {
    let p = kpod("default", id, &[]);
    let milli = cpus.max(1) * 100;
    let limit = (cpus > 0).then_some(cpus * 1000);
    let c = kctr(&p, id, "main", limit.unwrap_or(milli), limit);
    e.create_container(&p, &c)
        .unwrap_or_else(|err| panic!("{id}: {err}"));
}

fn resize(
    e: &mut Engine<Allocator>,
    id: &str,
    cpus: u64,
) -> Result<Vec<CpusetUpdate>, EngineError> {
    let p = kpod("default", id, &[]);
    let c = kctr(&p, id, "main", cpus * 1000, Some(cpus * 1000));
    e.update_container(&p, &c, &c.resources)
}

fn cpus_of(e: &Engine<Allocator>, id: &str) -> CpuSet {
    e.records().containers[id].applied_cpus.clone()
}

/// `x` on 5-6 of node 0 (a filler took 0-4 before it and left), `s` shared.
fn holding_5_6(shrink: ResizeShrink, store: Option<StateStore>) -> Engine<Allocator> {
    let mut e = engine(shrink, store);
    create(&mut e, "s", 0);
    create(&mut e, "filler", 5);
    create(&mut e, "x", 2);
    assert_eq!(cpus_of(&e, "x"), set("5-6"));
    e.release_container("filler");
    e
}

#[test]
fn a_grow_keeps_the_cpus_held_and_the_pool_follows_in_the_same_update() {
    let mut e = holding_5_6(ResizeShrink::Admitted, None);
    let ups = resize(&mut e, "x", 3).expect("grown");
    let x = cpus_of(&e, "x");
    assert!(
        set("5-6").is_subset(&x) && x.len() == 3,
        "kept 5-6, got {x}"
    );
    assert_eq!(ups[0].container_id, "x");
    assert_eq!(ups[0].cpus, x);
    let s = ups
        .iter()
        .find(|u| u.container_id == "s")
        .expect("pool update");
    assert!(s.cpus.is_disjoint(&x), "{} vs {x}", s.cpus);
    assert_eq!(e.placer().shared_pool(), s.cpus);
    let rec = &e.records().containers["x"];
    assert_eq!(rec.admitted_cpus, set("5-6"));
    assert_eq!(rec.added_cpus.len(), 1);
}

#[test]
fn a_shrink_gives_back_the_added_cpus_and_not_the_admitted_ones() {
    let mut e = holding_5_6(ResizeShrink::Admitted, None);
    resize(&mut e, "x", 4).expect("grown");
    resize(&mut e, "x", 2).expect("shrunk");
    assert_eq!(cpus_of(&e, "x"), set("5-6"));
    let err = resize(&mut e, "x", 1)
        .expect_err("below admitted")
        .to_string();
    assert!(err.contains("admitted with 2 CPU(s)"), "{err}");
    assert!(
        err.contains("ask for at least 2, or set resize_shrink: any"),
        "{err}"
    );
    assert_eq!(cpus_of(&e, "x"), set("5-6"), "kept as it was");
    assert_eq!(
        e.records().containers["x"].resources.cpu_limit_milli,
        Some(2000)
    );
}

#[test]
fn resize_shrink_any_goes_below_the_admitted_cpus_keeping_the_rest() {
    let mut e = holding_5_6(ResizeShrink::Any, None);
    resize(&mut e, "x", 1).expect("shrunk");
    let x = cpus_of(&e, "x");
    assert!(x.len() == 1 && x.is_subset(&set("5-6")), "{x}");
}

#[test]
fn a_grow_that_does_not_fit_is_refused_and_changes_nothing() {
    let mut e = holding_5_6(ResizeShrink::Admitted, None);
    let pool = e.placer().shared_pool();
    let err = resize(&mut e, "x", 16).expect_err("too big").to_string();
    assert!(err.contains("from 2 to 16 exclusive CPU(s)"), "{err}");
    assert!(
        err.contains("free next to them: node 0: 6 (0-4,7)"),
        "{err}"
    );
    assert_eq!(cpus_of(&e, "x"), set("5-6"));
    assert_eq!(e.placer().shared_pool(), pool);
}

#[test]
fn the_admitted_cpus_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = || Some(StateStore::open(dir.path()).expect("store"));
    let mut first = holding_5_6(ResizeShrink::Admitted, store());
    resize(&mut first, "x", 3).expect("grown");
    let held = first.records().containers["x"].clone();
    drop(first);
    let mut second = engine(ResizeShrink::Admitted, store());
    assert!(matches!(second.start(), StartState::Restored { .. }));
    let rec = &second.records().containers["x"];
    assert_eq!(
        (&rec.admitted_cpus, &rec.added_cpus),
        (&held.admitted_cpus, &held.added_cpus)
    );
    resize(&mut second, "x", 2).expect("shrunk");
    assert_eq!(cpus_of(&second, "x"), set("5-6"));
}

#[test]
fn a_record_from_before_resizes_treats_its_cpus_as_admitted() {
    let line = r#"{"assignment":{"container_id":"x","container_name":"main","pod_uid":"u","pod_name":"d/p","cpus":"5-6","exclusive":true,"mems":"0","numa_nodes":"0","memory_bytes":0,"gpus":[],"nics":[],"policy":"best-effort","aligned":true,"reason":"r"}}"#;
    let rec: crate::enforce::state::Record = serde_json::from_str(line).expect("old record");
    let h = rec.holding();
    assert_eq!((h.admitted, h.added), (set("5-6"), Vec::new()));
}

#[test]
fn a_grow_onto_another_node_widens_the_memory_nodes_unless_another_plugin_owns_them() {
    for left in [false, true] {
        let mut c = Config::default();
        c.leave_to_others.mems = left;
        let mut e = engine_with(c, None);
        create(&mut e, "s", 0);
        create(&mut e, "x", 6);
        let before = e.records().containers["x"].assignment.mems.clone();
        e.take_mems_updates();
        resize(&mut e, "x", 10).expect("grown onto node 1");
        let rec = &e.records().containers["x"];
        assert!(rec.applied_cpus.len() == 10, "{}", rec.applied_cpus);
        let sent = e.take_mems_updates();
        if left {
            assert!(
                sent.iter().all(|u| u.container_id != "x"),
                "memory nodes another plugin owns are never sent: {sent:?}"
            );
        } else {
            assert_eq!(before.to_string(), "0");
            let x = sent
                .iter()
                .find(|u| u.container_id == "x")
                .unwrap_or_else(|| panic!("the widened memory nodes are sent: {sent:?}"));
            assert_eq!(x.mems.to_string(), "0-1");
        }
    }
}
