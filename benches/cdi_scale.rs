//! What CDI spec files cost the create path: the release `nri-align run` driven through its
//! NRI socket by a simulated runtime (`test_support::bench`) on the emulated numa16-1024 host,
//! at 1,000 live containers (shared-pool ones, every tenth exclusive with one CPU), twice in
//! one run: once with no spec file, once with 1,000 spec files (half in `/etc/cdi`, half in
//! `/var/run/cdi`, one device each, as per-claim specs of a DRA driver). The containers are the
//! same in both runs: each names one of those devices in `CDI_devices` (as containerd 2.3 sends
//! it) and has its device node in `linux.devices` (what the match-back of earlier runtimes
//! reads), so the second run pays for every lookup and match.
//!
//! Printed: the daemon's time per create (`latency_us` of its `decision` lines) and the round
//! trip the runtime sees, p50 and p99, and their ratio to the run without specs (the create
//! path is to be no slower: ratio ~1); then the time of one full read of the 1,000 files (what
//! a spec change costs the watcher thread, never a create), which with the watcher's event
//! wake-up bounds how soon a change is seen.
//!
//! Last, with the 1,000 specs in place, how soon a new spec is seen: a spec file of a new device
//! is renamed into `/etc/cdi` or `/var/run/cdi` (as a DRA driver writes a claim's spec) and a
//! container naming it is created every 5 ms until the daemon resolves it: the time from the
//! rename to that create, 5 times (the aim: under 1 s).
//!
//! `NRI_ALIGN_BENCH_LIVE=1000` the live containers, `NRI_ALIGN_BENCH_SPECS=1000` the spec files,
//! `NRI_ALIGN_BENCH_WINDOW=300` the creates measured, `NRI_ALIGN_BENCH_PICKUPS=5` the pick-ups.
//!
//! `cargo bench --bench cdi_scale`

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use nri_protocol::api::{self, MessageField};
use test_support::bench::{self, container, ctx, load, pod, quantiles, BoxError, Connection};

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|w| w.parse().ok())
        .filter(|w| *w > 0)
        .unwrap_or(default)
}

struct Setup {
    dir: PathBuf,
    binary: PathBuf,
    host: PathBuf,
    config: PathBuf,
    specs: usize,
}

/// One spec file of device `i`: `example.com/accel=a<i>`, node `/dev/accel<i>`.
fn spec(i: usize) -> (String, String) {
    let dir = if i % 2 == 0 { "etc/cdi" } else { "var/run/cdi" };
    let text = format!(
        r#"{{"cdiVersion": "0.6.0", "kind": "example.com/accel", "devices": [{{"name": "a{i}",
  "containerEdits": {{"env": ["ACCEL=a{i}"], "deviceNodes": [{{"path": "/dev/accel{i}",
  "hostPath": "/dev/null", "type": "c", "major": 1, "minor": 3}}]}}}}]}}"#
    );
    (format!("{dir}/example.com-accel_claim{i:06}.json"), text)
}

fn write_specs(root: &Path, n: usize) -> Result<(), BoxError> {
    for i in 0..n {
        let (rel, text) = spec(i);
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().ok_or("no parent")?)?;
        std::fs::write(p, text)?;
    }
    Ok(())
}

/// Container `n` as a runtime sends it, with CDI device `i` named and injected.
fn cdi_container(n: u64, exclusive: bool, i: usize) -> api::Container {
    let mut c = container(n, i64::from(exclusive));
    c.CDI_devices = vec![api::CDIDevice {
        name: format!("example.com/accel=a{i}"),
        ..Default::default()
    }];
    if let Some(l) = c.linux.as_mut() {
        l.devices = vec![api::LinuxDevice {
            path: format!("/dev/accel{i}"),
            type_: "c".into(),
            major: 1,
            minor: 3,
            ..Default::default()
        }];
    }
    c.env.push(format!("ACCEL=a{i}"));
    c
}

fn start(setup: &Setup, tag: &str, log: &Path) -> Result<Child, BoxError> {
    let err = std::fs::File::create(log)?;
    Ok(Command::new(&setup.binary)
        .arg("run")
        .arg("--socket")
        .arg(setup.dir.join("nri.sock"))
        .arg("--host-root")
        .arg(&setup.host)
        .arg("--state-dir")
        .arg(setup.dir.join(format!("state-{tag}")))
        .arg("--config")
        .arg(&setup.config)
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()?)
}

