//! Scaling series: the cost of one placement decision against the size of
//! the host, 2 to 64 NUMA nodes, 64 to 4,096 CPUs, 0 to 16 GPUs, at 0%, 50% and 90% of the
//! CPUs held by exclusive containers, with the growth stated and the aim checked: one decision
//! on the 64-node / 4,096-CPU host in under 10 ms (p99).
//!
//! The hosts are generated here from [`HostDesc`] (no YAML), so the sweep can go past the
//! shipped descriptions: 2 threads per core, 32 CPUs per node up to 16 nodes and 64 from 16
//! nodes, up to 4 nodes per socket, distances 10 local / 12 same socket / 32 other socket (as
//! `numactl -H` prints on EPYC NPS4, the neighbour quadrant's 11 aside), GPUs two per PCIe
//! switch with the switches spread evenly over the nodes, one RDMA NIC per switch, all GPUs
//! on NVSwitch.
//!
//! A decision is timed as `benches/placement.rs` times it: `Contender::place` of
//! [`Strategy::NriAlign`] on a clone of the loaded state made before the clock starts. Each
//! case takes single decisions until its time budget runs out and prints their p50 / p99;
//! then a least-squares slope of log p50 against log CPUs (and log nodes) per occupancy gives
//! the growth, and a PASS / MISS line the aim. `cargo test --benches` runs one small case.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use align_core::placement::{PlacementConfig, Request};
use align_core::topology::desc::{
    Attachment, CpuNumbering, GpuDesc, HostDesc, LinkLayer, NicDesc, NvlinkDesc, PcieSwitchDesc,
};
use align_core::topology::Topology;
use simulate::{Contender, Strategy};
use test_support::requests::{guaranteed, with_devices};

/// Wall time given to the samples of one case: 45 cases stay well under a minute (the loaded
/// states are built once per host and occupancy, outside it).
const BUDGET: Duration = Duration::from_millis(700);
/// Enough samples for a p99 with a few values above it, when the budget allows.
const MIN_SAMPLES: usize = 50;
const MAX_SAMPLES: usize = 3000;
/// The budget: one decision on the largest host under this (p99), far below the runtime's 2 s
/// NRI request timeout with the rest of a creation.
const AIM: Duration = Duration::from_millis(10);
/// GPUs the timed request holds on GPU hosts; occupancy leaves at least this many free.
const REQ_GPUS: usize = 2;
/// Exclusive CPUs of the one-node request: fits the 10% left free on the 64-CPU host with
/// the shared pool kept non-empty.
const REQ_CPUS: u64 = 4;
/// Labels of the timed requests (the growth is fitted on `ONE_NODE` of the CPU-only hosts).
const ONE_NODE: &str = "4 cpus";
const ONE_NODE_GPUS: &str = "4 cpus + 2 gpus + nic";
const SPANNING: &str = "1.5 nodes of cpus";

/// A Guaranteed container: `cpus` exclusive CPUs, `gib` of memory, and `gpus` and `nics` as a
/// device plugin would have allocated them.
fn req(id: &str, cpus: u64, gib: u64, gpus: &[String], nics: &[String]) -> Request {
    with_devices(guaranteed(id, cpus * 1000, Some(gib << 30)), gpus, nics)
}

/// One host of the sweep.
#[derive(Clone, Copy)]
struct Shape {
    nodes: u32,
    cpus_per_node: u32,
    gpus: u32,
}

impl Shape {
    fn cpus(self) -> u32 {
        self.nodes * self.cpus_per_node
    }
    fn name(self) -> String {
        format!("{}n-{}c-{}g", self.nodes, self.cpus(), self.gpus)
    }
}

