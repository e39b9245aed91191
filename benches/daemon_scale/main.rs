//! What the daemon costs per container as the node fills up: the release `nri-align run`
//! driven through its NRI socket by a simulated runtime (`test_support::bench`) on an emulated
//! 1024-CPU host (`nri-align emulate --host numa16-1024`, the fake NVML), with 10, 100, 1,000
//! and 5,000 live containers (shared-pool ones, every tenth exclusive with one CPU).
//!
//! At each size the live set is held steady while WINDOW containers are created (each followed
//! by the removal of the oldest one of its kind), and the bench reads:
//! - the daemon's own time per CreateContainer, from its `decision` log lines (`latency_us`:
//!   request in, decision, adjustment, its record written, pool updates; `pool_us` is the part
//!   spent moving the shared containers, building their updates and writing where they went,
//!   which an exclusive admission must do, so the exclusive column gives the time without it
//!   and the updates apart);
//! - the round trip the runtime sees, and the size of the responses;
//! - the daemon's resident memory.
//!
//! A second table gives the create as the runtime sees it, from the request sent to the reply
//! received and decoded with every update it carries (an exclusive create shrinks the shared
//! pool, so its reply moves every shared container), p50 and p99 of each kind with ratios to
//! the smallest size, and the daemon's `VmRSS`/`VmHWM` once the node is filled and after the
//! creates. The node is filled with its exclusive containers first (`Node::fill`), so the fill
//! moves nobody and takes seconds, not minutes, at 5,000.
//!
//! Then it restarts the daemon on the state of the largest size and times start-up plus a
//! Synchronize of every live container, against a start with no state and nothing to
//! synchronize in the same run. Both starts see the emulated host's `/proc` with two processes
//! in each live container's cgroup and a few hundred elsewhere, as on a real node: start-up
//! checks each record for a live process before Synchronize comes.
//!
//! All of it runs once per exclusive headroom compared (`exclusive_headroom`, free CPUs per
//! NUMA node kept out of the shared pool; 0 and 8 unless `NRI_ALIGN_BENCH_HEADROOMS=0,8`
//! says otherwise), each on a fresh daemon and node, and a last table puts them side by
//! side: exclusive and shared creates as the runtime sees them and in the daemon's own time,
//! the updates each create and removal carried (mean and max), how many exclusive creates
//! moved the pool, and the daemon's memory. The restart part runs on the first headroom's
//! state.
//!
//! Ratios in the tables compare sizes measured in the same run (flat cost = ratio ~1).
//! `NRI_ALIGN_BENCH_SIZES=10,100` picks the sizes, `NRI_ALIGN_BENCH_WINDOW=100` the creates
//! measured at each; `NRI_ALIGN_BENCH_BINARY=PATH` drives another
//! build of the daemon (an older one, for before/after figures; with
//! `NRI_ALIGN_BENCH_HEADROOMS=0`, since an older daemon refuses the key).
//!
//! `cargo bench --bench daemon_scale`

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nri_protocol::api;
use test_support::bench::{self, load, quantiles, BoxError, Connection};

mod headroom;
use test_support::bench::daemon::{setup, Daemon, Node, Rss, Sample, Setup};

/// Creates measured at each size (`NRI_ALIGN_BENCH_WINDOW` overrides it).
const WINDOW: usize = 300;

fn window() -> usize {
    std::env::var("NRI_ALIGN_BENCH_WINDOW")
        .ok()
        .and_then(|w| w.parse().ok())
        .filter(|w| *w > 0)
        .unwrap_or(WINDOW)
}
/// Containers per Synchronize chunk at restart.
const SYNC_CHUNK: usize = 500;

/// What the daemon logged for one decision.
#[derive(Default, Clone, Copy)]
struct Logged {
    latency_us: f64,
    pool_us: Option<f64>,
}

fn decisions(log: &Path) -> HashMap<String, Logged> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out = HashMap::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let field = |k: &str| v.get(k).or_else(|| v.get("fields").and_then(|f| f.get(k)));
        if field("message").and_then(|m| m.as_str()) != Some("decision") {
            continue;
        }
        let (Some(name), Some(lat)) = (
            field("container").and_then(|c| c.as_str()),
            field("latency_us").and_then(|l| l.as_f64()),
        ) else {
            continue;
        };
        out.insert(
            name.to_string(),
            Logged {
                latency_us: lat,
                pool_us: field("pool_us").and_then(|l| l.as_f64()),
            },
        );
    }
    out
}

