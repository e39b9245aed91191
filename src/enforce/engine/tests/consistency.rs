//! The placer's ledger and the engine's records never disagree: a failure or a panic between
//! the decision and the record changes neither, a panic after a release is repaired from the
//! records, and every record the engine drops is dropped from the state file too.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::*;

/// The container ids the placer holds and those the engine recorded, each sorted.
fn both(e: &Engine<FakePlacer>) -> (Vec<String>, Vec<String>) {
    let mut held: Vec<String> = e
        .placer
        .held()
        .into_iter()
        .map(|a| a.container_id)
        .collect();
    held.sort();
    let recorded: Vec<String> = e.records().containers.keys().cloned().collect();
    (held, recorded)
}

/// Finds no device node at all.
struct NoDevices;
impl DeviceLookup for NoDevices {
    fn lookup(&self, _path: &str) -> Option<crate::host::devices::DeviceNode> {
        None
    }
}

/// Panics on every lookup: a bug between the decision and the record.
struct PanickingDevices;
impl DeviceLookup for PanickingDevices {
    fn lookup(&self, path: &str) -> Option<crate::host::devices::DeviceNode> {
        panic!("injected: device lookup of {path} panics");
    }
}

#[test]
fn a_failed_adjustment_records_nothing_in_either() {
    let mut e = engine(None, Config::default());
    e.create_container(&pod("a"), &ctr("s1", "a", 0, &[]))
        .expect("ok");
    e.devices = Box::new(NoDevices);
    let err = e
        .create_container(&pod("a"), &ctr("g1", "a", 2, &[0]))
        .expect_err("no /dev/nvidia0");
    assert!(matches!(err, EngineError::Adjust(_)), "{err}");
    assert_eq!(both(&e), (vec!["s1".to_string()], vec!["s1".to_string()]));
}

#[test]
fn a_panic_between_decision_and_record_changes_neither() {
    let mut e = engine(None, Config::default());
    e.create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok");
    e.devices = Box::new(PanickingDevices);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        e.create_container(&pod("a"), &ctr("g1", "a", 2, &[0]))
    }));
    assert!(outcome.is_err(), "the injected panic happened");
    assert_eq!(both(&e), (vec!["x1".to_string()], vec!["x1".to_string()]));
    assert_eq!(e.resync_placer(), 0, "nothing to repair");
}

#[test]
fn a_panic_while_recording_in_the_placer_leaves_no_record() {
    let mut e = engine(None, Config::default());
    e.placer.panic_on_commit = true;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        e.create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
    }));
    assert!(outcome.is_err(), "the injected panic happened");
    assert_eq!(both(&e), (Vec::new(), Vec::new()));
}

#[test]
fn a_panic_during_an_update_is_repaired_from_the_records() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = StateStore::open(dir.path()).expect("store");
    let mut e = engine(Some(store), Config::default());
    e.create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok");
    e.create_container(&pod("a"), &ctr("x2", "a", 2, &[]))
        .expect("ok");
    let before = e.records().containers["x1"].assignment.clone();
    // The update releases x1 to decide again with its CPUs free; the decision panics.
    e.placer.panic_on_plan = true;
    let bigger = ctr("x1", "a", 3, &[]).resources;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        e.update_container(&pod("a"), &ctr("x1", "a", 2, &[]), &bigger)
    }));
    assert!(outcome.is_err(), "the injected panic happened");
    let (held, recorded) = both(&e);
    assert_eq!((held.len(), recorded.len()), (1, 2), "apart until resynced");
    e.placer.panic_on_plan = false;
    assert_eq!(e.resync_placer(), 1);
    assert_eq!(both(&e).0, both(&e).1);
    let back = e
        .placer
        .held()
        .into_iter()
        .find(|a| a.container_id == "x1")
        .expect("x1 held again");
    assert_eq!(back, before, "with the recorded decision");
    // Its CPUs are taken again: a new exclusive container gets others.
    let x3 = e
        .create_container(&pod("a"), &ctr("x3", "a", 2, &[]))
        .expect("ok")
        .expect("adj");
    assert!(
        x3.adjustment.cpuset_cpus.is_disjoint(&before.cpus),
        "{}",
        x3.adjustment.cpuset_cpus
    );
}

