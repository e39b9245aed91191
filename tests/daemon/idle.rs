//! An idle daemon wakes only for the timers its design has: connected to a simulated runtime,
//! a few containers placed, then no event for a few seconds. Its wake-ups (the voluntary
//! context switches of all its threads: each is a sleep that something ended) over the window
//! stay within what those timers explain: the 1 s heartbeat, the 1 s check for a missing CDI
//! spec directory, the 10 s topology re-read and the 60 s configuration poll, each waking a
//! thread or two. A thread polling on a short tick (the CDI watcher once read its queue every
//! 100 ms) would exceed it several times over. `hack/bench`'s `daemon_cost` part measures the
//! 60 s window with 1,000 live containers and its CPU time.

use std::time::{Duration, Instant};

use test_support::daemon::{connect, create, start_daemon};
use tokio::net::UnixListener;

/// The voluntary context switches of every live thread of `pid`, summed.
fn wakeups(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum()
}

/// Wake-ups per second the design's timers explain: the heartbeat (its tick and the engine
/// lock check, a worker or two woken), the missing-CDI-directory check, and the slower ones
/// rounded up; twice that as slack for the runtime's own thread hand-offs.
const DESIGN_PER_SECOND: f64 = 2.0 * (3.0 + 1.0 + 0.5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_daemon_wakes_only_for_its_timers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = UnixListener::bind(dir.path().join("nri.sock")).expect("bind");
    let daemon = start_daemon(dir.path(), &dir.path().join("state"));
    let rt = connect(&listener).await;
    for id in ["idle-a", "idle-b", "idle-c"] {
        create(&rt, id).await;
    }
    // Start-up's and the creates' after-effects (the log, a first re-read) pass first.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let pid = daemon.pid();
    let before = wakeups(pid);
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let secs = t.elapsed().as_secs_f64();
    let woke = wakeups(pid).saturating_sub(before);
    assert!(before > 0, "the daemon's threads are readable");
    let bound = DESIGN_PER_SECOND * secs;
    assert!(
        (woke as f64) <= bound,
        "{woke} wake-ups in {secs:.1} s idle: more than the {bound:.0} the timers explain"
    );
    drop(rt);
}
