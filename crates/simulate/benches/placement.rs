//! Placement benchmarks: one decision on the shipped host descriptions (16-node 1024-CPU host,
//! EPYC NPS4, DGX-1V cube mesh, DGX H100, GB200 NVL4 in NUMA mode: 34 nodes) and on the 16-GPU fixture hosts (DGX-2-like,
//! HGX-like with NVSwitch, two NVLink islands; idle and with half their GPUs held: the bound
//! of the GPU-set search), each against the kubelet-like baseline measured in the same run.
//!
//! Three passes. Criterion times every decision on its own (`cargo bench --bench placement`
//! prints its usual per-benchmark lines). A tail pass times single decisions of ours and
//! prints their p50 / p99 / max; on the GPU hosts also the same decisions by the exhaustive
//! GPU-set search (every set ranked: the reference the daemon's reduced search is tested
//! against), and each case's p99 against its aim (`-- FILTER` runs these two passes on the
//! cases whose name holds FILTER, or one of its `|` alternatives). Then an interleaved
//! pass times both sides in alternating batches, round after round, so load from other jobs on
//! a shared box hits both alike, and prints a markdown table: median time per decision of each
//! side, the median of the per-round ratios, and their spread (min - max over the rounds).
//! Cloning the contender (the state a decision starts from) is outside every timing.
//!
//! The kubelet refuses hosts with more than 8 NUMA nodes (its hint merge is exponential), so
//! the 16-node cases compare with the kubelet on the 8-node EPYC host, the largest it accepts,
//! and the 34-node GB200 case with the kubelet on the same tray under CDMM (2 nodes).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use align_core::placement::{Allocator, GpuSearch, PlacementConfig, Request};
use align_core::topology::desc::HostDesc;
use align_core::topology::testing::shipped;
use align_core::topology::Topology;
use criterion::{BatchSize, Criterion};
use simulate::{Contender, Strategy};
use test_support::requests::{guaranteed, with_devices};

/// Rounds of the interleaved pass (each one batch of each side).
const ROUNDS: usize = 15;
/// Target wall time of one batch: long enough to swamp timer overhead, short enough that
/// both sides of a round see the same machine.
const BATCH: Duration = Duration::from_millis(4);

/// A Guaranteed container: `cpus` exclusive CPUs, `gib` of memory, and `gpus` and `nics` as a
/// device plugin would have allocated them.
fn req(id: &str, cpus: u64, gib: u64, gpus: &[String], nics: &[String]) -> Request {
    with_devices(guaranteed(id, cpus * 1000, Some(gib << 30)), gpus, nics)
}

/// The 16-GPU hosts (test fixtures shared with `crates/align-core/tests/placement/gpu_search_props.rs`): a DGX-2-like
/// NVSwitch host, an HGX-like NVSwitch host, two NVLink islands of 8.
const FIXTURES: [(&str, &str); 3] = [
    (
        "dgx2-like",
        include_str!("../../../tests/fixtures/hosts/dgx2-like.yaml"),
    ),
    (
        "hgx16-nvswitch",
        include_str!("../../../tests/fixtures/hosts/hgx16-nvswitch.yaml"),
    ),
    (
        "islands16",
        include_str!("../../../tests/fixtures/hosts/islands16.yaml"),
    ),
];

/// GPUs held at ~50% occupancy of a 16-GPU host: scattered over switches and sockets, as
/// churn leaves them, rather than one whole socket.
const HALF_HELD: [usize; 8] = [1, 2, 4, 7, 8, 9, 13, 14];

/// Either side of a case, as `simulate` runs it.
fn contender(topo: &Topology, kubelet: bool) -> Contender {
    let strategy = if kubelet {
        Strategy::Kubelet
    } else {
        Strategy::NriAlign
    };
    Contender::new(strategy, Arc::new(topo.clone()), PlacementConfig::default())
        .expect("at most 8 NUMA nodes")
}

/// The same background load on either side: a third of the CPUs in small exclusive
/// containers, and the GPUs `busy` held.
fn loaded(mut d: Contender, topo: &Topology, busy: &[usize]) -> Contender {
    let busy: Vec<String> = busy
        .iter()
        .map(|&g| topo.gpus[g].pci_bus_id.clone())
        .collect();
    let target = topo.cpus.len() as u64 / 3;
    let mut used = 0;
    for i in 0.. {
        let c = [3u64, 5, 2, 7, 4][i % 5];
        if used + c > target {
            break;
        }
        let g: &[String] = if i == 0 { &busy } else { &[] };
        if d.place(&req(&format!("bg{i}"), c, 2, g, &[])).is_err() {
            break;
        }
        used += c;
    }
    d
}

