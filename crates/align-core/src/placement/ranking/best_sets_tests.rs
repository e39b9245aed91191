use super::*;
use crate::placement::gpus::{self, LinkTable};

/// Every subset of the shipped 8-GPU hosts, every set size: the table reads what the exact
/// search over that subset finds.
#[test]
fn table_matches_the_exact_search_on_every_subset() {
    for name in ["dgx1-v100", "dgx-h100"] {
        let topo = crate::topology::testing::fixture_or_shipped(name);
        let table = LinkTable::new(&topo);
        let n = topo.gpus.len();
        let sets = BestSets::new(n).expect("an 8-GPU host is tabled");
        let pair = |i, j| table.pair(i, j);
        for mask in 0u32..1 << n {
            let pool: Vec<usize> = (0..n).filter(|g| mask & (1 << g) != 0).collect();
            for m in 0..=n + 1 {
                let want = gpus::best_set_score(&table, &pool, m, true);
                assert_eq!(sets.get(pair, &pool, m), want, "{name} {pool:?} m={m}");
            }
        }
    }
}

/// A table that does not read the same both ways, and scores that differ between most
/// pairs: each set scores its pairs from the lower GPU to the higher, as the search does,
/// so the best set found by trying every one agrees with the table.
#[test]
fn table_reads_each_pair_from_its_lower_gpu() {
    let n = BEST_SET_TABLE_GPUS;
    let pair = |i: usize, j: usize| ((i * 31 + j * 17) % 23) as u32 * 10 + u32::from(i < j);
    let sets = BestSets::new(n).expect("at the limit");
    let full: Vec<usize> = (0..n).collect();
    for m in 2..=n {
        let mut best = 0;
        for mask in 0u32..1 << n {
            if mask.count_ones() as usize != m {
                continue;
            }
            let set: Vec<usize> = (0..n).filter(|g| mask & (1 << g) != 0).collect();
            let score: u32 = set
                .iter()
                .enumerate()
                .flat_map(|(a, &i)| set[a + 1..].iter().map(move |&j| pair(i, j)))
                .sum();
            best = best.max(score);
        }
        assert_eq!(sets.get(pair, &full, m), Some(best), "m={m}");
    }
}

/// Pools the table cannot answer are left to the search.
#[test]
fn pools_out_of_order_or_past_the_host_are_not_answered() {
    let pair = |_: usize, _: usize| 1;
    let sets = BestSets::new(8).expect("8 GPUs");
    assert_eq!(sets.get(pair, &[3, 1, 4], 2), None);
    assert_eq!(sets.get(pair, &[1, 1, 4], 2), None);
    assert_eq!(sets.get(pair, &[1, 8], 2), None);
    assert_eq!(sets.get(pair, &[1, 2], 1), None);
    assert_eq!(sets.get(pair, &[1, 2, 3], 3), Some(3));
    assert!(BestSets::new(BEST_SET_TABLE_GPUS + 1).is_none());
}
