//! Placement benchmarks: one decision on a 16-node 1024-CPU host, GPU-set choice on the DGX
//! shapes, and the kubelet-like decider as a baseline measured in the same run (ratios printed
//! at the end).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::Criterion;
use nri_align::placement::kubelet::Kubelet;
use nri_align::placement::testing;
use nri_align::placement::{Allocator, PlacementConfig, Request};
use nri_align::topology::Topology;

fn req(id: &str, cpus: u64, gib: u64, gpus: &[String]) -> Request {
    let mut r = Request {
        container_id: id.into(),
        container_name: "c".into(),
        cpu_request_milli: cpus * 1000,
        cpu_limit_milli: Some(cpus * 1000),
        memory_limit_bytes: Some(gib << 30),
        allocated_gpus: gpus.to_vec(),
        ..Request::default()
    };
    r.pod.uid = id.into();
    r
}

/// An allocator and a kubelet decider with the same background load (a third of the CPUs).
fn loaded(topo: &Topology, gpus_busy: usize) -> (Allocator, Option<Kubelet>) {
    let arc = Arc::new(topo.clone());
    let mut a = Allocator::new(Arc::clone(&arc), PlacementConfig::default());
    let mut k = Kubelet::new(arc, PlacementConfig::default()).ok();
    let total = topo.cpus.len() as u64;
    let mut used = 0;
    let mut i = 0;
    let busy: Vec<String> = topo
        .gpus
        .iter()
        .take(gpus_busy)
        .map(|g| g.pci_bus_id.clone())
        .collect();
    while used < total / 3 {
        let c = [3u64, 5, 2, 7, 4][i % 5];
        let g: &[String] = if i == 0 { &busy } else { &[] };
        let r = req(&format!("bg{i}"), c, 2, g);
        if a.place(&r).is_err() {
            break;
        }
        if let Some(k) = k.as_mut() {
            let _ = k.place(&r);
        }
        used += c;
        i += 1;
    }
    (a, k)
}

struct Case {
    name: &'static str,
    topo: Topology,
    request: Request,
    busy_gpus: usize,
}

fn cases() -> Vec<Case> {
    let dgx1 = testing::dgx1_v100();
    let h100 = testing::dgx_h100();
    let g2: Vec<String> = dgx1
        .gpus
        .iter()
        .take(2)
        .map(|g| g.pci_bus_id.clone())
        .collect();
    let g4: Vec<String> = h100
        .gpus
        .iter()
        .take(4)
        .map(|g| g.pci_bus_id.clone())
        .collect();
    vec![
        Case {
            name: "numa16-1024 24 cpus",
            topo: testing::numa16_1024(),
            request: req("x", 24, 16, &[]),
            busy_gpus: 0,
        },
        Case {
            name: "numa16-1024 200 cpus",
            topo: testing::numa16_1024(),
            request: req("x", 200, 64, &[]),
            busy_gpus: 0,
        },
        Case {
            name: "epyc-nps4 40 cpus",
            topo: testing::epyc_nps4(),
            request: req("x", 40, 16, &[]),
            busy_gpus: 0,
        },
        Case {
            name: "dgx1-v100 2 of 6 gpus",
            topo: dgx1,
            request: req("x", 8, 16, &g2),
            busy_gpus: 2,
        },
        Case {
            name: "dgx-h100 4 of 8 gpus",
            topo: h100,
            request: req("x", 16, 64, &g4),
            busy_gpus: 0,
        },
    ]
}

fn main() {
    let mut c = Criterion::default().sample_size(20).configure_from_args();
    let mut ratios = Vec::new();
    for case in cases() {
        let (a, k) = loaded(&case.topo, case.busy_gpus);
        let mut g = c.benchmark_group(case.name);
        g.bench_function("nri-align", |b| {
            b.iter_batched(
                || a.clone(),
                |mut a| black_box(a.place(&case.request)),
                criterion::BatchSize::SmallInput,
            )
        });
        if let Some(k) = &k {
            g.bench_function("kubelet", |b| {
                b.iter_batched(
                    || k.clone(),
                    |mut k| black_box(k.place(&case.request)),
                    criterion::BatchSize::SmallInput,
                )
            });
        }
        g.finish();
        // Same-run ratio, timed directly (clone cost excluded from neither side).
        let n = 200;
        let t = Instant::now();
        for _ in 0..n {
            black_box(a.clone().place(&case.request).ok());
        }
        let ours = t.elapsed() / n;
        let theirs = k.as_ref().map(|k| {
            let t = Instant::now();
            for _ in 0..n {
                black_box(k.clone().place(&case.request).ok());
            }
            t.elapsed() / n
        });
        ratios.push((case.name, ours, theirs));
    }
    c.final_summary();
    println!("\nper decision (mean of 200, clone included):");
    for (name, ours, theirs) in ratios {
        match theirs {
            Some(t) => println!(
                "  {name:24} nri-align {ours:>10.1?}  kubelet {t:>10.1?}  ratio {:.2}",
                ours.as_secs_f64() / t.as_secs_f64()
            ),
            None => println!(
                "  {name:24} nri-align {ours:>10.1?}  kubelet: refuses hosts over 8 NUMA nodes"
            ),
        }
    }
}
