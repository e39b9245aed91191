//! The store on a real directory: round trips, the append-only log and its compaction, the
//! 0.1.0 migration, damaged files, and hostile directories (planted symlinks,
//! group-writable or foreign dirs, a second daemon).

use std::os::unix::fs::PermissionsExt;

use super::*;

// The store on a filesystem that fills up or turns read-only (root only), and its properties.
mod diskfull;
mod props;

fn record(id: &str, cpus: &str) -> Record {
    let cpus: CpuSet = cpus.parse().expect("set");
    Record {
        assignment: Assignment {
            container_id: id.into(),
            cpus: cpus.clone(),
            exclusive: true,
            gpus: vec!["0000:1b:00.0".into()],
            ..Default::default()
        },
        pod_sandbox_id: "pod".into(),
        namespace: "ns".into(),
        cgroups_path: format!("/k8s.io/{id}"),
        applied_cpus: cpus,
        devices: vec!["/dev/nvidia0".into()],
        resources: ResourceSummary::default(),
        ..Record::default()
    }
}

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("ls")
        .filter_map(|e| e.ok().and_then(|e| e.file_name().into_string().ok()))
        .collect();
    v.sort();
    v
}

fn loaded(store: &mut StateStore) -> Records {
    match store.load() {
        Loaded::Doc(d) => d.containers,
        other => panic!("expected records, got {other:?}"),
    }
}

#[test]
fn writes_append_only_what_changed_and_reload_the_same_records() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("state");
    let mut store = StateStore::open(&path).expect("open");
    assert!(matches!(store.load(), Loaded::Fresh));
    let mut t = Records::new();
    t.insert("a".into(), record("a", "2-3"));
    t.insert("b".into(), record("b", "4"));
    store.write(&mut t).expect("first write");
    let size = std::fs::metadata(store.path()).expect("stat").len();
    t.insert("c".into(), record("c", "5"));
    t.remove("a");
    store.write(&mut t).expect("second write");
    // Appended: what was there stays byte for byte, and two lines (put c, del a) follow it,
    // shorter than the first write's two records plus its header.
    let now = std::fs::read(store.path()).expect("read");
    let text = String::from_utf8(now.clone()).expect("utf8");
    let grown = now.len() as u64 - size;
    assert!(grown < size, "only the two changes were appended: {text}");
    assert_eq!(text.lines().count(), 5, "header, a, b, c, del a: {text}");
    assert!(
        text.lines().any(|l| l.ends_with(r#"{"del":"a"}"#)),
        "{text}"
    );
    store.write(&mut t).expect("nothing to write");
    assert_eq!(store.lines(), 4);
    drop(store);
    let mut again = StateStore::open(&path).expect("reopen");
    assert_eq!(loaded(&mut again), t);
    assert_eq!(
        names(&path),
        vec![STATE_FILE.to_string()],
        "no temp file left"
    );
    let mode = std::fs::metadata(again.path())
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn the_log_is_compacted_once_it_holds_twice_the_live_records() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut store = StateStore::open(dir.path()).expect("open");
    let mut t = Records::new();
    t.insert("keep".into(), record("keep", "1"));
    store.write(&mut t).expect("write");
    for i in 0..3000 {
        t.get_mut("keep").expect("keep").applied_cpus = CpuSet::from_iter([i % 7]);
        store.write(&mut t).expect("write");
        assert!(store.lines() <= 2 * t.len() + 1024 + 1, "{}", store.lines());
    }
    drop(store);
    let mut again = StateStore::open(dir.path()).expect("reopen");
    assert_eq!(loaded(&mut again), t);
}

#[test]
fn a_torn_tail_is_dropped_and_the_log_rewritten() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut store = StateStore::open(dir.path()).expect("open");
    let mut t = Records::new();
    t.insert("a".into(), record("a", "1"));
    store.write(&mut t).expect("write");
    t.insert("b".into(), record("b", "2"));
    store.write(&mut t).expect("write");
    drop(store);
    let full = std::fs::read(dir.path().join(STATE_FILE)).expect("read");
    std::fs::write(dir.path().join(STATE_FILE), &full[..full.len() - 10]).expect("cut");
    let mut store = StateStore::open(dir.path()).expect("open");
    let back = loaded(&mut store);
    assert_eq!(back.keys().collect::<Vec<_>>(), vec!["a"]);
    // The next change starts on a line of its own.
    let mut back = back;
    back.insert("c".into(), record("c", "3"));
    store.write(&mut back).expect("write");
    drop(store);
    let mut store = StateStore::open(dir.path()).expect("open");
    assert_eq!(
        loaded(&mut store).keys().collect::<Vec<_>>(),
        vec!["a", "c"]
    );
}

