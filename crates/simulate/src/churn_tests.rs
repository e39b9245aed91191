use super::*;
use crate::replay_plugins;
use align_core::placement::policy::GpuMode;
use align_core::topology::testing;

#[test]
fn streams_are_seeded_and_shaped() {
    let topo = testing::shipped("dgx1-v100");
    let a = workload(&topo, 3, 30);
    assert_eq!(a, workload(&topo, 3, 30));
    assert_ne!(a, workload(&topo, 4, 30));
    assert_eq!(a.pods.len(), 30);
    assert!(a
        .pods
        .iter()
        .all(|p| [1, 2, 4, 8].contains(&p.containers[0].gpus)));
    assert!(a.events.iter().any(|e| e.remove.is_some()));
}

#[test]
fn the_link_aware_plugin_beats_lowest_index_on_dgx1() {
    let topo = Arc::new(testing::shipped("dgx1-v100"));
    // Per NIC, the one model under which the kubelet's hints run out of NICs.
    let spec = ChurnSpec {
        pods: 30,
        seeds: 2,
        nic_plugin: NicPlugin::PerNic,
        optimum: true,
        // nri-align's own GPU choice against the plugins'.
        gpu_mode: GpuMode::Remap,
        ..ChurnSpec::default()
    };
    let rows = rows("dgx1-v100", topo, spec).expect("rows");
    assert_eq!(rows.len(), 6);
    let ratio = |r: &ChurnRow| r.link_ratio_sum / r.gpu_decisions.max(1) as f64;
    assert!(
        rows.iter().all(|r| r.offered == 60 && r.admitted > 0),
        "{rows:?}"
    );
    assert!(ratio(&rows[3]) > ratio(&rows[4]), "{rows:?}");
    let t = table(&rows);
    assert_eq!(t.lines().count(), 8, "{t}");
    // The optimum chooses no GPU set and no NIC: nothing to score.
    assert!(
        t.contains("| offline optimum | ") && t.ends_with("| 100.0 % | - | - | - | - |\n"),
        "{t}"
    );
    assert_eq!(rows[5].unproven, 0);
    // Refusals that fit if moved are refusals; the kubelet, whose NIC hints count unused
    // NICs only, refuses pods here that fit with NICs shared.
    assert!(
        rows.iter()
            .all(|r| r.refused_repackable <= r.offered - r.admitted && r.search_bound_hits == 0),
        "{rows:?}"
    );
    assert!(
        rows[3].refused_repackable > rows[0].refused_repackable,
        "{rows:?}"
    );
}

#[test]
fn per_nic_keeps_the_figures_before_the_nic_models() {
    let topo = Arc::new(testing::shipped("dgx1-v100"));
    let spec = ChurnSpec {
        pods: 60,
        nic_plugin: NicPlugin::PerNic,
        optimum: false,
        gpu_mode: GpuMode::Remap,
        ..ChurnSpec::default()
    };
    let rows = rows("dgx1-v100", topo, spec).expect("rows");
    let got: Vec<(usize, usize)> = rows
        .iter()
        .map(|r| (r.admitted, r.refused_repackable))
        .collect();
    // With one exclusive unit per NIC the kubelet's hints run out of NICs while GPUs are
    // free: 71 pods and 125 refusals a repacking would have fitted.
    // (nri-align's default numa_choice, best-fit, then the kubelet's two.) nri-align's 90 and
    // 0: a 1-GPU pod fills a node in use before it opens an idle one (89 and 4 before).
    assert_eq!([got[0], got[3], got[4]], [(90, 0), (71, 125), (71, 125)]);
}

