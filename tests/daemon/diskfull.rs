//! The release daemon, driven over its NRI socket by a simulated runtime (the runtime side of
//! `crates/nri-protocol`'s tests), with its state dir on a real tmpfs that fills up and is
//! freed again (root only: skipped with the reason otherwise):
//! - while the disk is full, every CreateContainer is answered with its placement, at the
//!   usual cost; the failure is logged once, not per event, and
//!   `nri_align_state_write_failing` says it;
//! - once space is back, the daemon persists every live record within seconds without any
//!   event (its retry timer), a container removed during the outage included, and logs the
//!   recovery once;
//! - a restart reloads exactly those records.

use std::time::{Duration, Instant};

use nri_protocol::api::{self, MessageField};
use test_support::daemon::{burstable, connect, create, gauge, pod, recorded, start_daemon};
use test_support::e2e::{log_events, wait_until};
use test_support::nri_sim::ctx;
use test_support::testfs::Mounted;
use tokio::net::UnixListener;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario against a running daemon, step by step: each step checks what the steps before left in its state and its answers"
)]
async fn a_full_state_disk_admits_every_creation_and_space_back_persists_every_live_record() {
    let Some(fs) = Mounted::tmpfs("daemon_diskfull", 256) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let state = fs.root.join("state");
    let listener = UnixListener::bind(dir.path().join("nri.sock")).expect("runtime socket");
    let mut d = start_daemon(dir.path(), &state);
    let addr = d.metrics_address().expect("metrics address");
    let rt = connect(&listener).await;
    let pool = create(&rt, "before-0").await;
    create(&rt, "before-1").await;
    let started = Instant::now();
    for i in 0..20 {
        create(&rt, &format!("warm-{i}")).await;
    }
    let baseline = started.elapsed() / 20;
    assert_eq!(recorded(&state).len(), 22);
    fs.fill();

    // Full: every creation is answered with its placement.
    let started = Instant::now();
    for i in 0..40 {
        assert_eq!(create(&rt, &format!("full-{i}")).await, pool);
    }
    let per_create = started.elapsed() / 40;
    eprintln!(
        "CreateContainer round trip: {baseline:?} each with room, {per_create:?} with the \
         state disk full"
    );
    assert!(per_create < Duration::from_millis(50), "{per_create:?}");
    // Released while the disk is full.
    let removed = api::RemoveContainerRequest {
        pod: MessageField::some(pod()),
        container: MessageField::some(burstable("before-1")),
        ..Default::default()
    };
    rt.plugin
        .remove_container(ctx(), &removed)
        .await
        .expect("remove");
    let out = d.output();
    let failed: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("decision not persisted"))
        .collect();
    assert_eq!(
        failed.len(),
        1,
        "one line for the outage, not one per event:\n{out}"
    );
    assert!(failed[0].contains("No space left on device"), "{out}");
    eprintln!("{}", failed[0]);
    assert_eq!(gauge(&addr, "nri_align_state_write_failing"), Some(1.0));
    assert_eq!(
        gauge(&addr, "nri_align_state_write_failures_total"),
        Some(1.0),
        "one failed write, the others skipped until the retry"
    );

    // Space back, and no event at all: the daemon's own retry persists every live record
    // within seconds (before, nothing was written until the next container event).
    fs.free();
    let mut want: Vec<String> = ["before-0"].iter().map(|s| s.to_string()).collect();
    want.extend((0..40).map(|i| format!("full-{i}")));
    want.extend((0..20).map(|i| format!("warm-{i}")));
    want.sort();
    let freed = Instant::now();
    assert!(
        wait_until(Duration::from_secs(10), || recorded(&state) == want),
        "not persisted without an event: {:?}\n{}",
        recorded(&state),
        d.output()
    );
    eprintln!(
        "persisted without an event {:?} after space came back",
        freed.elapsed()
    );
    assert!(
        wait_until(Duration::from_secs(5), || {
            d.output().contains("state persisted again")
        }),
        "{}",
        d.output()
    );
    assert_eq!(gauge(&addr, "nri_align_state_write_failing"), Some(0.0));
    let recovered = d
        .output()
        .lines()
        .filter(|l| l.contains("state persisted again"))
        .map(str::to_string)
        .collect::<Vec<_>>();
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert!(recovered[0].contains("records=61"), "{recovered:?}");
    eprintln!("{}", recovered[0]);
    // The next event is written as usual.
    create(&rt, "after").await;
    want.push("after".into());
    want.sort();
    assert_eq!(recorded(&state), want, "every live record, before-1 not");

    // A restart reloads exactly those.
    rt.hang_up().await;
    d.stop(nix::sys::signal::Signal::SIGTERM);
    let mut d = start_daemon(dir.path(), &state);
    assert!(
        d.wait_for_output("previous decisions restored", Duration::from_secs(20)),
        "{}",
        d.output()
    );
    let restored = log_events(&d.output(), "previous decisions restored");
    assert_eq!(restored[0]["restored"], "62", "{}", d.output());
    d.stop(nix::sys::signal::Signal::SIGTERM);
}