/// One side of a case: a loaded contender and the request it decides.
struct Side {
    label: String,
    contender: Contender,
    request: Request,
}

struct Case {
    name: String,
    ours: Side,
    base: Side,
    /// GPU cases: nri-align with the exhaustive GPU-set search, same load and request.
    exhaustive: Option<Side>,
    /// The p99 a decision of ours must stay under (idle 16-GPU hosts 100 µs, 8-GPU hosts
    /// 50 µs), where there is one.
    aim: Option<Duration>,
}

/// nri-align ranking every GPU set (no classes of interchangeable sets), loaded as `side`.
fn exhaustive(topo: &Topology, busy: &[usize], r: Request) -> Side {
    let mut a = Allocator::new(Arc::new(topo.clone()), PlacementConfig::default());
    a.set_gpu_search(GpuSearch::Exhaustive);
    Side {
        label: "nri-align, exhaustive GPU search".into(),
        contender: loaded(Contender::NriAlign(Box::new(a)), topo, busy),
        request: r,
    }
}

fn side(label: &str, topo: &Topology, kubelet: bool, busy: &[usize], r: Request) -> Side {
    Side {
        label: label.to_string(),
        contender: loaded(contender(topo, kubelet), topo, busy),
        request: r,
    }
}

/// The first `n` GPUs / NICs that are free after the background load (which holds the GPUs
/// `busy`), as a device plugin blind to topology would allocate them.
fn first_gpus(topo: &Topology, busy: &[usize], n: usize) -> Vec<String> {
    (0..topo.gpus.len())
        .filter(|g| !busy.contains(g))
        .take(n)
        .map(|g| topo.gpus[g].pci_bus_id.clone())
        .collect()
}

fn first_nics(topo: &Topology, n: usize) -> Vec<String> {
    topo.nics
        .iter()
        .filter(|x| x.rdma_device.is_some())
        .take(n)
        .map(|x| x.name.clone())
        .collect()
}

/// A GPU case: name, host, held GPUs, GPUs and NICs asked for, GiB of memory.
type GpuCase<'a> = (String, &'a Topology, &'a [usize], usize, usize, u64);

