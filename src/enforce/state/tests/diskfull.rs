//! The store on a state dir whose filesystem fills up (a tmpfs of a few MB: ENOSPC) or turns
//! read-only after an error (ext4 with `errors=remount-ro`: EROFS), then recovers. Root only
//! (`testfs.rs` skips with a reason otherwise).

use std::time::{Duration, Instant};

use super::super::*;
use test_support::testfs::Mounted;

fn record(id: &str, cpus: &str) -> Record {
    let cpus: CpuSet = cpus.parse().expect("set");
    Record {
        assignment: Assignment {
            container_id: id.into(),
            cpus: cpus.clone(),
            exclusive: true,
            ..Default::default()
        },
        pod_sandbox_id: format!("pod-{id}"),
        namespace: "ns".into(),
        cgroups_path: format!("/kubepods/pod-{id}/{id}"),
        applied_cpus: cpus,
        ..Record::default()
    }
}

fn table(prefix: &str, n: usize) -> Records {
    let mut t = Records::new();
    for i in 0..n {
        let id = format!("{prefix}{i}");
        t.insert(id.clone(), record(&id, &format!("{}", 2 + i % 60)));
    }
    t
}

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("ls")
        .filter_map(|e| e.ok().and_then(|e| e.file_name().into_string().ok()))
        .collect();
    v.sort();
    v
}

/// What a restart would load from `dir` (read-only: no rewrite, no lock).
fn on_disk(dir: &std::path::Path) -> Records {
    match StateStore::open_read_only(dir).expect("reader").load() {
        Loaded::Doc(d) => d.containers,
        other => panic!("expected records, got {other:?}"),
    }
}

fn os_error(e: &StateError) -> Option<i32> {
    match e {
        StateError::Io { source, .. } => source.raw_os_error(),
        StateError::File(crate::host::files::FileError::Io { source, .. }) => source.raw_os_error(),
        _ => None,
    }
}

fn same_ids(a: &Records, b: &Records) -> bool {
    a.keys().eq(b.keys())
}

