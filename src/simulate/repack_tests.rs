use std::collections::BTreeSet;

use super::*;
use crate::placement::policy::Policy;
use crate::simulate::{churn, replay_plugins, GpuChoice, NicPlugin, Strategy};
use crate::topology::testing;

/// A node with `gpus` GPUs and room for everything else.
fn gpu_bin(gpus: u64) -> Amounts {
    [64, 1 << 40, gpus, 2]
}

fn gpus(n: u64) -> Amounts {
    [1, 1 << 30, n, 0]
}

/// First fit without moves, as an online placement would: the node of each pod in arrival
/// order, or `None` from the first one refused.
fn first_fit(bins: &[Amounts], items: &[Amounts]) -> Option<Vec<usize>> {
    let mut free = bins.to_vec();
    let mut out = Vec::new();
    for it in items {
        let j = (0..free.len()).find(|j| fits(&free[*j], bins[*j][3], it, NicRule::Shared))?;
        for (f, x) in free[j].iter_mut().zip(it) {
            *f = f.saturating_sub(*x);
        }
        out.push(j);
    }
    Some(out)
}

#[test]
fn repacking_fits_where_first_fit_fails() {
    let bins = [gpu_bin(4), gpu_bin(4)];
    // 1 and 2 GPUs on node 0, 2 on node 1: the 3-GPU pod finds 1 and 2 GPUs free.
    let items = [gpus(1), gpus(2), gpus(2), gpus(3)];
    assert_eq!(first_fit(&bins, &items[..3]), Some(vec![0, 0, 1]));
    assert_eq!(first_fit(&bins, &items), None);
    // Moved: 1 + 3 on one node, 2 + 2 on the other.
    assert_eq!(pack(&bins, &items, NicRule::Shared, 1000), Packing::Fits);
}

#[test]
fn nothing_fits_when_no_packing_exists() {
    let bins = [gpu_bin(4), gpu_bin(4)];
    // More than a node: never under single-numa-node, though the host has 8.
    assert_eq!(
        pack(&bins, &[gpus(8)], NicRule::Shared, 1000),
        Packing::Full
    );
    // The host's totals are short.
    let nine = [gpus(4), gpus(4), gpus(1)];
    assert_eq!(pack(&bins, &nine, NicRule::Shared, 1000), Packing::Full);
    // Totals suffice (6 of 8) but no node holds two 3-GPU pods.
    let threes = [gpus(3), gpus(3), gpus(2)];
    assert_eq!(pack(&bins, &threes, NicRule::Shared, 1000), Packing::Full);
    // The CPUs of one node, the GPUs of the other: no node holds both.
    let split = [[8, 0, 0, 0], [1, 0, 4, 0]];
    assert_eq!(
        pack(&split, &[[4, 0, 2, 0]], NicRule::Shared, 1000),
        Packing::Full
    );
    // A NIC is shared, unless it is not.
    let nic = [[8, 1 << 30, 4, 1]];
    let two = [[1, 0, 1, 1], [1, 0, 1, 1]];
    assert_eq!(pack(&nic, &two, NicRule::Shared, 1000), Packing::Fits);
    assert_eq!(pack(&nic, &two, NicRule::Exclusive, 1000), Packing::Full);
    assert_eq!(
        pack(&nic, &[[1, 0, 1, 2]], NicRule::Shared, 1000),
        Packing::Full
    );
}

#[test]
fn the_bound_stops_the_search_and_is_counted() {
    // Eight nodes of 7, pods of 2 and 3 whose totals fit (14 x 4 = 56) but whose packing
    // does not (a node holds 2+2+3 = 7 or 2+2+2 = 6 or 3+3 = 6 at best): the search must
    // walk many states to say so.
    let bins = vec![[7, 0, 0, 0]; 8];
    let mut items = vec![[3, 0, 0, 0]; 10];
    items.extend(vec![[2, 0, 0, 0]; 13]);
    assert_eq!(
        pack(&bins, &items, NicRule::Shared, u64::MAX),
        Packing::Full
    );
    assert_eq!(pack(&bins, &items, NicRule::Shared, 3), Packing::Bound);
    // Through the reference, which keeps the pods admitted so far: the default bound answers,
    // a bound of 3 gives up on the first check that needs more (refused and counted).
    let run = |r: &mut Reference| {
        for (i, it) in items.iter().enumerate() {
            r.add(&format!("p{i}"), *it);
        }
        r.tally
    };
    let exact = run(&mut Reference::new(bins.clone(), NicRule::Shared));
    // Ten 3s, then 2s: at best two nodes hold two 3s and six one 3 and two 2s: twelve 2s.
    let want = Tally {
        offered: 23,
        admitted: 10 + 12,
        bound_hits: 0,
    };
    assert_eq!(exact, want);
    // A check of n pods that needs no backtracking visits n search nodes: from the fourth
    // pod on, every check reaches the bound.
    let bounded = run(&mut Reference::new(bins, NicRule::Shared).with_budget(3));
    assert_eq!(
        bounded,
        Tally {
            offered: 23,
            admitted: 3,
            bound_hits: 20
        }
    );
}