#[expect(
    clippy::too_many_lines,
    reason = "the table of measured cases: one entry per host and request shape"
)]
fn cases() -> Vec<Case> {
    let n16 = shipped("numa16-1024");
    let epyc = shipped("epyc-nps4");
    let dgx1 = shipped("dgx1-v100");
    let h100 = shipped("dgx-h100");
    let gb200 = shipped("gb200-nvl4-numa");
    let gb200_cdmm = shipped("gb200-nvl4-cdmm");
    let sixteen: Vec<(&str, Topology)> = FIXTURES
        .iter()
        .map(|(name, text)| {
            let desc = HostDesc::from_yaml(text).expect("fixture description");
            (*name, desc.to_topology())
        })
        .collect();
    let mut out = vec![
        Case {
            name: "numa16-1024: 24 cpus (one node)".into(),
            ours: side("nri-align", &n16, false, &[], req("x", 24, 16, &[], &[])),
            base: side(
                "kubelet on epyc-nps4, same request (8 nodes: its cap)",
                &epyc,
                true,
                &[],
                req("x", 24, 16, &[], &[]),
            ),
            exhaustive: None,
            aim: None,
        },
        Case {
            name: "numa16-1024: 200 cpus (spans nodes)".into(),
            ours: side("nri-align", &n16, false, &[], req("x", 200, 64, &[], &[])),
            base: side(
                "kubelet on epyc-nps4, 40 cpus over 2 nodes (8 nodes: its cap)",
                &epyc,
                true,
                &[],
                req("x", 40, 16, &[], &[]),
            ),
            exhaustive: None,
            aim: None,
        },
        Case {
            name: "epyc-nps4: 40 cpus (spans 2 nodes)".into(),
            ours: side("nri-align", &epyc, false, &[], req("x", 40, 16, &[], &[])),
            base: side("kubelet", &epyc, true, &[], req("x", 40, 16, &[], &[])),
            exhaustive: None,
            aim: None,
        },
        Case {
            // 34 nodes, 2 with CPUs: the kubelet refuses it unless max-allowable-numa-nodes
            // is raised, so its side is the same tray under CDMM (2 nodes).
            name: "gb200-nvl4-numa: 2 gpus + 1 nic".into(),
            ours: side(
                "nri-align",
                &gb200,
                false,
                &[],
                req(
                    "x",
                    16,
                    32,
                    &first_gpus(&gb200, &[], 2),
                    &first_nics(&gb200, 1),
                ),
            ),
            base: side(
                "kubelet on gb200-nvl4-cdmm, same request (34 nodes: over its cap)",
                &gb200_cdmm,
                true,
                &[],
                req(
                    "x",
                    16,
                    32,
                    &first_gpus(&gb200_cdmm, &[], 2),
                    &first_nics(&gb200_cdmm, 1),
                ),
            ),
            exhaustive: None,
            aim: None,
        },
    ];
    let mut gpu_cases: Vec<GpuCase> = vec![
        ("dgx1-v100: 2 gpus, 2 busy".into(), &dgx1, &[0, 1], 2, 1, 8),
        ("dgx1-v100: 4 gpus, idle".into(), &dgx1, &[], 4, 1, 16),
        ("dgx1-v100: 2 gpus + nic, idle".into(), &dgx1, &[], 2, 1, 8),
        ("dgx-h100: 4 gpus + 2 nics".into(), &h100, &[], 4, 2, 32),
        ("dgx-h100: 2 gpus + nic, idle".into(), &h100, &[], 2, 1, 16),
        (
            "dgx-h100: 2 gpus, half busy".into(),
            &h100,
            &[0, 3, 5, 6],
            2,
            1,
            16,
        ),
    ];
    for (name, topo) in &sixteen {
        gpu_cases.push((format!("{name}: 1 of 16 idle + nic"), topo, &[], 1, 1, 8));
        gpu_cases.push((format!("{name}: 2 of 16 idle + nic"), topo, &[], 2, 1, 16));
        gpu_cases.push((format!("{name}: 4 of 16 idle"), topo, &[], 4, 1, 32));
        gpu_cases.push((format!("{name}: 8 of 16 idle"), topo, &[], 8, 2, 64));
        gpu_cases.push((format!("{name}: 2 of 8 free"), topo, &HALF_HELD, 2, 1, 16));
        gpu_cases.push((format!("{name}: 4 of 8 free"), topo, &HALF_HELD, 4, 1, 32));
    }
    for (name, topo, busy, n, nics, gib) in gpu_cases {
        let r = req(
            "x",
            8,
            gib,
            &first_gpus(topo, busy, n),
            &first_nics(topo, nics),
        );
        // Idle 16-GPU hosts 100 µs, every 8-GPU host case 50 µs.
        let aim = match topo.gpus.len() {
            16 if busy.is_empty() => Some(Duration::from_micros(100)),
            8 => Some(Duration::from_micros(50)),
            _ => None,
        };
        out.push(Case {
            name,
            ours: side("nri-align", topo, false, busy, r.clone()),
            base: side("kubelet", topo, true, busy, r.clone()),
            exhaustive: Some(exhaustive(topo, busy, r)),
            aim,
        });
    }
    out
}

/// Time per decision over `n` decisions, each on a fresh clone made before the clock starts.
fn batch(s: &Side, n: usize) -> Duration {
    let mut fresh: Vec<Contender> = (0..n).map(|_| s.contender.clone()).collect();
    let t = Instant::now();
    for d in &mut fresh {
        let _ = black_box(d.place(black_box(&s.request)));
    }
    let took = t.elapsed();
    drop(fresh);
    took / n as u32
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

fn fmt_us(secs: f64) -> String {
    let us = secs * 1e6;
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

struct Row {
    name: String,
    ours: f64,
    base_label: String,
    base: f64,
    ratio: f64,
    lo: f64,
    hi: f64,
}

/// The interleaved pass: ROUNDS rounds, each a batch of ours and a batch of the baseline, in
/// alternating order.
fn interleaved(c: &Case) -> Row {
    // Size the batches from one decision of each side.
    let per = |s: &Side| batch(s, 1).max(Duration::from_nanos(100));
    let n_ours = (BATCH.as_nanos() / per(&c.ours).as_nanos()).clamp(3, 400) as usize;
    let n_base = (BATCH.as_nanos() / per(&c.base).as_nanos()).clamp(3, 400) as usize;
    let (mut ours, mut base, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (a, b) = if round % 2 == 0 {
            let a = batch(&c.ours, n_ours);
            (a, batch(&c.base, n_base))
        } else {
            let b = batch(&c.base, n_base);
            (batch(&c.ours, n_ours), b)
        };
        ours.push(a.as_secs_f64());
        base.push(b.as_secs_f64());
        ratios.push(a.as_secs_f64() / b.as_secs_f64());
    }
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, 0.0f64), |(l, h), r| (l.min(*r), h.max(*r)));
    Row {
        name: c.name.clone(),
        ours: median(&mut ours),
        base_label: c.base.label.clone(),
        base: median(&mut base),
        ratio: median(&mut ratios),
        lo,
        hi,
    }
}