struct SizeResult {
    live: usize,
    samples: Vec<Sample>,
    /// Updates each removal's reply carried.
    removal_updates: Vec<usize>,
    /// After the window's creates.
    rss: Rss,
    /// Once the node reached `live`, before the window.
    rss_filled: Rss,
    /// Seconds the fill from the previous size took.
    fill_s: f64,
}

fn sizes() -> Vec<usize> {
    std::env::var("NRI_ALIGN_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![10, 100, 1000, 5000])
}

/// The exclusive headrooms compared.
fn headrooms() -> Vec<u32> {
    std::env::var("NRI_ALIGN_BENCH_HEADROOMS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .filter(|v: &Vec<u32>| !v.is_empty())
        .unwrap_or_else(|| vec![0, 8])
}

/// `setup` with `exclusive_headroom: h` in its configuration (none written for 0, so that
/// an older daemon takes it).
fn with_headroom(setup: &Setup, h: u32) -> Result<Setup, BoxError> {
    if h == 0 {
        return Ok(setup.clone());
    }
    let config = setup.dir.join(format!("config-h{h}.yaml"));
    let base = std::fs::read_to_string(&setup.config)?;
    std::fs::write(&config, format!("{base}exclusive_headroom: {h}\n"))?;
    Ok(Setup {
        config,
        ..setup.clone()
    })
}

/// One headroom's measurements.
struct Run {
    headroom: u32,
    results: Vec<SizeResult>,
    logged: HashMap<String, Logged>,
}

async fn scale(
    setup: &Setup,
    node: &mut Node,
    tag: &str,
) -> Result<(Vec<SizeResult>, PathBuf), BoxError> {
    let listener = bench::listen(&setup.dir.join("nri.sock"))?;
    let state = setup.dir.join(format!("state-{tag}"));
    let daemon = Daemon::start(setup, &state, &format!("scale-{tag}.log"))?;
    let mut conn = Connection::accept(&listener).await?;
    conn.register_and_configure().await?;
    conn.synchronize(&[], &[], SYNC_CHUNK).await?;
    let mut results = Vec::new();
    for live in sizes() {
        let t = Instant::now();
        node.fill(&conn, live).await?;
        let fill_s = t.elapsed().as_secs_f64();
        let rss_filled = daemon.rss();
        let mut samples = Vec::with_capacity(window());
        let mut removal_updates = Vec::with_capacity(window());
        for _ in 0..window() {
            let s = node.create(&conn).await?;
            let excl = s.exclusive;
            samples.push(s);
            removal_updates.push(node.remove_oldest(&conn, excl).await?);
        }
        results.push(SizeResult {
            live,
            samples,
            removal_updates,
            rss: daemon.rss(),
            rss_filled,
            fill_s,
        });
        eprintln!(
            "  {live} live containers measured (filled in {fill_s:.1} s; load {})",
            load()
        );
    }
    conn.close().await;
    drop(listener);
    let _ = std::fs::remove_file(setup.dir.join("nri.sock"));
    Ok((results, daemon.stop()))
}

/// Spawn to the Synchronize reply, with `state`: (to registration, total, updates sent).
async fn restart(
    setup: &Setup,
    state: &Path,
    pods: &[api::PodSandbox],
    ctrs: &[api::Container],
    log: &str,
) -> Result<(f64, f64, usize), BoxError> {
    let listener = bench::listen(&setup.dir.join("nri.sock"))?;
    let t = Instant::now();
    let daemon = Daemon::start(setup, state, log)?;
    let mut conn = Connection::accept(&listener).await?;
    conn.register_and_configure().await?;
    let registered = t.elapsed().as_secs_f64();
    let updates = conn.synchronize(pods, ctrs, SYNC_CHUNK).await?;
    let total = t.elapsed().as_secs_f64();
    conn.close().await;
    drop(listener);
    let _ = std::fs::remove_file(setup.dir.join("nri.sock"));
    daemon.stop();
    Ok((registered, total, updates))
}

fn ms(secs: f64) -> String {
    format!("{:.0} ms", secs * 1e3)
}

fn us(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2} ms", v / 1000.0)
    } else {
        format!("{v:.0} µs")
    }
}

