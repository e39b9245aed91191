//! The engine's own cost of one CreateContainer, without the NRI connection, the runtime or
//! the daemon's async runtime around it: the part of the daemon's `latency_us` that is
//! nri-align's code, on a hot CPU. `daemon_scale` measures the same creates through the
//! release daemon's socket; this bench isolates the code path, for profiles (`perf record`
//! on it) and for comparing builds without the noise of process wake-ups.
//!
//! The engine runs on the emulated 1024-CPU host (`numa16-1024`) with its state persisted
//! in a temporary directory and its metrics on, as `nri-align run` has them. Each create is
//! followed by the container's release and its pod's removal, so the node stays empty and
//! an exclusive create moves no shared container (the pool updates are `daemon_scale`'s).
//! Shared and exclusive batches alternate; the table gives each kind's median and p99 and
//! the exclusive create's ratio to the shared one in the same run.
//!
//! `cargo bench --bench engine_create`

use std::sync::Arc;
use std::time::Instant;

use nri_align::config::Config;
use nri_align::enforce::container::{ContainerView, PodView, ResourcesView};
use nri_align::enforce::engine::Engine;
use nri_align::enforce::state::StateStore;
use nri_align::host::devices::HostDevices;
use nri_align::metrics::Metrics;
use nri_align::placement::Allocator;

use test_support::bench::{hex_id, load, quantiles};

const ROUNDS: usize = 10;
const PER_BATCH: usize = 2_000;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn pod(i: usize) -> PodView {
    PodView {
        id: hex_id(0xaa, i as u64),
        uid: format!("uid-{i:08}"),
        name: format!("bench-{i}"),
        namespace: "bench".into(),
        ..Default::default()
    }
}

/// A container as the kubelet asks for it: a Guaranteed one with one whole CPU, or a
/// Burstable one with a tenth of a CPU (the shared pool); 64 MiB either way.
fn container(i: usize, p: &PodView, exclusive: bool) -> ContainerView {
    let id = hex_id(0xcc, i as u64);
    let resources = ResourcesView {
        cpu_shares: Some(if exclusive { 1024 } else { 102 }),
        cpu_quota: exclusive.then_some(100_000),
        cpu_period: Some(100_000),
        memory_limit: Some(64 << 20),
        ..Default::default()
    };
    ContainerView {
        cgroups_path: format!("/kubepods/pod{}/{id}", p.uid),
        id,
        pod_sandbox_id: p.id.clone(),
        name: format!("c{i}"),
        resources,
        ..Default::default()
    }
}

/// Times `PER_BATCH` creates of one kind, each followed by its release; returns µs each.
fn batch(
    e: &mut Engine<Allocator>,
    next: &mut usize,
    exclusive: bool,
) -> Result<Vec<f64>, BoxError> {
    let mut out = Vec::with_capacity(PER_BATCH);
    for _ in 0..PER_BATCH {
        let i = *next;
        *next += 1;
        let p = pod(i);
        let c = container(i, &p, exclusive);
        let t = Instant::now();
        let created = e.create_container(&p, &c);
        out.push(t.elapsed().as_secs_f64() * 1e6);
        if !matches!(created, Ok(Some(_))) {
            return Err(format!("create {i} failed: {created:?}").into());
        }
        e.release_container(&c.id);
        e.release_pod(&p.id);
    }
    Ok(out)
}

/// The median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    quantiles(v, 0.5).0
}

fn main() -> Result<(), BoxError> {
    // `cargo test --benches` runs bench targets without --bench: nothing to time then.
    if !std::env::args().any(|a| a == "--bench") {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let config = Config::parse("log_level: info\n", "bench")?;
    let topo = Arc::new(nri_align::topology::testing::shipped("numa16-1024"));
    let mut e = Engine::new(
        Allocator::new(topo, config.placement.clone()),
        config.clone(),
        Some(StateStore::open(dir.path())?),
        Some(Arc::new(Metrics::new())),
        Box::new(HostDevices::new(std::path::Path::new("/"))),
    );
    let mut next = 0;
    // Warm-up: the log's first compaction and every allocation size seen once.
    batch(&mut e, &mut next, false)?;
    batch(&mut e, &mut next, true)?;
    let (mut shared, mut exclusive, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let first = round % 2 == 1;
        let mut a = batch(&mut e, &mut next, first)?;
        let mut b = batch(&mut e, &mut next, !first)?;
        let (s, x) = if first {
            (&mut b, &mut a)
        } else {
            (&mut a, &mut b)
        };
        ratios.push(median(x) / median(s));
        shared.append(s);
        exclusive.append(x);
    }
    println!(
        "engine create, numa16-1024, state persisted, metrics on: {ROUNDS} rounds of {PER_BATCH} per kind; load {}",
        load()
    );
    println!("\n| create | p50 | p99 | ratio to shared (median of rounds, min-max) |");
    println!("|---|---|---|---|");
    let (p50, p99) = quantiles(&mut shared, 0.99);
    println!("| shared pool | {p50:.1} µs | {p99:.1} µs | 1.00 |");
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, 0.0f64), |(l, h), r| (l.min(*r), h.max(*r)));
    let (p50, p99) = quantiles(&mut exclusive, 0.99);
    println!(
        "| one exclusive CPU | {p50:.1} µs | {p99:.1} µs | {:.2} ({lo:.2}-{hi:.2}) |",
        median(&mut ratios)
    );
    Ok(())
}