/// The sweep: every CPU-only size (the growth is fitted on these), 8 GPUs on a small and a
/// mid host, 16 GPUs from 8 nodes up to the largest host.
const SHAPES: [Shape; 12] = [
    Shape {
        nodes: 2,
        cpus_per_node: 32,
        gpus: 0,
    },
    Shape {
        nodes: 4,
        cpus_per_node: 32,
        gpus: 0,
    },
    Shape {
        nodes: 8,
        cpus_per_node: 32,
        gpus: 0,
    },
    Shape {
        nodes: 16,
        cpus_per_node: 32,
        gpus: 0,
    },
    Shape {
        nodes: 16,
        cpus_per_node: 64,
        gpus: 0,
    },
    Shape {
        nodes: 32,
        cpus_per_node: 64,
        gpus: 0,
    },
    Shape {
        nodes: 64,
        cpus_per_node: 64,
        gpus: 0,
    },
    Shape {
        nodes: 2,
        cpus_per_node: 32,
        gpus: 8,
    },
    Shape {
        nodes: 8,
        cpus_per_node: 32,
        gpus: 8,
    },
    Shape {
        nodes: 8,
        cpus_per_node: 32,
        gpus: 16,
    },
    Shape {
        nodes: 16,
        cpus_per_node: 64,
        gpus: 16,
    },
    Shape {
        nodes: 64,
        cpus_per_node: 64,
        gpus: 16,
    },
];

const OCCUPANCY: [u32; 3] = [0, 50, 90];

fn attach_switch(id: &str) -> Attachment {
    Attachment {
        numa_node: None,
        switch: Some(id.to_string()),
        pci_bus_id: None,
        hide_numa_node: false,
        sysfs_numa_node: None,
        host_bridge: None,
    }
}

/// The description of a shape: a realistic socket grouping and distance matrix, and the GPUs
/// spread over the nodes (a 16-GPU 64-node host has a switch pair every 8 nodes).
fn desc(s: Shape) -> HostDesc {
    let per_socket = if s.nodes <= 2 {
        1
    } else {
        (s.nodes / 2).min(4)
    };
    let socket = |n: u32| n / per_socket;
    let distances = (0..s.nodes)
        .map(|i| {
            (0..s.nodes)
                .map(|j| match (i == j, socket(i) == socket(j)) {
                    (true, _) => 10,
                    (false, true) => 12,
                    (false, false) => 32,
                })
                .collect()
        })
        .collect();
    let switches = s.gpus.div_ceil(2);
    let pcie_switches = (0..switches)
        .map(|k| PcieSwitchDesc {
            id: format!("sw{k}"),
            numa_node: k * s.nodes / switches,
            parent: None,
            host_bridge: None,
        })
        .collect();
    let gpus = (0..s.gpus)
        .map(|g| GpuDesc {
            name: "NVIDIA H100 80GB HBM3".into(),
            at: attach_switch(&format!("sw{}", g / 2)),
            mig: false,
            mig_devices: Vec::new(),
            uuid: None,
            nvlink_slots: None,
            memory_node: None,
            device_id: 0x2330,
        })
        .collect();
    let nics = (0..switches)
        .map(|k| NicDesc {
            name: format!("ib{k}"),
            at: attach_switch(&format!("sw{k}")),
            rdma: Some(format!("mlx5_{k}")),
            link_layer: LinkLayer::Infiniband,
        })
        .collect();
    HostDesc {
        name: s.name(),
        description: String::new(),
        sockets: s.nodes / per_socket,
        numa_per_socket: per_socket,
        cores_per_numa: s.cpus_per_node / 2,
        threads_per_core: 2,
        l3_per_numa: 2,
        memory_per_numa: "256Gi".into(),
        hugepages_2m_per_numa: 0,
        numbering: CpuNumbering::Interleaved,
        distances: Some(distances),
        memory_only_nodes: Vec::new(),
        offline_cpus: String::new(),
        isolated_cpus: String::new(),
        pcie_switches,
        gpus,
        nvlink: if s.gpus == 0 {
            NvlinkDesc::None
        } else {
            NvlinkDesc::Nvswitch {
                links: 18,
                chips: 4,
            }
        },
        nics,
        cpu_model: "Emulated CPU".into(),
    }
}

/// A fixed-seed generator (xorshift64*): the same scatter on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