/// The daemon's `latency_us` per container name.
fn decisions(log: &Path) -> HashMap<String, f64> {
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
        if let (Some(name), Some(lat)) = (
            field("container").and_then(|c| c.as_str()),
            field("latency_us").and_then(|l| l.as_f64()),
        ) {
            out.insert(name.to_string(), lat);
        }
    }
    out
}

/// Stops and removes container `n`, as the runtime does.
async fn remove(conn: &Connection, n: u64, exclusive: bool) -> Result<(), BoxError> {
    bench::stop_and_remove(conn, n, exclusive).await?;
    Ok(())
}

/// Whether the daemon's log, from byte `seen` on, says container `name`'s CDI devices were
/// resolved; `seen` moves to the end.
fn resolved_since(log: &Path, seen: &mut u64, name: &str) -> Result<bool, BoxError> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(log)?;
    f.seek(SeekFrom::Start(*seen))?;
    let mut text = String::new();
    *seen += f.read_to_string(&mut text)? as u64;
    let quoted = format!("\"{name}\"");
    Ok(text
        .lines()
        .any(|l| l.contains("CDI devices resolved") && l.contains(&quoted)))
}

/// How soon a new spec file is seen, `k` times: the spec of a new device is written as a DRA
/// driver writes one (a hidden file renamed into place), then a container naming that device
/// is created every 5 ms (each removed again, so the live set stays) until the daemon logs
/// its device resolved. Each figure is the time from the rename to the reply of that create,
/// in ms (the 5 ms step is the resolution). The aim: under 1 s.
async fn pick_ups(
    conn: &Connection,
    setup: &Setup,
    log: &Path,
    mut n: u64,
    k: usize,
) -> Result<Vec<f64>, BoxError> {
    let mut out = Vec::new();
    for j in 0..k {
        let i = setup.specs + j;
        let (rel, text) = spec(i);
        let path = setup.host.join(rel);
        let tmp = path.with_file_name(format!(".incoming-{i}.json"));
        std::fs::write(&tmp, text)?;
        let mut seen = std::fs::metadata(log)?.len();
        let t = Instant::now();
        std::fs::rename(&tmp, &path)?;
        loop {
            let req = api::CreateContainerRequest {
                pod: MessageField::some(pod(n)),
                container: MessageField::some(cdi_container(n, false, i)),
                ..Default::default()
            };
            conn.plugin.create_container(ctx(), &req).await?;
            let took = t.elapsed();
            let resolved = resolved_since(log, &mut seen, &format!("c{n}"))?;
            remove(conn, n, false).await?;
            n += 1;
            if resolved {
                out.push(took.as_secs_f64() * 1e3);
                break;
            }
            if took > std::time::Duration::from_secs(10) {
                return Err(format!("spec {} not picked up within 10 s", path.display()).into());
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    Ok(out)
}

/// Fills the node to `live` containers, then times `window` creates (each followed by the
/// removal of the oldest), then `pickups` spec pick-ups: (daemon latencies, round trips, in
/// µs; pick-ups, in ms).
async fn run(setup: &Setup, tag: &str, pickups: usize) -> Result<Runs, BoxError> {
    let (live, window) = (
        knob("NRI_ALIGN_BENCH_LIVE", 1000),
        knob("NRI_ALIGN_BENCH_WINDOW", 300),
    );
    let sock = setup.dir.join("nri.sock");
    let _ = std::fs::remove_file(&sock);
    let listener = bench::listen(&sock)?;
    let log = setup.dir.join(format!("{tag}.log"));
    let mut child = start(setup, tag, &log)?;
    let mut conn = Connection::accept(&listener).await?;
    conn.register_and_configure().await?;
    conn.synchronize(&[], &[], 500).await?;
    let mut node: VecDeque<(u64, bool)> = VecDeque::new();
    let mut rtts: Vec<(String, f64)> = Vec::new();
    for n in 0..(live + window) as u64 {
        let exclusive = n % 10 == 9;
        let c = cdi_container(n, exclusive, n as usize % setup.specs);
        let req = api::CreateContainerRequest {
            pod: MessageField::some(pod(n)),
            container: MessageField::some(c),
            ..Default::default()
        };
        let t = Instant::now();
        conn.plugin.create_container(ctx(), &req).await?;
        if n as usize >= live {
            rtts.push((format!("c{n}"), t.elapsed().as_secs_f64() * 1e6));
        }
        node.push_back((n, exclusive));
        if node.len() > live {
            // The oldest of the kind just made, so that the mix stays one in ten.
            let at = node.iter().position(|(_, x)| *x == exclusive).unwrap_or(0);
            if let Some((old, x)) = node.remove(at) {
                remove(&conn, old, x).await?;
            }
        }
    }
    let picked = pick_ups(&conn, setup, &log, (live + window) as u64, pickups).await?;
    conn.close().await;
    drop(listener);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    let logged = decisions(&log);
    let daemon: Vec<f64> = rtts
        .iter()
        .filter_map(|(n, _)| logged.get(n).copied())
        .collect();
    Ok((daemon, rtts.into_iter().map(|(_, r)| r).collect(), picked))
}

type Runs = (Vec<f64>, Vec<f64>, Vec<f64>);

fn us(v: f64) -> String {
    format!("{v:.0} µs")
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
    let binary = std::env::var_os("NRI_ALIGN_BENCH_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_nri-align")));
    let host = tmp.path().join("host");
    let out = Command::new(&binary)
        .args(["emulate", "--host", "numa16-1024", "--out"])
        .arg(&host)
        .output()?;
    if !out.status.success() {
        return Err(format!("emulate: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let config = tmp.path().join("config.yaml");
    std::fs::write(&config, "log_format: json\nlog_level: info\n")?;
    let setup = Setup {
        dir: tmp.path().to_path_buf(),
        binary,
        host,
        config,
        specs: knob("NRI_ALIGN_BENCH_SPECS", 1000),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "daemon: {}; host numa16-1024 (emulated); {} live containers; load {} at start",
        setup.binary.display(),
        knob("NRI_ALIGN_BENCH_LIVE", 1000),
        load()
    );
    let (mut base_d, mut base_r, _) = rt.block_on(run(&setup, "no-specs", 0))?;
    write_specs(&setup.host, setup.specs)?;
    let pickups = knob("NRI_ALIGN_BENCH_PICKUPS", 5);
    let (mut cdi_d, mut cdi_r, mut picked) = rt.block_on(run(&setup, "specs", pickups))?;
    let (bd50, bd99) = quantiles(&mut base_d, 0.99);
    let (br50, br99) = quantiles(&mut base_r, 0.99);
    let (cd50, cd99) = quantiles(&mut cdi_d, 0.99);
    let (cr50, cr99) = quantiles(&mut cdi_r, 0.99);
    println!("\n| spec files | daemon create p50 / p99 | round trip p50 / p99 | p50 ratio daemon / round trip |");
    println!("|---|---|---|---|");
    println!(
        "| 0 | {} / {} | {} / {} | 1.00 / 1.00 |",
        us(bd50),
        us(bd99),
        us(br50),
        us(br99)
    );
    println!(
        "| {} | {} / {} | {} / {} | {:.2} / {:.2} |",
        setup.specs,
        us(cd50),
        us(cd99),
        us(cr50),
        us(cr99),
        cd50 / bd50,
        cr50 / br50
    );
    // What one spec change costs the watcher: a read of every file.
    let dirs = [PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")];
    let mut reads: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let s = nri_align::host::cdi::scan(&setup.host, &dirs);
            // The pick-ups' specs are there too.
            let want = setup.specs + picked.len();
            assert_eq!(s.index.len(), want, "{:?}", s.skipped.first());
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let (r50, rmax) = quantiles(&mut reads, 1.0);
    println!(
        "\nfull read of {} spec files (a change's rescan, on the watcher thread): p50 {r50:.0} ms, max {rmax:.0} ms",
        setup.specs
    );
    let (p50, pmax) = quantiles(&mut picked, 1.0);
    println!(
        "a new spec file (renamed into place) resolved by a create, {} times, beside {} others: \
         p50 {p50:.0} ms, max {pmax:.0} ms after the rename (aim: under 1 s)",
        picked.len(),
        setup.specs
    );
    println!("load at end {}", load());
    Ok(())
}
