//! The engine on a state dir whose filesystem is full (a real tmpfs, root only: skipped with
//! a reason otherwise): creations are admitted at the usual cost, the metrics say the state is
//! not persisted, the first write once space is back persists every live record (a container
//! released meanwhile included), and a restart while the disk is still full starts.

use std::time::{Duration, Instant};

use super::*;
use test_support::testfs::Mounted;

fn engine_on(dir: &std::path::Path, metrics: &Arc<Metrics>) -> Engine<FakePlacer> {
    let mut store = StateStore::open(dir).expect("store");
    store.set_retry_after(Duration::from_millis(100));
    let config = Config::default();
    let mut p = FakePlacer::new();
    p.set_config(config.placement.clone());
    Engine::new(
        p,
        config,
        Some(store),
        Some(metrics.clone()),
        Box::new(AllDevices),
    )
}

fn gauge(m: &Metrics, name: &str) -> Option<String> {
    let text = m.encode();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")).map(str::to_string))
}

fn ids(e: &Engine<FakePlacer>) -> Vec<String> {
    e.records().containers.keys().cloned().collect()
}

#[test]
fn a_full_state_disk_admits_every_container_and_space_back_persists_the_live_records() {
    let Some(fs) = Mounted::tmpfs("engine::diskfull", 512) else {
        return;
    };
    let dir = fs.root.join("state");
    let m = Arc::new(Metrics::new());
    let mut e = engine_on(&dir, &m);
    assert_eq!(e.start(), StartState::Fresh);
    for c in [ctr("x1", "a", 2, &[]), ctr("s0", "a", 0, &[])] {
        e.create_container(&pod("a"), &c)
            .expect("ok")
            .expect("placed");
    }
    assert_eq!(
        gauge(&m, "nri_align_state_write_failing").as_deref(),
        Some("0")
    );
    fs.fill();

    // Full: every creation is admitted and placed as before, none slower for it.
    let started = Instant::now();
    let x2 = e
        .create_container(&pod("a"), &ctr("x2", "a", 2, &[]))
        .expect("admitted on a full disk")
        .expect("placed");
    assert_eq!(x2.adjustment.cpuset_cpus.to_string(), "2-3");
    for i in 1..=40 {
        e.create_container(&pod("a"), &ctr(&format!("s{i}"), "a", 0, &[]))
            .expect("admitted on a full disk")
            .expect("placed");
    }
    eprintln!(
        "a creation while the state disk is full: {:?}",
        started.elapsed() / 41
    );
    // One failed write counted, the 80 that followed within the retry delay not.
    assert_eq!(
        gauge(&m, "nri_align_state_write_failing").as_deref(),
        Some("1")
    );
    assert_eq!(
        gauge(&m, "nri_align_state_write_failures_total").as_deref(),
        Some("1")
    );
    // Released during the outage.
    e.release_container("x1");
    e.release_container("s1");
    drop(e); // the daemon restarts, the disk still full

    // It starts from what the file has (x1 and s0, written before the disk filled, and the
    // first creations after it whose lines still fitted in the log's last page) and
    // Synchronize gives it what runs.
    let m = Arc::new(Metrics::new());
    let mut e = engine_on(&dir, &m);
    let StartState::Restored { restored, dropped } = e.start() else {
        panic!("the log is readable");
    };
    assert!(
        restored >= 2 && dropped.is_empty(),
        "{restored} {dropped:?}"
    );
    assert!(e.records().containers.contains_key("x1"));
    let mut live = vec![ctr("x2", "a", 2, &[])];
    live[0].resources.cpuset_cpus = "2-3".into();
    for i in 2..=40 {
        let mut c = ctr(&format!("s{i}"), "a", 0, &[]);
        c.resources.cpuset_cpus = "0-1,4-7".into();
        live.push(c);
    }
    e.synchronize(&[pod("a")], &live);
    e.create_container(&pod("a"), &ctr("s41", "a", 0, &[]))
        .expect("admitted")
        .expect("placed");
    assert_eq!(
        gauge(&m, "nri_align_state_write_failing").as_deref(),
        Some("1")
    );

    // Space back: the first event after the retry delay persists every live record.
    fs.free();
    std::thread::sleep(Duration::from_millis(150));
    e.create_container(&pod("a"), &ctr("s42", "a", 0, &[]))
        .expect("admitted")
        .expect("placed");
    assert_eq!(
        gauge(&m, "nri_align_state_write_failing").as_deref(),
        Some("0")
    );
    let want = ids(&e);
    assert!(!want.contains(&"x1".to_string()) && !want.contains(&"s1".to_string()));
    assert_eq!(want.len(), 1 + 39 + 2);
    let held = e.records().containers["x2"].assignment.cpus.clone();
    drop(e);

    let m = Arc::new(Metrics::new());
    let mut e = engine_on(&dir, &m);
    assert_eq!(
        e.start(),
        StartState::Restored {
            restored: want.len(),
            dropped: vec![]
        }
    );
    assert_eq!(
        ids(&e),
        want,
        "exactly the live records, none released comes back"
    );
    assert_eq!(e.records().containers["x2"].assignment.cpus, held);
}

#[test]
fn without_an_event_the_retry_persists_once_space_is_back_and_wakes_once_per_outage() {
    let Some(fs) = Mounted::tmpfs("engine::diskfull::retry", 512) else {
        return;
    };
    let dir = fs.root.join("state");
    let m = Arc::new(Metrics::new());
    let mut e = engine_on(&dir, &m);
    let wakes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let w = wakes.clone();
    e.set_outage_hook(Box::new(move || {
        w.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }));
    let woken = || wakes.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(e.start(), StartState::Fresh);
    e.create_container(&pod("a"), &ctr("s0", "a", 0, &[]))
        .expect("ok")
        .expect("placed");
    assert_eq!(
        e.retry_persist(),
        None,
        "nothing to retry while writes succeed"
    );
    fs.fill();
    // Enough that the lines outgrow the room left in the log's last page.
    for i in 1..=40 {
        e.create_container(&pod("a"), &ctr(&format!("s{i}"), "a", 0, &[]))
            .expect("admitted")
            .expect("placed");
    }
    assert_eq!(
        woken(),
        1,
        "woken when the outage starts, not per failed write"
    );
    // Still full: the timer's tries fail, quietly.
    std::thread::sleep(Duration::from_millis(120));
    assert!(e.retry_persist().is_some());
    assert_eq!(
        gauge(&m, "nri_align_state_write_failing").as_deref(),
        Some("1")
    );
    fs.free();
    std::thread::sleep(Duration::from_millis(120));
    // No event: the retry alone persists every live record and ends the outage.
    assert_eq!(e.retry_persist(), None);
    assert_eq!(
        gauge(&m, "nri_align_state_write_failing").as_deref(),
        Some("0")
    );
    assert_eq!(woken(), 1);
    let want = ids(&e);
    drop(e);
    let m = Arc::new(Metrics::new());
    let mut e = engine_on(&dir, &m);
    e.start();
    assert_eq!(ids(&e), want);
    assert_eq!(want.len(), 41);
}
