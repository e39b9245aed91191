//! What publishing NodeResourceTopology costs the CreateContainer path: the engine's create and
//! release of a Guaranteed container, without an observer (the daemon with publishing off)
//! against the same engine with the daemon's NRT observer plugged in (`nri-align run`'s own
//! `NrtPlan` wiring: a real `Publisher` task on a tokio runtime, a kube client to an API server
//! that refuses connections, so the task also retries in the background), measured in the same
//! run.
//!
//! Both engines run on the DGX H100 description (2 NUMA nodes, 8 GPUs, 8 NICs: the snapshot
//! copies every free GPU and NIC id) with 100 pods known from a Synchronize (the fingerprint's
//! pod list exists), the free gauges on, state not persisted (the state file write is the same
//! for both and would drown the difference). Batches alternate, round after round; the table
//! gives the medians per create + release, the median of the per-round ratios and their spread.
//!
//! `cargo bench --bench engine_nrt`

use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_align::cli::run::{NrtPlan, RunArgs};
use nri_align::config::Config;
use nri_align::enforce::container::{ContainerView, PodView, ResourcesView};
use nri_align::enforce::engine::Engine;
use nri_align::host::devices::HostDevices;
use nri_align::metrics::Metrics;
use nri_align::nrt::metrics::NrtMetrics;
use nri_align::placement::Allocator;

const ROUNDS: usize = 15;
const PER_BATCH: usize = 500;
const PODS: usize = 100;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn pod(i: usize) -> PodView {
    PodView {
        id: format!("sandbox-{i:04}"),
        uid: format!("uid-{i:04}"),
        name: format!("trainer-{i:04}"),
        namespace: "ml".into(),
        ..Default::default()
    }
}

/// A Guaranteed container with 4 whole CPUs and 8 GiB, as the kubelet sends it.
fn container(id: &str, pod: &PodView) -> ContainerView {
    ContainerView {
        id: id.into(),
        pod_sandbox_id: pod.id.clone(),
        name: "main".into(),
        resources: ResourcesView {
            cpu_shares: Some(4096),
            cpu_quota: Some(400_000),
            cpu_period: Some(100_000),
            memory_limit: Some(8 << 30),
            ..Default::default()
        },
        cgroups_path: format!("/kubepods/{id}"),
        ..Default::default()
    }
}

fn engine(config: &Config) -> Engine<Allocator> {
    let topo = Arc::new(nri_align::topology::testing::shipped("dgx-h100"));
    let mut e = Engine::new(
        Allocator::new(topo, config.placement.clone()),
        config.clone(),
        None,
        Some(Arc::new(Metrics::new())),
        Box::new(HostDevices::new(std::path::Path::new("/"))),
    );
    let pods: Vec<PodView> = (0..PODS).map(pod).collect();
    e.synchronize(&pods, &[]);
    e
}

/// Mean time per create + release over `n` of them.
fn batch(e: &mut Engine<Allocator>, n: usize) -> Duration {
    let p = pod(7);
    let t = Instant::now();
    for i in 0..n {
        let id = format!("c{i}");
        let out = e.create_container(&p, &container(&id, &p));
        assert!(matches!(out, Ok(Some(_))), "create failed: {out:?}");
        e.release_container(&id);
    }
    t.elapsed() / n as u32
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> Result<(), BoxError> {
    // `cargo test --benches` runs bench targets without --bench: nothing to time then.
    if !std::env::args().any(|a| a == "--bench") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    // Nothing listens on port 1: every attempt fails at once and backs off, as with a down
    // API server.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"http://127.0.0.1:1\"}\n\
         users:\n- name: u\n  user: {token: bench}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\n\
         current-context: c\n",
    )?;
    let config = Config::parse("policy: single-numa-node\nreserved_cpus: \"0\"\n", "bench")?;
    let args = RunArgs {
        config: None,
        socket: "/nonexistent".into(),
        idx: None,
        host_root: None,
        nvml_lib: None,
        state_dir: None,
        log_level: None,
        kubeconfig: Some(kubeconfig),
        node_name: Some("bench-node".into()),
        eviction_stand_ins: false,
    };
    let mut off = engine(&config);
    let mut on = engine(&config);
    let topo = Arc::new(on.placer().topology().clone());
    let plan = NrtPlan::prepare(&args, &config, &topo, std::path::Path::new("/"))?
        .ok_or("publishing did not turn on")?;
    // The daemon's runtime: two workers, the publisher's task among them.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let _guard = rt.enter();
    let nrt_metrics = NrtMetrics::default();
    on.set_observer(Box::new(plan.start(nrt_metrics.clone())?));

    batch(&mut off, PER_BATCH);
    batch(&mut on, PER_BATCH);
    let (mut a, mut b, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (x, y) = if round % 2 == 0 {
            let x = batch(&mut on, PER_BATCH);
            (x, batch(&mut off, PER_BATCH))
        } else {
            let y = batch(&mut off, PER_BATCH);
            (batch(&mut on, PER_BATCH), y)
        };
        a.push(x.as_secs_f64() * 1e6);
        b.push(y.as_secs_f64() * 1e6);
        ratio.push(x.as_secs_f64() / y.as_secs_f64());
    }
    let (lo, hi) = ratio
        .iter()
        .fold((f64::MAX, 0.0f64), |(l, h), x| (l.min(*x), h.max(*x)));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "engine create + release, DGX H100, {PODS} pods: {ROUNDS} rounds of {PER_BATCH} per side; load {}",
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    println!("\n| engine | per create + release (median) | ratio to no observer (median) | spread (min-max) |");
    println!("|---|---|---|---|");
    println!(
        "| no observer (publishing off) | {:.1} µs | 1.00 | - |",
        median(&mut b)
    );
    println!(
        "| NRT observer + publisher task | {:.1} µs | {:.2} | {lo:.2}-{hi:.2} |",
        median(&mut a),
        median(&mut ratio)
    );
    println!(
        "\npublisher meanwhile: {} attempts, {} failed unreachable (retried with backoff)",
        nrt_metrics.attempts(),
        nrt_metrics.failures("unreachable")
    );
    Ok(())
}
