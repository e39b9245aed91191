//! What the daemon itself costs the node: the release `nri-align run` on the emulated
//! 1024-CPU host (`numa16-1024`), driven through its NRI socket by a simulated runtime
//! (`test_support::bench`), as in `daemon_scale`.
//!
//! 1. **Idle.** With LIVE live containers (1,000; `NRI_ALIGN_BENCH_COST_LIVE`) and no
//!    container event for IDLE seconds (60; `NRI_ALIGN_BENCH_IDLE_SECS`), the daemon's CPU
//!    time (`utime + stime` from `/proc/PID/stat`, and each thread's time on a CPU from its
//!    `schedstat`) and its wake-ups (each thread's `voluntary_ctxt_switches`: one per sleep
//!    that something ended), per thread. The design's timers are the 1 s heartbeat, the 10 s
//!    topology re-read, the 60 s configuration poll, and while a CDI spec directory is missing
//!    the 1 s check for it.
//! 2. **Churn.** CHURN creates (1,000; `NRI_ALIGN_BENCH_COST_CHURN`), each followed by the
//!    removal (stop and remove) of the oldest container of its kind, so the live set stays:
//!    the daemon's CPU time per 1,000 creates and removes, beside the simulated runtime's
//!    (this bench's own process: it builds the requests and reads the replies, and does none
//!    of a runtime's real work, so it is no stand-in for containerd's or CRI-O's cost; those
//!    are `hack/bench-cost`'s).
//!
//! `cargo bench --bench daemon_cost`

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use test_support::bench::{self, load, BoxError, Connection};

use test_support::bench::daemon::{setup, Daemon, Node, ThreadUsage, Usage};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn thread_table(threads: &BTreeMap<String, ThreadUsage>, secs: f64) {
    println!("| thread | on a CPU | wake-ups (voluntary switches) | per second | preempted |");
    println!("|---|---|---|---|---|");
    for t in threads.values() {
        println!(
            "| {} | {:.2} ms | {} | {:.2} | {} |",
            t.name,
            t.run_ns as f64 / 1e6,
            t.voluntary,
            t.voluntary as f64 / secs,
            t.involuntary
        );
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "the bench's whole run: one block per row of the table it prints, in the order printed"
)]
fn main() -> Result<(), BoxError> {
    // `cargo test --benches` runs bench targets without --bench: nothing to time then.
    if !std::env::args().any(|a| a == "--bench") {
        return Ok(());
    }
    let live = env_or("NRI_ALIGN_BENCH_COST_LIVE", 1000) as usize;
    let idle = env_or("NRI_ALIGN_BENCH_IDLE_SECS", 60);
    let churn = env_or("NRI_ALIGN_BENCH_COST_CHURN", 1000) as usize;
    let tmp = tempfile::tempdir()?;
    let setup = setup(tmp.path())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "daemon: {}; host numa16-1024 (emulated); {} CPUs here, load {} at start",
        setup.binary.display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load()
    );
    rt.block_on(async {
        let listener = bench::listen(&setup.dir.join("nri.sock"))?;
        let daemon = Daemon::start(&setup, &setup.dir.join("state"), "cost.log")?;
        let mut conn = Connection::accept(&listener).await?;
        conn.register_and_configure().await?;
        conn.synchronize(&[], &[], 500).await?;
        let mut node = Node::default();
        while node.len() < live {
            node.create(&conn).await?;
        }
        // Let start-up's and the fill's after-effects (log flushes, a first topology re-read)
        // pass before the window opens.
        tokio::time::sleep(Duration::from_secs(2)).await;

        let before = Usage::of(daemon.pid());
        let t = Instant::now();
        tokio::time::sleep(Duration::from_secs(idle)).await;
        let secs = t.elapsed().as_secs_f64();
        let (cpu, threads) = Usage::of(daemon.pid()).since(&before);
        let run_s: f64 = threads.values().map(|t| t.run_ns as f64 / 1e9).sum();
        let wakeups: u64 = threads.values().map(|t| t.voluntary).sum();
        println!(
            "\nIdle: {live} live containers, no event for {secs:.1} s (load {}): daemon CPU {:.0} ms \
             by utime+stime (10 ms ticks), {:.2} ms on a CPU by schedstat = {:.4} % of one core \
             (aim: under 0.1 %); {wakeups} wake-ups, {:.2} per second",
            load(),
            cpu * 1e3,
            run_s * 1e3,
            run_s / secs * 100.0,
            wakeups as f64 / secs
        );
        thread_table(&threads, secs);

        let before = Usage::of(daemon.pid());
        let me_before = Usage::of(std::process::id());
        let t = Instant::now();
        for _ in 0..churn {
            let s = node.create(&conn).await?;
            node.remove_oldest(&conn, s.exclusive).await?;
        }
        let secs = t.elapsed().as_secs_f64();
        let (cpu, threads) = Usage::of(daemon.pid()).since(&before);
        let (me_cpu, _) = Usage::of(std::process::id()).since(&me_before);
        let run_s: f64 = threads.values().map(|t| t.run_ns as f64 / 1e9).sum();
        let per_1000 = 1000.0 / churn.max(1) as f64;
        println!(
            "\nChurn: {churn} creates and removes at {live} live (every tenth exclusive, which \
             moves the shared pool), {secs:.1} s wall (load {}): daemon CPU {:.0} ms per 1,000 \
             by utime+stime ({:.0} ms on a CPU by schedstat, live threads), {:.0} µs per create \
             and remove; the simulated runtime (this bench's process) {:.0} ms per 1,000",
            load(),
            cpu * 1e3 * per_1000,
            run_s * 1e3 * per_1000,
            cpu * 1e6 / churn.max(1) as f64,
            me_cpu * 1e3 * per_1000,
        );
        thread_table(&threads, secs);
        let rss = daemon.rss();
        println!(
            "\ndaemon RSS {:.1} MiB ({:.1} MiB anonymous); load at end {}",
            rss.total as f64 / 1024.0,
            rss.anon as f64 / 1024.0,
            load()
        );
        conn.close().await;
        drop(listener);
        daemon.stop();
        Ok::<(), BoxError>(())
    })
}