#[test]
fn a_cpu_only_host_fills_up_as_the_gpu_hosts_do() {
    let topo = Arc::new(testing::shipped("epyc-nps4"));
    // The first core's two threads (SMT siblings are n and n + 128 there).
    let reserved = crate::baseline::kubelet_reserved(&topo, 2);
    assert_eq!(reserved.to_string(), "0,128");
    let wl = workload(&topo, 1, 30);
    // Four units a node: pods of 4, 8, 16 or 32 CPUs on nodes of 32.
    let cpus: Vec<f64> = wl
        .pods
        .iter()
        .map(|p| match p.containers[0].cpu {
            Some(Quantity::Number(n)) => n,
            ref other => panic!("{other:?}"),
        })
        .collect();
    assert!(
        cpus.iter().all(|c| [4.0, 8.0, 16.0, 32.0].contains(c)),
        "{cpus:?}"
    );
    let spec = ChurnSpec {
        pods: 60,
        seeds: 2,
        optimum: false,
        ..ChurnSpec::default()
    };
    let rows = rows("epyc-nps4", topo, spec).expect("rows");
    // Every strategy meets a full node at some point: the host discriminates.
    assert!(rows.iter().all(|r| r.admitted < r.offered), "{rows:?}");
    assert!(rows.iter().all(|r| r.aligned == r.containers), "{rows:?}");
}

#[test]
fn each_numa_choice_has_its_row_on_every_churn_host_and_they_pack_differently() {
    let spec = ChurnSpec {
        pods: 30,
        seeds: 2,
        optimum: false,
        ..ChurnSpec::default()
    };
    let mut differ = Vec::new();
    for host in ["dgx1-v100", "dgx-h100", "epyc-nps4"] {
        let rows = rows(host, Arc::new(testing::shipped(host)), spec).expect("rows");
        let labels: Vec<&str> = rows.iter().map(|r| r.strategy.as_str()).collect();
        assert_eq!(
            labels[..3],
            [
                "nri-align, best-fit",
                "nri-align, most-allocated",
                "nri-align, least-allocated"
            ],
            "{host}"
        );
        for r in &rows[..3] {
            assert_eq!(r.offered, 60, "{host}: {r:?}");
            assert!(r.admitted > 0, "{host}: {r:?}");
        }
        let t = table(&rows);
        for label in &labels[..3] {
            assert!(t.contains(&format!("| {host} | {label} |")), "{t}");
        }
        // Packing onto the busiest node and spreading over the idlest must not decide alike
        // everywhere: a choice that changed nothing would be no setting at all.
        let figures = |r: &ChurnRow| (r.admitted, r.aligned, r.link_best, r.refused_repackable);
        differ.push(figures(&rows[1]) != figures(&rows[2]));
    }
    assert!(differ.iter().any(|d| *d), "{differ:?}");
}

/// How far below the kubelet's admissions nri-align may fall on the 6 seeds of the test below.
/// The aim is 1 %, which a 6-seed (or 40-seed) sum cannot resolve: the two strategies differ
/// on about one stream in twelve, by 1 to 4 pods, either way (the spread of a 40-seed
/// difference is about 3.5 pods, 0.6 %). Over these 6 seeds nri-align admits 89 pods against
/// the kubelet's 91 on DGX-1V and on DGX H100 (seed 2: nri-align keeps a 2-GPU pair
/// whole, a later 2-GPU pod takes it, and the kubelet, which split the pair, refuses that pod
/// and admits 1-GPU pods in its place). The aim itself is checked where it can be resolved:
/// [`nri_align_admits_as_many_pods_and_gpus_as_the_kubelet_over_many_streams`].
const ADMIT_SLACK: f64 = 0.03;