fn report(results: &[SizeResult], logged: &HashMap<String, Logged>) {
    println!(
        "\n| live containers | shared create, daemon p50 / p99 | p50 ratio to {} | exclusive create without pool updates, p50 / p99 | exclusive create with them, p50 / p99 | pool updates per exclusive create | building them, p50 | exclusive response, p50 | runtime round trip p50 shared / exclusive | daemon RSS (of it anonymous), peak |",
        results.first().map_or(0, |r| r.live)
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut base_p50 = None;
    for r in results {
        let pick = |excl: bool| r.samples.iter().filter(move |s| s.exclusive == excl);
        let lat = |s: &Sample| logged.get(&s.name).copied();
        let mut shared: Vec<f64> = pick(false).filter_map(lat).map(|l| l.latency_us).collect();
        let mut excl_wo: Vec<f64> = pick(true)
            .filter_map(lat)
            .map(|l| l.latency_us - l.pool_us.unwrap_or(0.0))
            .collect();
        let mut excl_all: Vec<f64> = pick(true).filter_map(lat).map(|l| l.latency_us).collect();
        let mut pool: Vec<f64> = pick(true)
            .filter_map(lat)
            .filter_map(|l| l.pool_us)
            .collect();
        let mut updates: Vec<f64> = pick(true).map(|s| s.updates as f64).collect();
        let mut bytes: Vec<f64> = pick(true).map(|s| s.bytes as f64).collect();
        let mut rtt_s: Vec<f64> = pick(false).map(|s| s.rtt_us).collect();
        let mut rtt_x: Vec<f64> = pick(true).map(|s| s.rtt_us).collect();
        let (s50, s99) = quantiles(&mut shared, 0.99);
        let (x50, x99) = quantiles(&mut excl_wo, 0.99);
        let (a50, a99) = quantiles(&mut excl_all, 0.99);
        let base = *base_p50.get_or_insert(s50);
        println!(
            "| {} | {} / {} | {:.2} | {} / {} | {} / {} | {:.0} | {} | {:.1} KiB | {} / {} | {:.1} MiB ({:.1} MiB), {:.1} MiB |",
            r.live,
            us(s50),
            us(s99),
            s50 / base,
            us(x50),
            us(x99),
            us(a50),
            us(a99),
            quantiles(&mut updates, 0.5).0,
            if pool.is_empty() {
                "-".to_string()
            } else {
                us(quantiles(&mut pool, 0.5).0)
            },
            quantiles(&mut bytes, 0.5).0 / 1024.0,
            us(quantiles(&mut rtt_s, 0.5).0),
            us(quantiles(&mut rtt_x, 0.5).0),
            r.rss.total as f64 / 1024.0,
            r.rss.anon as f64 / 1024.0,
            r.rss.peak as f64 / 1024.0
        );
    }
}

/// The creates as the runtime sees them: from the request sent to the reply received and
/// decoded, every update it carries included (an exclusive create shrinks the shared pool, so
/// its reply moves every shared container), against the smallest size of the same run; and
/// the daemon's memory once the node is filled and after the creates.
fn report_runtime(results: &[SizeResult]) {
    let Some(first) = results.first() else {
        return;
    };
    let rtt = |r: &SizeResult, excl: bool| -> (f64, f64) {
        let mut v: Vec<f64> = r
            .samples
            .iter()
            .filter(|s| s.exclusive == excl)
            .map(|s| s.rtt_us)
            .collect();
        quantiles(&mut v, 0.99)
    };
    let (bx50, bx99) = rtt(first, true);
    let (bs50, bs99) = rtt(first, false);
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "\n| live containers | exclusive create, runtime round trip with its updates, p50 / p99 | ratio to {0} (p50 / p99) | updates per exclusive create | shared create, runtime round trip p50 / p99 | ratio to {0} (p50 / p99) | shared creates carrying queued updates | daemon VmRSS / VmHWM once filled | after the creates | fill time |",
        first.live
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in results {
        let (x50, x99) = rtt(r, true);
        let (s50, s99) = rtt(r, false);
        let mut ups: Vec<f64> = r
            .samples
            .iter()
            .filter(|s| s.exclusive)
            .map(|s| s.updates as f64)
            .collect();
        let shared = r.samples.iter().filter(|s| !s.exclusive);
        let carrying = shared.clone().filter(|s| s.updates > 0).count();
        println!(
            "| {} | {} / {} | {:.2} / {:.2} | {:.0} | {} / {} | {:.2} / {:.2} | {} of {} | {:.1} / {:.1} MiB | {:.1} / {:.1} MiB | {:.1} s |",
            r.live,
            us(x50),
            us(x99),
            x50 / bx50,
            x99 / bx99,
            quantiles(&mut ups, 0.5).0,
            us(s50),
            us(s99),
            s50 / bs50,
            s99 / bs99,
            carrying,
            shared.count(),
            mib(r.rss_filled.total),
            mib(r.rss_filled.peak),
            mib(r.rss.total),
            mib(r.rss.peak),
            r.fill_s,
        );
    }
}

/// Processes under the emulated host's `/proc`, as a node with `ctrs` running lists them: a
/// pause-like and a workload process in each container's cgroup (the v1 cpuset line and the
/// unified one of a hybrid host), and system processes outside `kubepods`. Returns how many.
fn write_processes(host: &Path, ctrs: &[api::Container]) -> Result<usize, BoxError> {
    const SYSTEM: u32 = 300;
    let mut pid = 1000u32;
    let mut write = |path: &str| -> Result<(), BoxError> {
        let dir = host.join(format!("proc/{pid}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("cgroup"),
            format!("12:pids:{path}\n7:memory:{path}\n5:cpuset:{path}\n0::{path}\n"),
        )?;
        pid += 1;
        Ok(())
    };
    for n in 0..SYSTEM {
        write(&format!("/system.slice/unit{n}.service"))?;
    }
    for c in ctrs {
        let path = c.linux.as_ref().map_or("", |l| l.cgroups_path.as_str());
        write(path)?;
        write(path)?;
    }
    Ok((pid - 1000) as usize)
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
    let tmp = tempfile::tempdir()?;
    let setup = setup(tmp.path())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "daemon: {}; host numa16-1024 (emulated, 1024 CPUs, 16 nodes); {} CPUs here, load {} at start",
        setup.binary.display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load()
    );
    let mut runs = Vec::new();
    let mut first: Option<Node> = None;
    for h in headrooms() {
        let tagged = with_headroom(&setup, h)?;
        let mut node = Node::default();
        let (results, log) = rt.block_on(scale(&tagged, &mut node, &format!("h{h}")))?;
        let logged = decisions(&log);
        println!("\n### exclusive_headroom: {h}");
        report(&results, &logged);
        report_runtime(&results);
        println!("load after the creates {}", load());
        first.get_or_insert(node);
        runs.push(Run {
            headroom: h,
            results,
            logged,
        });
    }
    headroom::report(&runs);
    let Some(node) = first else {
        return Ok(());
    };

    let (pods, ctrs) = node.listing();
    // Every container here has a pod of its own: past 4,096 containers one Synchronize of the
    // node is over what nri-align accepts (`MAX_SYNC_OBJECTS` pods and containers), which it
    // refuses by design, so the restart part would measure a refusal.
    let limit = nri_align::enforce::nri::MAX_SYNC_OBJECTS;
    if pods.len() + ctrs.len() > limit {
        println!(
            "\nrestart: skipped, a Synchronize of {} pods and {} containers is over nri-align's \
             limit of {limit} (MAX_SYNC_OBJECTS); the largest size at most {} containers measures it",
            pods.len(),
            ctrs.len(),
            limit / 2
        );
        return Ok(());
    }
    let procs = write_processes(&setup.host, &ctrs)?;
    // The restart runs on the first headroom's state, with its configuration.
    let setup = with_headroom(&setup, runs[0].headroom)?;
    let empty = tmp.path().join("empty-state");
    let (base_reg, base_total, _) =
        rt.block_on(restart(&setup, &empty, &[], &[], "restart-empty.log"))?;
    let state = tmp.path().join(format!("state-h{}", runs[0].headroom));
    let (reg, total, updates) =
        rt.block_on(restart(&setup, &state, &pods, &ctrs, "restart-full.log"))?;
    println!("\n| start-up | to registered | to Synchronize answered | ratio to the empty start |");
    println!("|---|---|---|---|");
    println!(
        "| no state, empty Synchronize | {} | {} | 1.00 |",
        ms(base_reg),
        ms(base_total)
    );
    println!(
        "| {} records, {} processes, Synchronize of {} containers ({} updates sent) | {} | {} | {:.2} |",
        ctrs.len(),
        procs,
        ctrs.len(),
        updates,
        ms(reg),
        ms(total),
        total / base_total
    );
    println!("\nload at end {}", load());
    // Keep the logs when asked (the tempdir goes otherwise).
    if let Some(keep) = std::env::var_os("NRI_ALIGN_BENCH_KEEP") {
        let keep = PathBuf::from(keep);
        std::fs::create_dir_all(&keep)?;
        let scales = runs.iter().map(|r| format!("scale-h{}.log", r.headroom));
        let names = ["restart-empty.log", "restart-full.log"].map(String::from);
        for name in scales.chain(names) {
            let _ = std::fs::copy(tmp.path().join(&name), keep.join(&name));
        }
    }
    Ok(())
}
