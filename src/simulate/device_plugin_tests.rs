use super::*;
use crate::topology::testing;

fn dgx1() -> LinkTable {
    LinkTable::new(&testing::shipped("dgx1-v100"))
}

#[test]
fn combinations_run_in_order_once() {
    let mut pick = vec![0, 1];
    let mut n = 1;
    while next_combination(&mut pick, 8) {
        n += 1;
    }
    assert_eq!(n, 28, "C(8,2)");
    assert_eq!(pick, vec![6, 7]);
}

#[test]
fn link_best_where_lowest_index_is_not() {
    let links = dgx1();
    let all: Vec<usize> = (0..8).collect();
    // Pairs: lowest index (0,1) has one NVLink; the plugin's answer is an NV2 pair that
    // keeps the other GPUs in good pairs too.
    let lowest = kubelet_gpus(&links, &all, |_| Some(true), 2, GpuChoice::Lowest);
    assert_eq!(lowest, vec![0, 1]);
    let pref = kubelet_gpus(&links, &all, |_| Some(true), 2, GpuChoice::Preferred);
    assert_eq!(pref.len(), 2);
    assert!(
        links.set_score(&pref) > links.set_score(&lowest),
        "{pref:?} {} vs {}",
        links.set_score(&pref),
        links.set_score(&lowest)
    );
    // Every pair the plugin may answer is NVLinked twice (the best link on DGX-1).
    let best_pair = (0..8)
        .flat_map(|i| (i + 1..8).map(move |j| (i, j)))
        .map(|(i, j)| links.set_score(&[i, j]))
        .max()
        .unwrap_or(0);
    assert!(links.set_score(&pref) + 20 >= best_pair);
}

#[test]
fn within_the_hint_and_completing_across_it() {
    let links = dgx1();
    let topo = testing::shipped("dgx1-v100");
    let node = |g: usize| topo.gpus[g].numa_node;
    let free: Vec<usize> = vec![1, 2, 3, 5, 6];
    // Hint node 0: 2 of the 3 free GPUs there, never one of node 1.
    let got = kubelet_gpus(
        &links,
        &free,
        |g| node(g).map(|n| n == 0),
        2,
        GpuChoice::Preferred,
    );
    assert!(got.iter().all(|g| node(*g) == Some(0)), "{got:?}");
    // 4 asked with 3 on the hint: all 3 plus the best-linked one elsewhere.
    let got = kubelet_gpus(
        &links,
        &free,
        |g| node(g).map(|n| n == 0),
        4,
        GpuChoice::Preferred,
    );
    assert_eq!(got.len(), 4);
    for g in [1, 2, 3] {
        assert!(got.contains(&g), "{got:?}");
    }
    let extra = got
        .iter()
        .copied()
        .find(|g| node(*g) != Some(0))
        .unwrap_or(0);
    let alt = if extra == 5 { 6 } else { 5 };
    assert!(
        links.set_score(&got) >= links.set_score(&[1, 2, 3, alt]),
        "{got:?}"
    );
}

#[test]
fn required_gpus_are_kept_and_impossible_asks_get_nothing() {
    let links = dgx1();
    let all: Vec<usize> = (0..8).collect();
    let got = best_effort(&links, &all, &[7], 3);
    assert_eq!(got.len(), 3);
    assert!(got.contains(&7));
    assert!(best_effort(&links, &all, &[], 9).is_empty());
    assert!(best_effort(&links, &[0, 1], &[5], 2).is_empty());
    assert!(best_effort(&links, &all, &[], 0).is_empty());
    // 5 of 8: one padded group of 3 is never the answer.
    assert_eq!(best_effort(&links, &all, &[], 5).len(), 5);
}