/// The aims of the churn comparison on every churn host, on fewer seeds than the published
/// table: nri-align admits about as many pods as the kubelet with the link-aware device plugin
/// ([`ADMIT_SLACK`]), scores GPU links at least as well, puts every NIC on a PCIe switch with
/// one of the pod's GPUs; and the offline optimum, an upper bound, admits at least as many as
/// either.
#[test]
fn nri_align_meets_the_churn_aims_under_the_optimum() {
    for host in ["dgx1-v100", "dgx-h100", "epyc-nps4"] {
        let topo = Arc::new(testing::shipped(host));
        let spec = ChurnSpec {
            seeds: 6,
            // The aims are those of nri-align's own GPU choice; under keep the device
            // plugin's (see `keep_starts_from_the_plugins_gpus_on_both_sides`).
            gpu_mode: GpuMode::Remap,
            ..ChurnSpec::default()
        };
        let rows = rows(host, topo, spec).expect("rows");
        let [ours, most, least, kubelet, lowest, best] = &rows[..] else {
            panic!("{rows:?}")
        };
        assert_eq!(
            (
                ours.strategy.as_str(),
                kubelet.strategy.as_str(),
                best.strategy.as_str()
            ),
            ("nri-align, best-fit", KUBELET, OPTIMUM)
        );
        assert_eq!(best.unproven, 0, "{host}: {rows:?}");
        for r in [ours, most, least, kubelet, lowest] {
            assert!(r.admitted <= best.admitted, "{host}: {rows:?}");
            assert_eq!(r.optimum, best.admitted);
        }
        assert!(
            ours.admitted as f64 >= kubelet.admitted as f64 * (1.0 - ADMIT_SLACK),
            "{host}: {rows:?}"
        );
        match (ours.mean_link(), kubelet.mean_link()) {
            (Some(a), Some(b)) => assert!(a >= b, "{host}: {a} < {b}"),
            (None, None) => assert_eq!(topo_gpus(host), 0),
            other => panic!("{host}: {other:?}"),
        }
        // Every NIC nri-align gives is near a GPU; hosts without RDMA NICs give none.
        assert_eq!(ours.nics_same_switch, ours.nics, "{host}");
        assert_eq!(ours.nics > 0, host != "epyc-nps4", "{host}: {rows:?}");
    }
}

fn topo_gpus(host: &str) -> usize {
    testing::shipped(host).gpus.len()
}

/// Streams of the check of the admission aim: enough that one stream's luck (about 0.55 pods
/// of spread a stream) cannot move the sum by 1 % (about 28 pods at 200 seeds, some 3.6 times
/// the spread of the sum).
const MANY_SEEDS: u64 = 200;

/// The admission aim where a sum can resolve it: over [`MANY_SEEDS`] 30-pod streams on each
/// GPU churn host, nri-align admits at least the kubelet's pods (with the link-aware device
/// plugin) less 1 %, at least its GPUs less 1 % (the work taken on: pods admitted counts a
/// 1-GPU pod as much as a 4-GPU one), with a mean link score at least the kubelet's and every
/// NIC on a PCIe switch with one of the pod's GPUs.
#[test]
fn nri_align_admits_as_many_pods_and_gpus_as_the_kubelet_over_many_streams() {
    for host in ["dgx1-v100", "dgx-h100"] {
        let topo = Arc::new(testing::shipped(host));
        let links = LinkTable::new(&topo);
        let mut sums = [ChurnRow::default(), ChurnRow::default()];
        for seed in 1..=MANY_SEEDS {
            let wl = workload(&topo, seed, 30);
            for (row, strategy) in sums.iter_mut().zip([Strategy::NriAlign, Strategy::Kubelet]) {
                let report = replay_plugins(
                    Arc::clone(&topo),
                    config(&topo),
                    &wl,
                    strategy,
                    GpuChoice::Preferred,
                    NicPlugin::default(),
                )
                .expect("replay");
                row.offered += 30;
                tally(row, &report, &topo, &links);
            }
        }
        let [ours, kubelet] = &sums;
        let within = |a: usize, b: usize| a as f64 >= b as f64 * 0.99;
        assert!(within(ours.admitted, kubelet.admitted), "{host}: {sums:?}");
        assert!(within(ours.gpus, kubelet.gpus), "{host}: {sums:?}");
        let (a, b) = (ours.mean_link(), kubelet.mean_link());
        assert!(a.zip(b).is_some_and(|(a, b)| a >= b), "{host}: {sums:?}");
        assert!(
            ours.nics > 0 && ours.nics_same_switch == ours.nics,
            "{host}: {sums:?}"
        );
    }
}