/// Every assignment of `items` to `bins`, tried one by one.
fn brute(bins: &[Amounts], items: &[Amounts], rule: NicRule) -> Packing {
    let n = bins.len();
    let mut code = vec![0usize; items.len()];
    loop {
        let mut free = bins.to_vec();
        let ok = items.iter().zip(&code).all(|(it, j)| {
            let f = fits(&free[*j], bins[*j][3], it, rule);
            for (f, x) in free[*j].iter_mut().zip(it) {
                *f = f.saturating_sub(*x);
            }
            f
        });
        if ok {
            return Packing::Fits;
        }
        let Some(i) = code.iter().position(|c| *c + 1 < n) else {
            return Packing::Full;
        };
        code[i] += 1;
        code[..i].iter_mut().for_each(|c| *c = 0);
    }
}

#[test]
fn the_search_agrees_with_trying_every_assignment() {
    let mut x = 7u64;
    let mut next = |m: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % m
    };
    for case in 0..400 {
        let nbins = 1 + next(3) as usize;
        let bins: Vec<Amounts> = (0..nbins)
            .map(|_| [4 + next(5), 4 + next(5), next(5), next(3)])
            .collect();
        let items: Vec<Amounts> = (0..1 + next(6))
            .map(|_| [1 + next(4), next(4), next(3), next(2)])
            .collect();
        for rule in [NicRule::Shared, NicRule::Exclusive] {
            assert_eq!(
                pack(&bins, &items, rule, u64::MAX),
                brute(&bins, &items, rule),
                "case {case} {rule:?}: {bins:?} {items:?}"
            );
        }
    }
}

/// What each strategy ran after each step of a replay, by pod name.
fn running_sets(wl: &Workload, report: &crate::simulate::Report) -> Vec<BTreeSet<String>> {
    let admitted = report.admitted_steps();
    let mut now = BTreeSet::new();
    let mut out = Vec::new();
    for (i, ev) in wl.events.iter().enumerate() {
        if let (Some(n), true) = (&ev.add, admitted.contains(&(i + 1))) {
            now.insert(n.clone());
        }
        if let Some(n) = &ev.remove {
            now.remove(n);
        }
        out.push(now.clone());
    }
    out
}

#[test]
fn the_reference_holds_what_the_host_holds_and_whatever_a_strategy_fits_from_less() {
    for host in ["dgx1-v100", "dgx-h100", "epyc-nps4"] {
        let topo = Arc::new(testing::shipped(host));
        let config = PlacementConfig {
            policy: Policy::SingleNumaNode,
            reserved_cpus: crate::simulate::baseline::kubelet_reserved(&topo, 2),
            ..PlacementConfig::default()
        };
        let nic_models = [
            NicPlugin::PerNic,
            NicPlugin::default(),
            NicPlugin::Sriov { vfs_per_pf: 8 },
        ];
        for (seed, nic) in (1..=2).flat_map(|s| nic_models.map(|n| (s, n))) {
            // The NIC rule loosened to the kubelet's where that is looser.
            let mut bins = bins(Arc::clone(&topo), &config);
            loosen_nics(&mut bins, nic);
            let total = |k: usize| bins.iter().map(|b| b[k]).sum::<u64>();
            let wl = churn::workload(&topo, seed, 60);
            let reports: Vec<_> = [
                (Strategy::NriAlign, GpuChoice::Preferred),
                (Strategy::Kubelet, GpuChoice::Preferred),
            ]
            .into_iter()
            .map(|(s, c)| {
                let r = replay_plugins(Arc::clone(&topo), config.clone(), &wl, s, c, nic)
                    .expect("replay");
                running_sets(&wl, &r)
            })
            .collect();
            let mut r = Reference::new(bins.clone(), NicRule::Shared);
            for (i, ev) in wl.events.iter().enumerate() {
                let Some(name) = &ev.add else {
                    r.remove(ev.remove.as_deref().unwrap_or_default());
                    continue;
                };
                let pod = wl.pods.iter().find(|p| &p.name == name).expect("pod");
                let before: BTreeSet<String> = r.running().map(str::to_string).collect();
                let ok = r.add(name, demand(pod));
                let used: Vec<u64> = (0..3)
                    .map(|k| r.running.values().map(|d| d[k]).sum())
                    .collect();
                assert!(
                    (0..3).all(|k| used[k] <= total(k)),
                    "{host} {seed}: {used:?}"
                );
                // A strategy that admitted this pod on top of a superset of what the
                // reference runs proves a packing of the reference's pods plus this one.
                for sets in &reports {
                    let prior = i
                        .checked_sub(1)
                        .map(|p| sets[p].clone())
                        .unwrap_or_default();
                    if sets[i].contains(name) && before.is_subset(&prior) {
                        assert!(ok, "{host} seed {seed} step {}: {name} refused", i + 1);
                    }
                }
            }
            assert_eq!(r.tally.bound_hits, 0, "{host} {seed}");
        }
    }
}
