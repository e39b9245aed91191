use super::*;
use crate::topology::testing;

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
    // The reference chooses no GPU set and no NIC: nothing to score.
    assert!(
        t.contains("| repacking reference | ") && t.ends_with("| 100.0 % | - | - | - |\n"),
        "{t}"
    );
    assert_eq!(rows[5].search_bound_hits, 0);
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
        nic_plugin: NicPlugin::PerNic,
        ..ChurnSpec::default()
    };
    let rows = rows("dgx1-v100", topo, spec).expect("rows");
    let got: Vec<(usize, usize)> = rows
        .iter()
        .map(|r| (r.admitted, r.refused_repackable))
        .collect();
    // With one exclusive unit per NIC the kubelet's hints run out of NICs while GPUs are
    // free: 71 pods and 125 refusals a repacking would have fitted.
    // (nri-align's default numa_choice, best-fit, then the kubelet's two and the reference.)
    assert_eq!(
        [got[0], got[3], got[4], got[5]],
        [(89, 4), (71, 125), (71, 125), (90, 0)]
    );
}

#[test]
fn a_cpu_only_host_fills_up_as_the_gpu_hosts_do() {
    let topo = Arc::new(testing::shipped("epyc-nps4"));
    // The first core's two threads (SMT siblings are n and n + 128 there).
    let reserved = crate::simulate::baseline::kubelet_reserved(&topo, 2);
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