/// Each row keeps its streams' totals, and nri-align is compared with the kubelet stream by
/// stream: the same mean difference and interval [`Paired`] computes from them.
#[test]
fn the_table_compares_nri_align_with_the_kubelet_stream_by_stream() {
    let host = "dgx-h100";
    let spec = ChurnSpec {
        seeds: 4,
        optimum: false,
        ..ChurnSpec::default()
    };
    let rows = rows(host, Arc::new(testing::shipped(host)), spec).expect("rows");
    for r in &rows {
        assert_eq!(r.stream_pods.len(), 4, "{r:?}");
        assert_eq!(r.stream_pods.iter().sum::<usize>(), r.admitted, "{r:?}");
        assert_eq!(r.stream_gpus.iter().sum::<usize>(), r.gpus, "{r:?}");
    }
    let ours = rows.iter().find(|r| r.strategy == NRI_ALIGN).expect("ours");
    let kubelet = rows
        .iter()
        .find(|r| r.strategy == KUBELET)
        .expect("kubelet");
    let pods = Paired::new(&ours.stream_pods, &kubelet.stream_pods).expect("paired");
    let t = against_the_kubelet(&rows);
    assert!(
        t.starts_with(&format!(
            "\n{NRI_ALIGN} against {KUBELET}, stream by stream:\n- {host}: pods {}",
            pods.describe()
        )),
        "{t}"
    );
}

/// The daemon's default, keep: nri-align places around the GPUs the device plugin chose
/// without a Topology Manager hint, the kubelet around those it chose within its hint; with a
/// plugin blind to links both start from the lowest indices, and no second kubelet row
/// stands beside them.
#[test]
fn keep_starts_from_the_plugins_gpus_on_both_sides() {
    let topo = Arc::new(testing::shipped("dgx1-v100"));
    let spec = |device_plugin, gpu_mode| ChurnSpec {
        pods: 30,
        seeds: 2,
        optimum: false,
        gpu_mode,
        device_plugin,
        ..ChurnSpec::default()
    };
    let admitted = |s: ChurnSpec| -> Vec<usize> {
        rows("dgx1-v100", Arc::clone(&topo), s)
            .expect("rows")
            .iter()
            .map(|r| r.admitted)
            .collect()
    };
    let keep = admitted(spec(GpuChoice::Preferred, GpuMode::Keep));
    let remap = admitted(spec(GpuChoice::Preferred, GpuMode::Remap));
    assert_eq!(keep.len(), 5);
    // The kubelet rows do not read gpu_mode; nri-align's choice admits more than the plugin's
    // choice made without a hint, which single-numa-node then refuses across sockets.
    assert_eq!(keep[3..], remap[3..]);
    assert!(keep[0] < remap[0], "{keep:?} {remap:?}");
    let lowest = admitted(spec(GpuChoice::Lowest, GpuMode::Keep));
    assert_eq!(lowest.len(), 4, "{lowest:?}");
}

/// With a plugin blind to links, the kubelet's row says so, every row names its device plugin
/// and nri-align's rows their gpu_mode, and nri-align is compared with that kubelet row.
#[test]
fn rows_name_their_device_plugin_and_gpu_mode() {
    let topo = Arc::new(testing::shipped("dgx1-v100"));
    let spec = ChurnSpec {
        pods: 12,
        seeds: 2,
        optimum: false,
        device_plugin: GpuChoice::Lowest,
        ..ChurnSpec::default()
    };
    let rows = rows("dgx1-v100", topo, spec).expect("rows");
    let kubelet: Vec<&ChurnRow> = rows
        .iter()
        .filter(|r| r.strategy.starts_with("kubelet"))
        .collect();
    assert_eq!(kubelet.len(), 1, "{rows:?}");
    assert_eq!(kubelet[0].strategy, KUBELET_LOWEST);
    assert!(rows.iter().all(|r| r.device_plugin == "lowest"), "{rows:?}");
    for r in &rows {
        let want = (!r.strategy.starts_with("kubelet")).then(|| "keep".to_string());
        assert_eq!(r.gpu_mode, want, "{r:?}");
    }
    let json = serde_json::to_string(&rows).expect("json");
    assert!(json.contains("\"gpu_mode\":\"keep\""), "{json}");
    assert!(
        against_the_kubelet(&rows).contains(&format!("against {KUBELET_LOWEST}")),
        "{}",
        against_the_kubelet(&rows)
    );
}