#[test]
fn files_set_aside_keep_the_earlier_ones_up_to_a_bound() {
    let dir = tempfile::tempdir().expect("tmp");
    // Six unusable logs in a row (a rollback each time): the four latest stay, newest first.
    for n in 0..6 {
        let mut store = StateStore::open(dir.path()).expect("open");
        std::fs::write(store.path(), format!("nri-align state log {}\n", 10 + n)).expect("write");
        assert!(matches!(store.load(), Loaded::Corrupt(_)));
    }
    let kept = |name: &str| std::fs::read_to_string(dir.path().join(name)).ok();
    for (name, layout) in [
        ("state.log.corrupt", 15),
        ("state.log.corrupt.1", 14),
        ("state.log.corrupt.2", 13),
        ("state.log.corrupt.3", 12),
    ] {
        assert_eq!(
            kept(name),
            Some(format!("nri-align state log {layout}\n")),
            "{name}"
        );
    }
    assert_eq!(kept("state.log.corrupt.4"), None);
}

#[test]
fn corrupt_and_future_files_are_reported_set_aside_and_replaced() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut store = StateStore::open(dir.path()).expect("open");
    std::fs::write(store.path(), "nri-align state log 9\n").expect("write");
    assert!(matches!(store.load(), Loaded::Corrupt(m) if m.contains("layout 9")));
    assert!(dir.path().join("state.log.corrupt").exists());
    let mut t = Records::new();
    t.insert("a".into(), record("a", "1"));
    store.write(&mut t).expect("a new log");
    drop(store);
    let mut store = StateStore::open(dir.path()).expect("open");
    assert_eq!(loaded(&mut store), t);
    drop(store);
    std::fs::remove_file(dir.path().join(STATE_FILE)).expect("rm");
    std::fs::write(dir.path().join(LEGACY_FILE), "{\"version\": 1, \"contai").expect("write");
    let mut store = StateStore::open(dir.path()).expect("open");
    assert!(matches!(store.load(), Loaded::Corrupt(m) if m.contains("not valid state")));
    std::fs::write(
        dir.path().join(LEGACY_FILE),
        "{\"version\": 9, \"containers\": {}}",
    )
    .expect("write");
    assert!(matches!(store.load(), Loaded::Corrupt(m) if m.contains("version 9")));
}

#[test]
fn a_0_1_0_document_is_migrated_to_the_log_on_first_start() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/state-0.1.0/state.json");
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::copy(&fixture, dir.path().join(LEGACY_FILE)).expect("copy");
    let mut store = StateStore::open(dir.path()).expect("open");
    let first = loaded(&mut store);
    assert_eq!(first.len(), 3);
    assert_eq!(
        names(dir.path()),
        vec!["state.json.migrated".to_string(), STATE_FILE.to_string()]
    );
    drop(store);
    let mut store = StateStore::open(dir.path()).expect("open");
    let second = loaded(&mut store);
    assert_eq!(second, first, "the log holds what the document held");
    let log = std::fs::read_to_string(dir.path().join(STATE_FILE)).expect("read");
    assert!(log.starts_with("nri-align state log 3\n"), "{log}");
    // A reader sees the document as it is, and migrates nothing.
    let ro = tempfile::tempdir().expect("tmp");
    std::fs::copy(&fixture, ro.path().join(LEGACY_FILE)).expect("copy");
    let mut reader = StateStore::open_read_only(ro.path()).expect("open");
    assert_eq!(loaded(&mut reader).len(), 3);
    assert_eq!(names(ro.path()), vec![LEGACY_FILE.to_string()]);
}