#[test]
fn a_decision_only_the_placer_holds_is_released_and_the_record_taken_back() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = StateStore::open(dir.path()).expect("store");
    let mut e = engine(Some(store), Config::default());
    e.create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok");
    // As if a panic had left another container holding x1's CPUs in the placer only.
    let mut thief = e.records().containers["x1"].assignment.clone();
    thief.container_id = "ghost".into();
    e.placer.release("x1");
    e.placer.restore(thief).expect("fake placer takes it");
    // The ghost goes (no record), x1 comes back.
    assert_eq!(e.resync_placer(), 2);
    assert_eq!(both(&e), (vec!["x1".to_string()], vec!["x1".to_string()]));
    let Loaded::Doc(doc) = reader(dir.path()).load() else {
        panic!("state written")
    };
    assert_eq!(doc.containers.keys().collect::<Vec<_>>(), vec!["x1"]);
}

/// A second look at the state while the engine holds it (as `verify` does).
fn reader(dir: &std::path::Path) -> StateStore {
    StateStore::open_read_only(dir).expect("reader")
}

#[test]
fn records_dropped_at_start_are_dropped_from_the_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = StateStore::open(dir.path()).expect("store");
    let mut first = engine(Some(store), Config::default());
    first
        .create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok");
    drop(first);
    // A second record claiming the same exclusive CPUs (a file edited by hand, or two
    // plugins): the placer refuses it at start.
    let mut store = StateStore::open(dir.path()).expect("store");
    let Loaded::Doc(mut doc) = store.load() else {
        panic!("state written")
    };
    let mut twin = doc.containers["x1"].clone();
    twin.assignment.container_id = "x9".into();
    doc.containers.insert("x9".into(), twin);
    store.save(&doc).expect("save");
    drop(store);
    let store = StateStore::open(dir.path()).expect("store");
    let mut second = engine(Some(store), Config::default());
    let StartState::Restored { restored, dropped } = second.start() else {
        panic!("restored")
    };
    assert_eq!((restored, dropped.len()), (1, 1));
    let Loaded::Doc(after) = reader(dir.path()).load() else {
        panic!("state written")
    };
    assert_eq!(after.containers.keys().collect::<Vec<_>>(), vec!["x1"]);
    assert_eq!(
        both(&second),
        (vec!["x1".to_string()], vec!["x1".to_string()])
    );
}

#[test]
fn a_retried_create_that_fails_leaves_neither_the_old_record_nor_its_file_entry() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = StateStore::open(dir.path()).expect("store");
    let mut e = engine(Some(store), Config::default());
    e.create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok");
    // The runtime retries the create, now asking for more than a node has.
    e.create_container(&pod("a"), &ctr("x1", "a", 6, &[]))
        .expect_err("does not fit");
    assert_eq!(both(&e), (Vec::new(), Vec::new()));
    let Loaded::Doc(doc) = reader(dir.path()).load() else {
        panic!("state written")
    };
    assert!(doc.containers.is_empty(), "{:?}", doc.containers.keys());
}

#[test]
fn an_admission_writes_its_record_before_the_pool_move_and_both_before_it_returns() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = StateStore::open(dir.path()).expect("store");
    let mut e = engine(Some(store), Config::default());
    for id in ["s1", "s2"] {
        e.create_container(&pod("a"), &ctr(id, "a", 0, &[]))
            .expect("ok");
    }
    let log = dir.path().join(crate::enforce::state::STATE_FILE);
    let before = std::fs::read_to_string(&log).expect("log").len();
    let x1 = e
        .create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(x1.updates.len(), 2, "both shared containers move");
    let text = std::fs::read_to_string(&log).expect("log");
    let appended: Vec<&str> = text[before..].lines().collect();
    // The record first (written on the caches the decision left), then the group's line.
    assert_eq!(appended.len(), 2, "{appended:?}");
    assert!(appended[0].contains("\"x1\""), "{appended:?}");
    assert!(appended[1].contains("\"group\""), "{appended:?}");
    let Loaded::Doc(doc) = reader(dir.path()).load() else {
        panic!("state written")
    };
    assert_eq!(doc.containers, e.records().containers);
    assert_eq!(doc.containers["s1"].applied_cpus.to_string(), "2-7");
}