/// Decisions timed one by one for the tail: enough for a p99 of a few hundred samples above.
const TAIL_SAMPLES: usize = 2000;

/// Wall time one side's tail may take: the exhaustive search takes ms a decision on 16 GPUs,
/// and a few hundred samples still give a p99.
const TAIL_BUDGET: Duration = Duration::from_secs(3);

/// Median, p99 and worst time of one decision of `s`, each timed alone on a fresh clone
/// ([`TAIL_SAMPLES`], or at least 200 and as many as [`TAIL_BUDGET`] allows).
fn tail(s: &Side) -> (f64, f64, f64) {
    let start = Instant::now();
    let mut times: Vec<f64> = Vec::with_capacity(TAIL_SAMPLES);
    while times.len() < TAIL_SAMPLES && (times.len() < 200 || start.elapsed() < TAIL_BUDGET) {
        let mut d = s.contender.clone();
        let t = Instant::now();
        let _ = black_box(d.place(black_box(&s.request)));
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99), times[times.len() - 1])
}

/// The tail pass over the cases a filter selects (all without one).
fn print_tails(cases: &[Case], filters: &[String]) {
    println!(
        "\nTail pass: {TAIL_SAMPLES} decisions of nri-align per case, each timed alone; on GPU \
         hosts the exhaustive GPU-set search on the same state (200 decisions or more, up to {} \
         s); {} CPUs, load {} at the start",
        TAIL_BUDGET.as_secs(),
        cpus(),
        load()
    );
    println!("\n| case | p50 | p99 | max | exhaustive p50 / p99 | p99 vs exhaustive | aim (p99) |");
    println!("|---|---|---|---|---|---|---|");
    for c in cases {
        // Criterion reads the filter as a regex; alternatives (`a|b`) are all this pass needs.
        let picked = filters
            .iter()
            .any(|f| f.split('|').any(|alt| c.name.contains(alt)));
        if !filters.is_empty() && !picked {
            continue;
        }
        let (p50, p99, max) = tail(&c.ours);
        let (full, ratio) = match &c.exhaustive {
            Some(e) => {
                let (e50, e99, _) = tail(e);
                (
                    format!("{} / {}", fmt_us(e50), fmt_us(e99)),
                    format!("{:.2}", p99 / e99),
                )
            }
            None => ("-".into(), "-".into()),
        };
        let aim = match c.aim {
            Some(a) if p99 < a.as_secs_f64() => format!("< {} PASS", fmt_us(a.as_secs_f64())),
            Some(a) => format!("< {} MISS", fmt_us(a.as_secs_f64())),
            None => "-".into(),
        };
        println!(
            "| {} | {} | {} | {} | {full} | {ratio} | {aim} |",
            c.name,
            fmt_us(p50),
            fmt_us(p99),
            fmt_us(max)
        );
    }
}

/// The 1, 5 and 15 minute load averages: the tails move with what else the machine runs.
fn load() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

fn main() {
    let cases = cases();
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_millis(1500))
        .configure_from_args();
    for case in &cases {
        let mut g = c.benchmark_group(case.name.as_str());
        for s in [&case.ours, &case.base] {
            let id = if s.label.starts_with("kubelet on") {
                "kubelet (other host)"
            } else {
                s.label.as_str()
            };
            g.bench_function(id, |b| {
                // By reference: the clone is made and dropped outside the timing, as in the
                // interleaved pass.
                b.iter_batched_ref(
                    || s.contender.clone(),
                    |d| black_box(d.place(&s.request)),
                    BatchSize::SmallInput,
                )
            });
        }
        g.finish();
    }
    c.final_summary();

    // `cargo bench -- FILTER` and `cargo test --benches` run criterion only.
    let args: Vec<String> = std::env::args().collect();
    let filters: Vec<String> = args
        .iter()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .cloned()
        .collect();
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    print_tails(&cases, &filters);
    if !filters.is_empty() {
        return;
    }
    let rows: Vec<Row> = cases.iter().map(interleaved).collect();
    println!(
        "\nInterleaved pass: {ROUNDS} rounds of ~{} ms batches per side; {} CPUs, load {}",
        BATCH.as_millis(),
        cpus(),
        load()
    );
    println!(
        "\n| case | nri-align | baseline | baseline time | ratio (median) | spread (min-max) |"
    );
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.2}-{:.2} |",
            r.name,
            fmt_us(r.ours),
            r.base_label,
            fmt_us(r.base),
            r.ratio,
            r.lo,
            r.hi
        );
    }
}
