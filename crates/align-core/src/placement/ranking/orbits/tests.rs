//! Tests of `orbits`: classes, groups and blocks of the fixture hosts, and orbits that
//! cover every set once.

use std::sync::Arc;

use super::*;
use crate::topology::testing::fixture_or_shipped;
use crate::topology::CpuSet;
use best::MAX_BEST;

/// The link table and an empty ledger of host `name`.
fn host(name: &str) -> (LinkTable, Ledger) {
    let topo = fixture_or_shipped(name);
    (
        LinkTable::new(&topo),
        Ledger::new(Arc::new(topo), CpuSet::new()),
    )
}

#[test]
fn dgx2_like_gpus_pair_by_switch_and_switches_group_by_socket() {
    let (table, ledger) = host("dgx2-like");
    let free: Vec<usize> = (0..16).collect();
    // Links alone: 8 switch pairs, 4 interchangeable switches per socket.
    let links = Symmetry::new(&table, &ledger, &free, false);
    assert_eq!(links.classes.len(), 8);
    assert_eq!(links.groups, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    // Multisets of 4 counts of at most 2 per socket: 3 x 3 + 2 x 2 + 1 for 4 GPUs.
    assert_eq!(links.representatives(4).map(|r| r.len()), Some(14));
    assert_eq!(links.representatives(8).map(|r| r.len()), Some(29));
    // Each switch's NIC tells the switches apart, not the GPUs of a switch.
    let nics = Symmetry::new(&table, &ledger, &free, true);
    assert_eq!(nics.classes.len(), 8);
    assert_eq!(nics.groups.len(), 8);
    // Sets that map onto each other share a key, others do not.
    assert_eq!(links.key(&[0, 2]), links.key(&[5, 7]));
    assert_ne!(links.key(&[0, 1]), links.key(&[0, 2]));
    assert_ne!(links.key(&[0, 2]), links.key(&[0, 8]));
}

#[test]
fn orbits_of_the_representatives_cover_every_set_once() {
    // Idle DGX-2-like host, islands16 with GPU 0 and 9 held (classes of one and of two,
    // groups of one and of three), the HGX-like host idle (blocks of two groups) and with
    // GPUs 0, 6 and 9 held (blocks of one group beside blocks of two).
    for (name, free) in [
        ("dgx2-like", (0..16).collect::<Vec<usize>>()),
        ("islands16", (1..16).filter(|g| *g != 9).collect()),
        ("hgx16-nvswitch", (0..16).collect()),
        (
            "hgx16-nvswitch",
            (1..16).filter(|g| ![6, 9].contains(g)).collect(),
        ),
    ] {
        let (table, ledger) = host(name);
        let sym = Symmetry::new(&table, &ledger, &free, false);
        for k in 1..=6 {
            let reps = sym.representatives(k).expect("few");
            let mut seen = std::collections::HashSet::new();
            for rep in &reps {
                for set in sym.orbit(rep) {
                    assert_eq!(sym.key(&set), sym.key(rep), "{name} k={k}: {set:?}");
                    assert!(set.iter().all(|g| free.contains(g)), "{name}: {set:?}");
                    assert!(seen.insert(set), "{name} k={k}: twice");
                }
            }
            let all = gpus::candidates(&table, &free, &[], k).len();
            assert_eq!(seen.len(), all, "{name} k={k}");
        }
    }
}

#[test]
fn hgx16_host_bridges_swap_as_pairs_of_switches() {
    let (table, ledger) = host("hgx16-nvswitch");
    let free: Vec<usize> = (0..16).collect();
    let sym = Symmetry::new(&table, &ledger, &free, false);
    // A switch's two GPUs, a host bridge's two switches, a socket's two host bridges.
    assert_eq!(sym.classes.len(), 8);
    assert_eq!(
        sym.groups,
        vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]
    );
    assert_eq!(sym.blocks, vec![vec![0, 1], vec![2, 3]]);
    // Per socket 1, 1, 3, 3, 5 count shapes of 0-4 GPUs: 5 + 3 + 9 + 3 + 5 for 4 GPUs
    // (65 without the blocks).
    assert_eq!(sym.representatives(4).map(|r| r.len()), Some(25));
    // The host bridges of a socket map onto each other, the sockets do not (NUMA nodes).
    assert_eq!(sym.key(&[0, 2]), sym.key(&[4, 6]));
    assert_ne!(sym.key(&[0, 2]), sym.key(&[0, 4]));
    assert_ne!(sym.key(&[0, 2]), sym.key(&[8, 10]));
}

#[test]
fn dgx1_cube_mesh_has_no_interchangeable_gpus() {
    let (table, ledger) = host("dgx1-v100");
    let free: Vec<usize> = (0..8).collect();
    let sym = Symmetry::new(&table, &ledger, &free, false);
    // NV1 / NV2 differ between every two GPUs' rows: each GPU is its own class.
    assert_eq!(sym.classes.len(), 8);
    let reps = sym.representatives(3).expect("few");
    assert_eq!(reps.len(), 56);
}