// Each of these failed on 0.1.0's store (it wrote through a planted
// `.state.json.<pid>.tmp` symlink, accepted group-writable and foreign dirs, and let a second
// daemon write the same file).

#[test]
fn a_planted_symlink_is_never_written_through() {
    let dir = tempfile::tempdir().expect("tmp");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).expect("mkdir");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").expect("write");
    // The names 0.1.0 would have used, and the log itself, all pointing at the victim.
    for name in [
        format!(".state.json.{}.tmp", std::process::id()),
        format!(".state.log.{}.tmp", std::process::id()),
        STATE_FILE.to_string(),
    ] {
        std::os::unix::fs::symlink(&victim, state.join(name)).expect("symlink");
    }
    let mut store = StateStore::open(&state).expect("open");
    assert!(
        matches!(store.load(), Loaded::Corrupt(m) if m.contains("symlink")),
        "the planted log is refused"
    );
    let mut t = Records::new();
    t.insert("a".into(), record("a", "1"));
    store.write(&mut t).expect("write");
    t.insert("b".into(), record("b", "2"));
    store.write(&mut t).expect("append");
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");
    assert!(!std::fs::symlink_metadata(store.path())
        .expect("stat")
        .file_type()
        .is_symlink());
    drop(store);
    let mut store = StateStore::open(&state).expect("open");
    assert_eq!(loaded(&mut store), t);
}

#[test]
fn group_writable_world_writable_and_foreign_dirs_are_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    for (mode, want) in [(0o770, "group-writable"), (0o777, "world-writable")] {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).expect("chmod");
        let err = StateStore::open(dir.path()).expect_err("refused");
        assert!(err.to_string().contains(want), "{err}");
        let err = StateStore::open_read_only(dir.path()).expect_err("refused");
        assert!(err.to_string().contains(want), "{err}");
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    assert!(StateStore::open(dir.path()).is_ok());
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(dir.path(), Some(4242), None).expect("chown");
        let err = StateStore::open(dir.path()).expect_err("refused");
        assert!(err.to_string().contains("owned by uid 4242"), "{err}");
    } else {
        test_support::skip::skip(
            "group_writable_world_writable_and_foreign_dirs_are_refused",
            "the foreign-owner half needs root to chown",
        );
    }
}

#[test]
fn a_second_daemon_on_the_same_state_dir_fails_at_start() {
    let dir = tempfile::tempdir().expect("tmp");
    let first = StateStore::open(dir.path()).expect("first");
    let err = StateStore::open(dir.path()).expect_err("second");
    assert!(
        err.to_string().contains("in use by another process"),
        "{err}"
    );
    assert!(
        StateStore::open_read_only(dir.path()).is_ok(),
        "verify still reads"
    );
    drop(first);
    assert!(StateStore::open(dir.path()).is_ok());
}

#[test]
fn a_crashed_compaction_leaves_nothing_behind() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::fs::write(dir.path().join(".state.log.0123456789abcdef.tmp"), "half").expect("write");
    let _store = StateStore::open(dir.path()).expect("open");
    assert!(names(dir.path()).is_empty());
}

/// A shared record made from a running container, with its reason as record_as_running
/// writes it.
fn found_running(id: &str, cpus: &str, flagged: bool) -> Record {
    let mut r = record(id, cpus);
    r.assignment.exclusive = false;
    r.assignment.gpus.clear();
    r.devices.clear();
    r.assignment.reason = format!("{RECORDED_AS_RUNNING} (node default policy shown)");
    r.found_running = flagged;
    r
}