#[test]
fn a_full_disk_fails_one_write_then_waits_and_the_first_write_once_space_is_back_persists_all() {
    let Some(fs) = Mounted::tmpfs("state::tests::diskfull::full", 16 << 10) else {
        return;
    };
    let dir = fs.root.join("state");
    let mut store = StateStore::open(&dir).expect("open");
    assert!(matches!(store.load(), Loaded::Fresh));
    store.set_retry_after(Duration::from_millis(400));
    let mut t = table("c", 5000);
    store.write(&mut t).expect("5,000 records");
    let before = t.clone();
    fs.fill();

    // The first write fails with the filesystem's own error (more than the room left in the
    // log's last page).
    for i in 0..100 {
        t.insert(format!("m{i}"), record(&format!("m{i}"), "70"));
    }
    let e = store.write(&mut t).expect_err("full");
    assert_eq!(os_error(&e), Some(nix::libc::ENOSPC), "{e}");
    assert_eq!(store.outage().map(|o| o.attempts), Some(1));
    // The next ones, until the retry, cost no I/O at all: no rewrite of 5,000 records each.
    let started = Instant::now();
    for i in 1..200 {
        t.insert(format!("n{i}"), record(&format!("n{i}"), "71"));
        t.remove(&format!("c{i}"));
        let e = store.write(&mut t).expect_err("waiting");
        assert!(matches!(e, StateError::Deferred { .. }), "{e}");
    }
    let per_write = started.elapsed() / 199;
    eprintln!("a write while the disk is full and the retry is not due: {per_write:?}");
    assert!(per_write < Duration::from_millis(1), "{per_write:?}");
    // Released during the outage: must not come back.
    t.remove("c0");
    let _ = store.write(&mut t);
    // What was persisted before is all there, the failed append's torn tail dropped.
    let read = on_disk(&dir);
    assert!(
        before.keys().all(|id| read.contains_key(id)),
        "records persisted before the fault are kept"
    );
    assert!(
        read.keys()
            .all(|id| before.contains_key(id) || id.starts_with('m')),
        "at most whole lines of the failed append got in"
    );

    // The retry, disk still full: fails again and leaves no temp file.
    std::thread::sleep(Duration::from_millis(450));
    let started = Instant::now();
    let e = store.write(&mut t).expect_err("still full");
    eprintln!(
        "a retry (whole rewrite) on the full disk: {:?}",
        started.elapsed()
    );
    assert_eq!(os_error(&e), Some(nix::libc::ENOSPC), "{e}");
    assert_eq!(
        names(&dir),
        vec![STATE_FILE.to_string()],
        "no temp file left"
    );
    // The retry had no changes of its own (all were taken by the deferred writes): it fails
    // and loses nothing more, as the daemon's timer retries.
    let o = store.outage().expect("failing").clone();
    assert_eq!((o.attempts, o.lost_writes), (2, 201));

    // Space back: the first write after the delay, changes or not, rewrites every live record.
    fs.free();
    std::thread::sleep(Duration::from_millis(450));
    store.write(&mut t).expect("space is back");
    let ended = store.take_recovered().expect("the outage ended");
    assert_eq!(ended.attempts, 2);
    assert!(store.outage().is_none() && store.take_recovered().is_none());
    drop(store);
    let mut again = StateStore::open(&dir).expect("restart");
    match again.load() {
        Loaded::Doc(d) => {
            assert!(same_ids(&d.containers, &t), "exactly the live records");
            assert_eq!(d.containers, t);
            assert!(!d.containers.contains_key("c0"), "a release stays released");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(names(&dir), vec![STATE_FILE.to_string()]);
}

#[test]
fn a_short_append_leaves_a_readable_log_and_a_restart_while_the_disk_is_full_starts() {
    let Some(fs) = Mounted::tmpfs("state::tests::diskfull::short", 256) else {
        return;
    };
    let dir = fs.root.join("state");
    let mut store = StateStore::open(&dir).expect("open");
    store.load();
    let mut t = table("a", 20);
    store.write(&mut t).expect("write");
    let before = t.clone();
    let size = std::fs::metadata(store.path()).expect("stat").len();
    fs.fill();
    // One event with many lines: the end of the log's last page takes part of them.
    for i in 0..200 {
        t.insert(format!("b{i}"), record(&format!("b{i}"), "9"));
    }
    let e = store.write(&mut t).expect_err("full");
    assert_eq!(os_error(&e), Some(nix::libc::ENOSPC), "{e}");
    let torn = std::fs::read(store.path()).expect("read");
    assert!(torn.len() as u64 > size, "part of the append was written");
    assert!(!torn.ends_with(b"\n"), "and it ends inside a line");

    // nri-align restarts, the disk still full: it opens, loads, and goes on.
    drop(store);
    let mut store = StateStore::open(&dir).expect("restart on a full disk");
    store.set_retry_after(Duration::ZERO);
    let loaded = match store.load() {
        Loaded::Doc(d) => d.containers,
        other => panic!("{other:?}"),
    };
    assert!(before.iter().all(|(id, r)| loaded.get(id) == Some(r)));
    assert!(
        loaded.keys().all(|id| t.contains_key(id)),
        "whole lines only"
    );
    let o = store
        .outage()
        .expect("the load could not rewrite the torn log");
    assert!(o.error.contains("No space left"), "{}", o.error);
    assert_eq!(
        names(&dir),
        vec![STATE_FILE.to_string()],
        "no temp file left"
    );

    // Space back: the next write replaces the torn log with every live record.
    fs.free();
    store.write(&mut t).expect("space back");
    assert!(store.take_recovered().is_some());
    drop(store);
    assert_eq!(on_disk(&dir), t);
    let text = std::fs::read(dir.join(STATE_FILE)).expect("read");
    assert!(text.ends_with(b"\n"));
}

#[test]
fn a_failed_compaction_is_retried_whole_so_a_record_removed_then_does_not_come_back() {
    let Some(fs) = Mounted::tmpfs("state::tests::diskfull::compaction", 2048) else {
        return;
    };
    let dir = fs.root.join("state");
    let mut store = StateStore::open(&dir).expect("open");
    store.load();
    store.set_retry_after(Duration::ZERO);
    let mut t = table("r", 10);
    store.write(&mut t).expect("write");
    // Changes until the next one compacts the log.
    let mut k = 0;
    while store.lines() < 2 * t.len() + super::super::store::COMPACT_SLACK {
        k += 1;
        t.get_mut("r9").expect("r9").applied_cpus = format!("{}", 3 + k % 2).parse().expect("set");
        store.write(&mut t).expect("append");
    }
    fs.fill();
    t.remove("r0");
    let e = store.write(&mut t).expect_err("the compaction fails");
    assert_eq!(os_error(&e), Some(nix::libc::ENOSPC), "{e}");
    assert_eq!(
        names(&dir),
        vec![STATE_FILE.to_string()],
        "no temp file left"
    );
    fs.free();
    // Many new records in one write (a Synchronize): no longer due for compaction by size,
    // it must rewrite anyway, or the removal of r0 is in no file and r0 comes back.
    for i in 0..50 {
        t.insert(format!("s{i}"), record(&format!("s{i}"), "5"));
    }
    store.write(&mut t).expect("space back");
    drop(store);
    let read = on_disk(&dir);
    assert!(!read.contains_key("r0"), "a removed record came back");
    assert_eq!(read, t);
}

#[test]
fn a_read_only_filesystem_fails_writes_fast_and_a_restart_on_it_loads_what_was_persisted() {
    let Some(mut fs) = Mounted::ext4("state::tests::diskfull::erofs", 16) else {
        return;
    };
    let dir = fs.root.join("state");
    let mut store = StateStore::open(&dir).expect("open");
    store.load();
    let mut t = table("e", 300);
    store.write(&mut t).expect("write");
    let before = t.clone();
    // Committed by the journal, as a log written more than a few seconds before the error
    // is (what ext4 had not committed when it aborts is lost: the log as of the last commit
    // comes back, or none, and Synchronize rebuilds the rest).
    nix::unistd::sync();
    fs.fail_ext4();

    t.remove("e0");
    t.insert("x".into(), record("x", "7"));
    let e = store.write(&mut t).expect_err("read-only");
    assert_eq!(os_error(&e), Some(nix::libc::EROFS), "{e}");
    t.insert("y".into(), record("y", "8"));
    assert!(matches!(
        store.write(&mut t),
        Err(StateError::Deferred { .. })
    ));

    // A restart while it is read-only: the dir opens (and locks), the log loads as it was.
    drop(store);
    let mut store = StateStore::open(&dir).expect("restart on a read-only filesystem");
    store.set_retry_after(Duration::ZERO);
    match store.load() {
        Loaded::Doc(d) => assert_eq!(d.containers, before),
        other => panic!("{other:?}"),
    }
    let mut live = t.clone();
    live.mark_dirty("e0");
    for id in ["x", "y"] {
        live.mark_dirty(id);
    }
    let started = Instant::now();
    let e = store.write(&mut live).expect_err("still read-only");
    eprintln!(
        "a rewrite tried on the read-only filesystem: {:?}",
        started.elapsed()
    );
    assert_eq!(os_error(&e), Some(nix::libc::EROFS), "{e}");
    drop(store);

    // Repaired (unmount, fsck, mount): the log persisted before the error is whole, and the
    // next write brings it up to date.
    fs.repair_ext4();
    let mut store = StateStore::open(&dir).expect("after the repair");
    match store.load() {
        Loaded::Doc(d) => assert_eq!(d.containers, before),
        other => panic!("{other:?}"),
    }
    let mut live = t.clone();
    for id in ["e0", "x", "y"] {
        live.mark_dirty(id);
    }
    store.write(&mut live).expect("writable again");
    drop(store);
    assert_eq!(on_disk(&dir), t);
}

#[test]
fn a_state_dir_that_cannot_be_created_waits_in_memory_and_is_created_once_it_can() {
    let Some(fs) = Mounted::tmpfs("state::tests::diskfull::uncreatable", 256) else {
        return;
    };
    let dir = fs.root.join("var/lib/nri-align");
    fs.set_read_only(true);
    let e = StateStore::open(&dir).expect_err("open refuses it");
    assert_eq!(os_error(&e), Some(nix::libc::EROFS), "{e}");
    assert!(e.is_outage(), "{e}");
    let mut store = StateStore::open_or_wait(&dir).expect("the daemon waits for it");
    store.set_retry_after(Duration::from_millis(100));
    assert!(!store.is_open() && !store.exists());
    assert!(matches!(store.load(), Loaded::Fresh));
    let o = store.outage().expect("an outage from the start").clone();
    assert!(o.error.contains("Read-only file system"), "{}", o.error);
    assert_eq!((o.attempts, o.lost_writes), (1, 0));
    let mut t = table("m", 30);
    assert!(matches!(
        store.write(&mut t),
        Err(StateError::Deferred { .. })
    ));
    // Due (the first retry waits the default delay, set at open): tried, still read-only.
    let due = store.retry_in().expect("failing");
    assert!(due > Duration::ZERO && due <= RETRY_AFTER, "{due:?}");
    std::thread::sleep(due);
    assert_eq!(store.retry_in(), Some(Duration::ZERO));
    t.remove("m0");
    let e = store.write(&mut t).expect_err("still read-only");
    assert_eq!(os_error(&e), Some(nix::libc::EROFS), "{e}");
    assert!(!dir.exists());

    // Writable: the next try (no change of its own, as the daemon's timer makes it) creates
    // the dir and writes every live record.
    fs.set_read_only(false);
    std::thread::sleep(Duration::from_millis(150));
    store.write(&mut t).expect("created");
    assert!(store.is_open() && store.outage().is_none());
    let ended = store.take_recovered().expect("the outage ended");
    assert_eq!((ended.attempts, ended.lost_writes), (2, 2));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&dir).expect("dir").permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(on_disk(&dir), t);
    // And it is the store's dir now: locked, appended to.
    assert!(StateStore::open(&dir).is_err(), "locked");
    t.insert("n".into(), record("n", "9"));
    store.write(&mut t).expect("append");
    drop(store);
    assert_eq!(on_disk(&dir), t);
}

/// A state log that appears in the dir while the daemon waits for it (restored by hand, or
/// a dir that could not be read at start) was never loaded: it is kept aside, not replaced.
#[test]
fn a_log_found_when_the_dir_opens_late_is_kept_aside_not_overwritten() {
    let Some(fs) = Mounted::tmpfs("state::tests::diskfull::late-log", 256) else {
        return;
    };
    let dir = fs.root.join("var/lib/nri-align");
    fs.set_read_only(true);
    let mut store = StateStore::open_or_wait(&dir).expect("the daemon waits for it");
    store.set_retry_after(Duration::from_millis(50));
    fs.set_read_only(false);
    // Meanwhile a log of earlier decisions lands in the dir (another store writes it).
    let earlier = table("old", 5);
    {
        let mut other = StateStore::open(&dir).expect("other");
        other.write(&mut earlier.clone()).expect("earlier log");
    }
    let old_log = std::fs::read(dir.join(STATE_FILE)).expect("earlier log on disk");
    // The first retry waits the delay set at open.
    std::thread::sleep(store.retry_in().expect("waiting"));
    let mut t = table("m", 3);
    store.write(&mut t).expect("opened and written");
    assert_eq!(on_disk(&dir), t, "the live records are the log now");
    let kept = std::fs::read(dir.join(format!("{STATE_FILE}.unloaded"))).expect("kept aside");
    assert_eq!(kept, old_log, "the unloaded log is kept byte for byte");
}

/// While the store waits for its dir, the dir itself may go wrong (here a file put in its
/// place): that failure is told apart from the filesystem's condition (it does not pass by
/// itself), kept as the latest beside the first, and the store still recovers once it is
/// put right.
#[test]
fn a_dir_gone_wrong_while_waiting_is_told_apart_from_the_filesystem_condition() {
    let Some(fs) = Mounted::tmpfs("state::tests::diskfull::gone-wrong", 256) else {
        return;
    };
    let dir = fs.root.join("var/lib/nri-align");
    fs.set_read_only(true);
    let mut store = StateStore::open_or_wait(&dir).expect("the daemon waits for it");
    store.set_retry_after(Duration::from_millis(50));
    let o = store.outage().expect("waiting").clone();
    assert!(
        o.latest_passes && !o.kind_changed && o.latest == o.error,
        "{o:?}"
    );
    fs.set_read_only(false);
    std::fs::create_dir_all(dir.parent().expect("parent")).expect("parent");
    std::fs::write(&dir, b"not a dir").expect("a file in its place");
    let mut t = table("m", 3);
    std::thread::sleep(store.retry_in().expect("waiting"));
    let e = store.write(&mut t).expect_err("not a directory");
    assert!(!e.is_outage(), "{e}");
    let o = store.outage().expect("still failing").clone();
    assert!(o.kind_changed && !o.latest_passes, "{o:?}");
    assert!(o.error.contains("Read-only file system"), "{o:?}");
    assert_eq!(o.latest, e.to_string());
    // The same wrong dir again: no change of kind.
    std::thread::sleep(store.retry_in().expect("waiting"));
    store.write(&mut t).expect_err("still not a directory");
    assert!(!store.outage().expect("failing").kind_changed);
    std::fs::remove_file(&dir).expect("put right");
    std::thread::sleep(store.retry_in().expect("waiting"));
    store.write(&mut t).expect("created and written");
    assert!(store.outage().is_none());
    assert_eq!(on_disk(&dir), t);
}