#[test]
fn held_gpus_leave_their_mates_alone() {
    let (table, ledger) = host("islands16");
    // GPU 0 held: GPU 1 (its switch mate, NV4 to it) has no mate left; the other three
    // switches of island 0 stay interchangeable as pairs.
    let free: Vec<usize> = (1..16).collect();
    let sym = Symmetry::new(&table, &ledger, &free, false);
    assert_eq!(sym.classes.len(), 8);
    assert_eq!(sym.classes[0], vec![0]);
    assert_eq!(sym.groups[0], vec![0]);
    assert_eq!(sym.groups[1], vec![1, 2, 3]);
    assert!(lookahead_invariant(&table, &free, 4));
}

/// The best score from class counts equals the best set score of every set, on every GPU
/// host, idle and with GPUs held, for sets up to 8 (the look-ahead's `2k` for 4 GPUs).
#[test]
fn best_score_from_class_counts_is_the_best_set_score() {
    for name in crate::topology::testing::GPU_HOSTS {
        let (table, ledger) = host(name);
        let n = ledger.topo().gpus.len();
        for held in [vec![], vec![0, 5], vec![1, 2, 4, 7, 8, 9, 13, 14]] {
            let free: Vec<usize> = (0..n).filter(|g| !held.contains(g)).collect();
            let sym = Symmetry::new(&table, &ledger, &free, false);
            for k in 1..=8.min(free.len() + 1) {
                let got = sym.best_score(k, |a, b| table.pair(free[a], free[b]));
                let got = got.map(|(best, _)| best);
                let all = gpus::candidates(&table, &free, &[], k);
                let want = all.iter().map(|s| table.set_score(s)).max().unwrap_or(0);
                assert_eq!(got, Some(want), "{name} {held:?} k={k}");
            }
        }
    }
}

/// A set leaves a best `2k`-set of the free GPUs exactly when `holds` says so for one of the
/// best class counts (when every tie was kept; only then, else).
#[test]
fn holds_finds_the_best_sets_a_set_leaves() {
    for name in crate::topology::testing::GPU_HOSTS {
        let (table, ledger) = host(name);
        let n = ledger.topo().gpus.len();
        for held in [vec![], vec![0, 5], vec![1, 2, 4, 7, 8, 9, 13, 14]] {
            let free: Vec<usize> = (0..n).filter(|g| !held.contains(g)).collect();
            let sym = Symmetry::new(&table, &ledger, &free, false);
            for k in 2..=4 {
                let pair = |a: usize, b: usize| table.pair(free[a], free[b]);
                let (best, ties) = sym.best_score(2 * k, pair).expect("few");
                for taken in gpus::candidates(&table, &free, &[], k).iter().step_by(5) {
                    let rest: Vec<usize> = free
                        .iter()
                        .copied()
                        .filter(|g| !taken.contains(g))
                        .collect();
                    let left = gpus::candidates(&table, &rest, &[], 2 * k)
                        .iter()
                        .any(|s| table.set_score(s) == best);
                    let held_best = ties.iter().any(|c| sym.holds(c, taken));
                    assert!(!held_best || left, "{name} {held:?} {taken:?}");
                    if ties.len() < MAX_BEST {
                        assert_eq!(held_best, left, "{name} {held:?} {taken:?}");
                    }
                }
            }
        }
    }
}

/// The topology's twin masks find the classes the permutation check finds, on every GPU host
/// and a spread of free sets (so the masks are right whatever is held).
#[test]
fn twin_masks_give_the_classes_of_the_permutation_check() {
    for name in crate::topology::testing::GPU_HOSTS {
        let (table, ledger) = host(name);
        let mut checked = table.clone();
        checked.twins = None;
        let n = ledger.topo().gpus.len();
        for m in (1u64..1 << n).step_by(37) {
            let free: Vec<usize> = (0..n).filter(|g| m & (1 << g) != 0).collect();
            let fast = Symmetry::new(&table, &ledger, &free, false);
            let slow = Symmetry::new(&checked, &ledger, &free, false);
            assert_eq!(fast.classes, slow.classes, "{name} {free:?}");
            assert_eq!(fast.groups, slow.groups, "{name} {free:?}");
            assert_eq!(fast.blocks, slow.blocks, "{name} {free:?}");
        }
    }
}

/// The twins table's answer that no two free GPUs are interchangeable (the search then skips
/// the symmetries) is the symmetries' own, on every host and many occupancies: DGX-1V idle
/// has no twins, the NVSwitch hosts have many.
#[test]
fn none_interchangeable_is_what_the_symmetries_find() {
    let mut seen = [false; 2];
    for name in crate::topology::testing::GPU_HOSTS {
        let (table, ledger) = host(name);
        let n = ledger.topo().gpus.len();
        for held in 0u32..1 << n.min(8) {
            // Spread the held mask over 16 GPUs on the larger hosts.
            let free: Vec<usize> = (0..n)
                .filter(|&g| held & (1 << (g % 8)) == 0 || (g >= 8 && held % 3 == 0))
                .collect();
            let none = none_interchangeable(&table, &free);
            let sym = Symmetry::new(&table, &ledger, &free, false);
            assert_eq!(none, !sym.reduces(), "{name} {free:?}");
            seen[usize::from(none)] = true;
        }
    }
    assert_eq!(seen, [true, true], "both answers met");
    let (table, _) = host("dgx1-v100");
    assert!(none_interchangeable(&table, &(0..8).collect::<Vec<_>>()));
    // Past the masks the table cannot tell.
    assert!(!none_interchangeable(&table, &[0, 64]));
}