#[test]
fn records_of_earlier_versions_recorded_as_running_load_with_the_flag() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("state");
    let mut store = StateStore::open(&path).expect("open");
    assert!(matches!(store.load(), Loaded::Fresh));
    // What a version before the flag wrote: the reason alone says it, no field.
    let mut t = Records::new();
    t.insert("old".into(), found_running("old", "4-7", false));
    t.insert("decided".into(), record("decided", "2"));
    store.write(&mut t).expect("write");
    let text = std::fs::read_to_string(store.path()).expect("read");
    assert!(!text.contains("found_running"), "{text}");
    assert!(text.contains(RECORDED_AS_RUNNING), "{text}");
    drop(store);
    let mut store = StateStore::open(&path).expect("restart");
    let back = loaded(&mut store);
    assert!(back["old"].found_running, "upgraded at load");
    assert!(!back["decided"].found_running);
    let mut back = back;
    assert!(back.take_dirty().is_empty(), "a load changes nothing");
    // A version that knows the flag reads one more field it does not know (this version
    // reading a newer log, or an older one reading this one's `found_running`).
    let mut rec = serde_json::to_value(record("next", "3")).expect("json");
    rec["a_later_field"] = 7.into();
    let json = serde_json::json!({"put": "next", "rec": rec}).to_string();
    let sum = twox_hash::XxHash64::oneshot(0, json.as_bytes());
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(store.path())
        .expect("log");
    std::io::Write::write_all(&mut f, format!("{sum:016x} {json}\n").as_bytes()).expect("append");
    drop(store);
    let mut store = StateStore::open(&path).expect("restart");
    let back = loaded(&mut store);
    assert!(back.contains_key("next"), "{back:?}");
}

#[test]
fn the_found_running_flag_round_trips_alone_and_as_a_group_follower() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("state");
    let mut store = StateStore::open(&path).expect("open");
    store.load();
    let mut t = Records::new();
    // Flagged with a reason that says nothing of it: the flag alone is kept.
    let mut plain = found_running("flagged", "4-7", true);
    plain.assignment.reason = "anything".into();
    t.insert("flagged".into(), plain);
    t.insert("unflagged".into(), record("unflagged", "2"));
    store.write(&mut t).expect("write");
    // The shared group moves whole: the log says it in one group line and rewrites the
    // flagged member as a follower (without its own cpuset), flag included.
    let key = t["flagged"].group_key().expect("shared");
    t.move_group(&key, &"5-7".parse().expect("cpus"), None, |_| {});
    store.write(&mut t).expect("move");
    let text = std::fs::read_to_string(store.path()).expect("read");
    assert!(text.contains(r#""found_running":true"#), "{text}");
    assert!(text.contains(r#""follows":true"#), "{text}");
    drop(store);
    let mut store = StateStore::open(&path).expect("restart");
    let back = loaded(&mut store);
    assert_eq!(back, t);
    assert!(back["flagged"].found_running && !back["unflagged"].found_running);
    // And a compaction (a new log, one line per group and record) keeps it too.
    store
        .save(&StateDoc {
            version: STATE_VERSION,
            containers: t.clone(),
        })
        .expect("compact");
    drop(store);
    let mut store = StateStore::open(&path).expect("restart");
    assert_eq!(loaded(&mut store), t);
}

/// What `open_or_wait` still refuses at once, as `open` does: a state dir set up wrong is a
/// configuration error, not an outage to wait out.
#[test]
fn a_wrong_state_dir_still_fails_at_start_for_the_daemon() {
    let t = tempfile::tempdir().expect("tmp");
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let file = t.path().join("a-file");
    std::fs::write(&file, "x").expect("write");
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    let link = t.path().join("link");
    std::os::unix::fs::symlink(t.path().join("missing"), &link).expect("symlink");
    let open = t.path().join("group-writable");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o770)).expect("chmod");
    let held = t.path().join("held");
    let _first = StateStore::open(&held).expect("first");
    for (dir, want) in [
        (file.clone(), "Not a directory"),
        (file.join("below"), "Not a directory"),
        (link, "File exists"),
        (open, "group-writable"),
        (held, "in use by another process"),
    ] {
        let err = StateStore::open_or_wait(&dir).expect_err("refused");
        assert!(!err.is_outage(), "{err}");
        assert!(err.to_string().contains(want), "{}: {err}", dir.display());
    }
    // A symlink to a directory is followed as `open` always did (and checked there).
    let to_dir = t.path().join("to-dir");
    std::os::unix::fs::symlink(&elsewhere, &to_dir).expect("symlink");
    assert!(StateStore::open_or_wait(&to_dir).expect("open").is_open());
}