/// The host at `pct`% occupancy, as churn leaves it: a holder of one GPU (and 2 CPUs) for
/// every GPU, holders released in random order until `pct`% of the GPUs stay held (at most
/// all but the timed request's), then small exclusive containers until nothing more fits,
/// then those released in random order until the CPUs held are down to `pct`%. Every step is
/// an ordinary decision (GPUs remapped as nri-align would), so held GPUs and free CPUs are
/// holes spread over the host rather than one free block (asking for a scattered choice of
/// GPUs directly would not do: the remap moves lone holders to the lowest indices). Returns
/// the state and the CPUs held.
fn occupied(topo: &Arc<Topology>, pct: u32, rng: &mut Rng) -> (Contender, usize) {
    let mut d = Contender::new(
        Strategy::NriAlign,
        Arc::clone(topo),
        PlacementConfig::default(),
    )
    .expect("nri-align takes any host");
    if pct == 0 {
        return (d, 0);
    }
    let total = topo.cpus.len();
    let gpus = topo.gpus.len();
    let held = (gpus * pct as usize / 100).min(gpus.saturating_sub(REQ_GPUS));
    let mut used = 0;
    let mut holders: Vec<String> = Vec::new();
    for g in 0..gpus {
        let bus = [topo.gpus[g].pci_bus_id.clone()];
        let id = format!("gpu{g}");
        if d.place(&req(&id, 2, 8, &bus, &[])).is_ok() {
            used += 2;
            holders.push(id);
        }
    }
    while holders.len() > held {
        d.release(&holders.swap_remove(rng.below(holders.len())));
        used -= 2;
    }
    let mut placed: Vec<(String, usize)> = Vec::new();
    let mut misses = 0;
    for i in 0.. {
        let c = [3usize, 5, 2, 7, 4, 1, 6, 2][i % 8];
        let id = format!("bg{i}");
        if d.place(&req(&id, c as u64, 2, &[], &[])).is_ok() {
            used += c;
            placed.push((id, c));
            misses = 0;
        } else {
            misses += 1;
            if misses > 8 {
                break;
            }
        }
    }
    let target = total * pct as usize / 100;
    while used > target && !placed.is_empty() {
        let (id, c) = placed.swap_remove(rng.below(placed.len()));
        d.release(&id);
        used -= c;
    }
    (d, used)
}

/// One timed request on one loaded host.
struct Case {
    shape: Shape,
    pct: u32,
    held: usize,
    what: &'static str,
    state: Contender,
    request: Request,
}

/// The timed requests of a host: a one-node container (4 CPUs, 16 GiB; on GPU hosts 2 GPUs
/// as a topology-blind device plugin hands them, the first free, and the first RDMA NIC), and
/// on CPU-only hosts of 16 nodes and more one that spans nodes (1.5 nodes' worth of CPUs).
fn cases(shape: Shape, rng: &mut Rng) -> Vec<Case> {
    let topo = Arc::new(desc(shape).to_topology());
    assert_eq!(topo.cpus.len(), shape.cpus() as usize, "{}", shape.name());
    let mut out = Vec::new();
    for pct in OCCUPANCY {
        let (state, held) = occupied(&topo, pct, rng);
        let free_gpus: Vec<String> = {
            let busy: Vec<String> = state_gpus(&state);
            topo.gpus
                .iter()
                .map(|g| g.pci_bus_id.clone())
                .filter(|b| !busy.contains(b))
                .take(REQ_GPUS)
                .collect()
        };
        let nics: Vec<String> = topo.nics.iter().take(1).map(|n| n.name.clone()).collect();
        let one = if shape.gpus == 0 {
            req("x", REQ_CPUS, 16, &[], &[])
        } else {
            req("x", REQ_CPUS, 32, &free_gpus, &nics)
        };
        let what = if shape.gpus == 0 {
            ONE_NODE
        } else {
            ONE_NODE_GPUS
        };
        out.push(Case {
            shape,
            pct,
            held,
            what,
            state: state.clone(),
            request: one,
        });
        if shape.gpus == 0 && shape.nodes >= 16 {
            let span = u64::from(shape.cpus_per_node) * 3 / 2;
            out.push(Case {
                shape,
                pct,
                held,
                what: SPANNING,
                state,
                request: req("x", span, 64, &[], &[]),
            });
        }
    }
    out
}

/// The GPUs a loaded state holds (bus ids).
fn state_gpus(d: &Contender) -> Vec<String> {
    match d {
        Contender::NriAlign(a) => a.assignments().flat_map(|a| a.gpus.clone()).collect(),
        Contender::Kubelet(k) => k.assignments().flat_map(|a| a.gpus.clone()).collect(),
    }
}

