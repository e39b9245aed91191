//! Tests of `gpus.rs`: the best-set search and the partition against full enumeration.

use super::*;

fn best_set_score(table: &LinkTable, pool: &[usize], k: usize) -> u32 {
    best_set(table, pool, k, true).map_or(0, |(score, _)| score)
}

#[test]
fn best_set_search_agrees_with_full_enumeration() {
    let topo = crate::topology::testing::shipped("dgx1-v100");
    let t = LinkTable::new(&topo);
    for pool in [
        vec![0, 1, 2, 3, 4, 5, 6, 7],
        vec![0, 2, 5, 7],
        vec![1, 3, 4, 6, 7],
    ] {
        for k in 2..=pool.len() {
            let brute = candidates(&t, &pool, &[], k)
                .iter()
                .map(|s| t.set_score(s))
                .max()
                .unwrap_or(0);
            assert_eq!(best_set_score(&t, &pool, k), brute, "{pool:?} k={k}");
            assert!(greedy_best_set(&t, &pool, k).0 <= brute, "{pool:?} k={k}");
            let taken = &pool[..k];
            let rest: Vec<usize> = pool[k..].to_vec();
            assert_eq!(
                t.remaining(&pool, taken),
                t.set_score(&rest),
                "{pool:?} k={k}"
            );
            let free_score = t.set_score(&pool);
            assert_eq!(
                t.remaining_by(&t.to_free(&pool), free_score, taken),
                t.remaining_of(&pool, free_score, taken),
                "{pool:?} k={k}"
            );
        }
    }
}

#[test]
fn best_set_is_the_first_best_of_full_enumeration_on_16_gpu_hosts() {
    // The bound prunes hardest where pair scores are nearly equal (NVSwitch): the score
    // and the set (first in index order among the best) must still be those of the full
    // enumeration.
    for name in ["dgx2-like", "hgx16-nvswitch", "islands16"] {
        let t = LinkTable::new(&crate::topology::testing::fixture_or_shipped(name));
        for pool in [
            (0..16).collect::<Vec<usize>>(),
            vec![1, 2, 3, 5, 8, 9, 10, 12, 13, 15],
            vec![0, 3, 4, 6, 7, 11, 14],
        ] {
            for k in 2..=pool.len().min(8) {
                let all = candidates(&t, &pool, &[], k);
                let top = all.iter().map(|s| t.set_score(s)).max().unwrap_or(0);
                let first = all.iter().find(|s| t.set_score(s) == top).cloned();
                let got = best_set(&t, &pool, k, true);
                assert_eq!(got, first.map(|s| (top, s)), "{name} {pool:?} k={k}");
            }
        }
    }
}

/// The former recursive partition, the reference of the bit-mask one: the first GPU joins a set with `k - 1` of the others or, while
/// `skips` allows (the pool is not a multiple of `k`), stays out. At most 8 GPUs: 105 pairings.
fn reference_partition(table: &LinkTable, pool: &[usize], k: usize, skips: usize) -> u32 {
    if pool.len() < k {
        return 0;
    }
    let (first, others) = (pool[0], &pool[1..]);
    let mut best = if skips > 0 {
        reference_partition(table, others, k, skips - 1)
    } else {
        0
    };
    let mut mates = Vec::new();
    combos(others, k - 1, 0, &mut Vec::with_capacity(k), &mut mates);
    for mut set in mates {
        let left: Vec<usize> = others
            .iter()
            .copied()
            .filter(|g| !set.contains(g))
            .collect();
        set.push(first);
        best = best.max(table.set_score(&set) + reference_partition(table, &left, k, skips));
    }
    best
}

#[test]
fn partition_by_masks_agrees_with_the_recursion() {
    for name in ["dgx2-like", "hgx16-nvswitch", "islands16", "dgx1-v100"] {
        let t = LinkTable::new(&crate::topology::testing::fixture_or_shipped(name));
        for pool in [
            vec![0, 1, 2, 3, 4, 5, 6, 7],
            vec![8, 9, 11, 12, 14],
            vec![1, 2, 5],
        ] {
            let pool: Vec<usize> = pool.into_iter().filter(|g| *g < t.numa.len()).collect();
            for k in 2..=4 {
                let want = reference_partition(&t, &pool, k, pool.len() % k);
                assert_eq!(
                    partitions::best_partition(|i, j| t.pair(i, j), &pool, k),
                    want,
                    "{name} {pool:?} k={k}"
                );
            }
        }
    }
}

