//! How the start-up check "which recorded containers still have a process" grows with the
//! node: `host::procfs::live_containers` on a `/proc` tree as a node with N live containers
//! lists it (two processes in each container's cgroup, the v1 cpuset line and the unified one
//! of a hybrid host, and 300 system processes outside `kubepods`), for N = 1,000 and 5,000
//! (`NRI_ALIGN_BENCH_LIVE_SIZES=1000,5000`). Every tenth record has no cgroups path and is
//! found by its id as a cgroup name, as records written before cgroups paths were kept are.
//!
//! Two timings per size, each the median of several rounds:
//! - the whole call, reading every `/proc/PID/cgroup` (from the page cache after the first
//!   round), as the daemon's start-up does;
//! - the index alone (`ProcIndex::new` from texts already read, then one look-up per record):
//!   the algorithm, without the filesystem.
//!
//! A linear check costs the same per container at both sizes (ratio of totals ~5 for 5x the
//! containers, ~1 per container). For reference the pairwise check (every record against
//! every process, `ContainerKey::matches`), as start-up once did, is timed at the smallest
//! size only: it is quadratic, and at 5,000 it takes tens of seconds.
//!
//! `cargo bench --bench live_containers`

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use nri_align::host::procfs::{cgroup_lines_by_pid, live_containers, ContainerKey, ProcIndex};
use test_support::bench::{hex_id, load, quantiles};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const SYSTEM: u32 = 300;
const ROUNDS: usize = 7;

/// A recorded container: its id and the cgroups path the runtime gave (empty for every tenth).
fn records(n: usize) -> Vec<(String, String)> {
    (0..n as u64)
        .map(|i| {
            let id = hex_id(0xcc, i);
            let path = if i % 10 == 9 {
                String::new()
            } else {
                format!("/kubepods/burstable/pod5f0e6d1c-{i:012x}/{id}")
            };
            (id, path)
        })
        .collect()
}

/// Writes `proc/PID/cgroup` under `root` for the system processes and two processes per
/// record (a record without a cgroups path runs in containerd's cgroupfs form `.../ID`).
/// Returns how many processes.
fn write_proc(root: &Path, recs: &[(String, String)]) -> Result<usize, BoxError> {
    let mut pid = 1000u32;
    let mut write = |path: &str| -> Result<(), BoxError> {
        let dir = root.join(format!("proc/{pid}"));
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
    for (id, path) in recs {
        let path = if path.is_empty() {
            format!("/kubepods/besteffort/pod-legacy/{id}")
        } else {
            path.clone()
        };
        write(&path)?;
        write(&path)?;
    }
    Ok((pid - 1000) as usize)
}

/// Median of `ROUNDS` runs of `f`, in seconds.
fn median(mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    quantiles(&mut t, 0.5).0
}

struct Row {
    n: usize,
    procs: usize,
    whole: f64,
    index: f64,
    pairwise: Option<f64>,
}

fn measure(n: usize, with_pairwise: bool) -> Result<Row, BoxError> {
    let tmp = tempfile::tempdir()?;
    let recs = records(n);
    let procs = write_proc(tmp.path(), &recs)?;
    let pairs = || recs.iter().map(|(i, p)| (i.as_str(), p.as_str()));
    let live = live_containers(tmp.path(), pairs()).ok_or("no container found live")?;
    if live.len() != n {
        return Err(format!("{} of {n} containers found live", live.len()).into());
    }
    let whole = median(|| {
        std::hint::black_box(live_containers(tmp.path(), pairs()));
    });
    let texts = cgroup_lines_by_pid(tmp.path());
    let keys: Vec<ContainerKey> = recs
        .iter()
        .map(|(i, p)| ContainerKey::new(i, p))
        .collect::<Result<_, _>>()?;
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let copy = texts.clone();
            let s = Instant::now();
            let idx = ProcIndex::new(copy);
            let found = keys.iter().filter(|k| !idx.pids_of(k).is_empty()).count();
            let took = s.elapsed().as_secs_f64();
            assert_eq!(found, n, "the index finds every container");
            took
        })
        .collect();
    let index = quantiles(&mut rounds, 0.5).0;
    let pairwise = with_pairwise.then(|| {
        let s = Instant::now();
        let found: HashSet<usize> = keys
            .iter()
            .enumerate()
            .filter(|(_, k)| texts.iter().any(|(_, t)| k.matches(t)))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(found.len(), n, "the pairwise check finds every container");
        s.elapsed().as_secs_f64()
    });
    Ok(Row {
        n,
        procs,
        whole,
        index,
        pairwise,
    })
}

fn sizes() -> Vec<usize> {
    std::env::var("NRI_ALIGN_BENCH_LIVE_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![1000, 5000])
}

fn ms(s: f64) -> String {
    format!("{:.2} ms", s * 1e3)
}

fn main() -> Result<(), BoxError> {
    // `cargo test --benches` runs bench targets without --bench: nothing to time then.
    if !std::env::args().any(|a| a == "--bench") {
        return Ok(());
    }
    println!("live_containers: load {} at start", load());
    let mut rows = Vec::new();
    for (i, n) in sizes().into_iter().enumerate() {
        rows.push(measure(n, i == 0)?);
    }
    let Some(base) = rows.first().map(|r| (r.n, r.whole, r.index)) else {
        return Ok(());
    };
    println!(
        "\n| live containers | processes | whole call (reads /proc), median | per container | index alone, median | per container | ratio of totals to {0} (whole / index) | per-container ratio to {0} (whole / index) | pairwise check, as once done |",
        base.0
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let per = |t: f64| format!("{:.2} µs", t * 1e6 / r.n as f64);
        let scale = r.n as f64 / base.0 as f64;
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.2} / {:.2} | {:.2} / {:.2} | {} |",
            r.n,
            r.procs,
            ms(r.whole),
            per(r.whole),
            ms(r.index),
            per(r.index),
            r.whole / base.1,
            r.index / base.2,
            r.whole / base.1 / scale,
            r.index / base.2 / scale,
            r.pairwise.map_or("-".to_string(), ms),
        );
    }
    println!("\nload at end {}", load());
    Ok(())
}