/// Single decisions, each on a fresh clone made outside the timing, until the budget is
/// spent: sorted times in seconds, and whether the decision placed the container.
fn sample(c: &Case, budget: Duration) -> (Vec<f64>, bool) {
    let ok = c.state.clone().place(&c.request).is_ok();
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < MIN_SAMPLES || (start.elapsed() < budget && times.len() < MAX_SAMPLES) {
        let mut d = c.state.clone();
        let t = Instant::now();
        let _ = black_box(d.place(black_box(&c.request)));
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    (times, ok)
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn fmt_time(secs: f64) -> String {
    let us = secs * 1e6;
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

/// Least-squares slope of ln y against ln x: cost grows as x^slope.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (lx, ly): (Vec<f64>, Vec<f64>) = points.iter().map(|(x, y)| (x.ln(), y.ln())).unzip();
    let mx = lx.iter().sum::<f64>() / n;
    let my = ly.iter().sum::<f64>() / n;
    let sxy: f64 = lx.iter().zip(&ly).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = lx.iter().map(|x| (x - mx).powi(2)).sum();
    sxy / sxx
}

struct Row {
    shape: Shape,
    pct: u32,
    what: &'static str,
    p50: f64,
    p99: f64,
}

#[expect(
    clippy::too_many_lines,
    reason = "the bench's whole run: one block per row of the table it prints, in the order printed"
)]
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // `cargo test --benches` (no `--bench`): one small case, to prove the bench still runs.
    if !args.iter().any(|a| a == "--bench") {
        for c in cases(SHAPES[7], &mut rng) {
            let (times, ok) = sample(&c, Duration::ZERO);
            assert!(ok, "{} at {}%: {}", c.shape.name(), c.pct, c.what);
            assert!(!times.is_empty());
        }
        return;
    }
    let wall = Instant::now();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "Scaling series: one nri-align decision per sample, ~{} ms of samples per case; \
         {cores} CPUs, load {}",
        BUDGET.as_millis(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("\n| host | nodes | CPUs | GPUs | occupancy | request | samples | p50 | p99 |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for shape in SHAPES {
        for c in cases(shape, &mut rng) {
            let (times, ok) = sample(&c, BUDGET);
            let (p50, p99) = (quantile(&times, 0.5), quantile(&times, 0.99));
            let occ = format!("{}% ({} CPUs held)", c.pct, c.held);
            println!(
                "| {} | {} | {} | {} | {} | {}{} | {} | {} | {} |",
                shape.name(),
                shape.nodes,
                shape.cpus(),
                shape.gpus,
                occ,
                c.what,
                if ok { "" } else { " (refused)" },
                times.len(),
                fmt_time(p50),
                fmt_time(p99)
            );
            rows.push(Row {
                shape,
                pct: c.pct,
                what: c.what,
                p50,
                p99,
            });
        }
    }

    println!("\nGrowth (least-squares slope of log p50, one-node request on the CPU-only hosts):");
    for pct in OCCUPANCY {
        let series: Vec<&Row> = rows
            .iter()
            .filter(|r| r.pct == pct && r.shape.gpus == 0 && r.what == ONE_NODE)
            .collect();
        let by_cpus: Vec<(f64, f64)> = series
            .iter()
            .map(|r| (f64::from(r.shape.cpus()), r.p50))
            .collect();
        let by_nodes: Vec<(f64, f64)> = series
            .iter()
            .map(|r| (f64::from(r.shape.nodes), r.p50))
            .collect();
        let gpu16: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.pct == pct && r.shape.gpus == 16)
            .map(|r| (f64::from(r.shape.cpus()), r.p50))
            .collect();
        println!(
            "- {pct:>2}% occupied: cost grows as CPUs^{:.2} (nodes^{:.2}); \
             16-GPU hosts: CPUs^{:.2}",
            slope(&by_cpus),
            slope(&by_nodes),
            slope(&gpu16)
        );
    }

    let big: Vec<&Row> = rows
        .iter()
        .filter(|r| r.shape.nodes == 64 && r.shape.cpus() == 4096)
        .collect();
    let worst = big.iter().map(|r| r.p99).fold(0.0, f64::max);
    println!(
        "\n{}: 64 nodes / 4,096 CPUs (0 and 16 GPUs, every occupancy and request), worst p99 {} \
         against the {} ms aim",
        if worst < AIM.as_secs_f64() {
            "PASS"
        } else {
            "MISS"
        },
        fmt_time(worst),
        AIM.as_millis()
    );
    println!("(bench wall time {:.1} s)", wall.elapsed().as_secs_f64());
}