#[test]
fn partition_is_exact_on_a_node_and_never_below_greedy() {
    let topo = crate::topology::testing::shipped("dgx1-v100");
    let t = LinkTable::new(&topo);
    // Node 0's quad: greedy takes 2-3 (NV2 + one switch, 250) and leaves 0-1 (NV1, 150);
    // the best split is 0-3 + 1-2 (NV2 + NV2 through the host bridge, 230 each).
    let quad = [0, 1, 2, 3];
    assert_eq!(partition_score(&t, &quad, 2, true), 460);
    assert_eq!(partition_score(&t, &quad, 2, false), 400);
    // Odd pools leave the GPU out whose absence costs least.
    assert_eq!(
        partition_score(&t, &[0, 1, 2], 2, true),
        best_set_score(&t, &[0, 1, 2], 2)
    );
    let all: Vec<usize> = (0..8).collect();
    for k in 2..=4 {
        assert!(partition_score(&t, &all, k, true) >= partition_score(&t, &all, k, false));
    }
    // The look-ahead partitions per node: 0-3 leaves 1-2 (230), 2-3 leaves 0-1 (150).
    let rest_after =
        |taken: &[usize]| -> Vec<usize> { (0..8).filter(|g| !taken.contains(g)).collect() };
    assert!(
        t.set_score(&[0, 3]) + lookahead(&t, &rest_after(&[0, 3]), 2, true)
            > t.set_score(&[2, 3]) + lookahead(&t, &rest_after(&[2, 3]), 2, true)
    );
}

#[test]
fn binomials_and_exact_enumeration() {
    assert_eq!(binomial(16, 8), 12870);
    assert_eq!(binomial(8, 2), 28);
    let topo = Topology::default();
    let t = LinkTable::new(&topo);
    let sets = candidates(&t, &[0, 1, 2, 3, 4], &[2], 3);
    assert_eq!(sets.len(), 6);
    assert!(sets.iter().all(|s| s.contains(&2) && s.len() == 3));
}

#[test]
fn best_set_by_twins_scores_as_the_plain_search() {
    // Idle and partly held.
    for name in crate::topology::testing::GPU_HOSTS {
        let t = LinkTable::new(&crate::topology::testing::fixture_or_shipped(name));
        let n = t.numa.len();
        for held in [vec![], vec![0], vec![1, 2, 4, 7], vec![0, 3, 5, 6, 9, 12]] {
            let pool: Vec<usize> = (0..n).filter(|g| !held.contains(g)).collect();
            for k in 2..=8 {
                let plain = best_set(&t, &pool, k, true).map(|(s, _)| s);
                assert_eq!(
                    super::best_set_score(&t, &pool, k, true),
                    plain,
                    "{name} {pool:?} k={k}"
                );
            }
        }
    }
}

/// The reduced search's masks are the sets `candidates` lists, in the same order, wherever it
/// enumerates them all; none where it would not, or past the masks.
#[test]
fn candidate_masks_are_the_listed_candidates() {
    let t = LinkTable::new(&crate::topology::testing::fixture_or_shipped(
        "hgx16-nvswitch",
    ));
    for free in [
        (0..16).collect::<Vec<usize>>(),
        vec![0, 3, 5, 6, 9, 12],
        vec![2],
    ] {
        for k in 1..=free.len() {
            let listed = candidates(&t, &free, &[], k);
            let masks = candidate_masks(&free, k);
            if !exact_enumeration(free.len() as u64, k as u64) {
                assert_eq!(masks, None, "{free:?} k={k}");
                continue;
            }
            let as_sets: Vec<Vec<usize>> = masks
                .expect("enumerated")
                .iter()
                .map(|&m| (0..64).filter(|g| m & (1u64 << g) != 0).collect())
                .collect();
            assert_eq!(as_sets, listed, "{free:?} k={k}");
        }
        assert_eq!(candidate_masks(&free, free.len() + 1), None);
        assert_eq!(candidate_masks(&free, 0), None);
    }
    assert_eq!(candidate_masks(&[1, 64], 1), None);
}
