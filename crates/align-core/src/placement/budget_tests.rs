//! The pod budget's slices and resizes on a 2-node host with hyperthreads.

use crate::placement::budget::{resize, slice, BudgetError};
use crate::topology::testing::TopologyBuilder;
use crate::topology::{CpuSet, Topology};

/// 2 nodes x 4 cores x 2 threads: node 0 has CPUs 0-3 and 8-11, node 1 4-7 and 12-15.
fn topo() -> Topology {
    TopologyBuilder::new()
        .sockets(2)
        .cores(4)
        .threads(2)
        .build()
}

fn set(s: &str) -> CpuSet {
    s.parse().expect("set")
}

#[test]
fn a_slice_takes_whole_cores_of_one_node() {
    let t = topo();
    // The pool: all of node 0 and one CPU of node 1.
    let got = slice(&t, &set("0-3,8-11,4"), 4).expect("fits");
    assert_eq!(got, set("0-1,8-9"));
    assert_eq!(slice(&t, &set("0-1"), 3), None);
}

#[test]
fn a_grow_keeps_the_budget_and_adds_its_own_nodes_free_cpus_first() {
    let t = topo();
    let order = vec![0, 8, 1, 9];
    // Free: the rest of node 0 and all of node 1.
    let free = set("2-7,10-15");
    let got = resize(&t, &order, &CpuSet::new(), &free, 6, 0).expect("grows");
    assert_eq!(&got[..4], &order[..], "the CPUs held stay, in their order");
    let added: CpuSet = got[4..].iter().copied().collect();
    assert_eq!(added, set("2,10"), "one more core of node 0");
}

#[test]
fn a_grow_leaves_one_cpu_in_the_shared_pool() {
    let t = topo();
    let err = resize(&t, &[0, 1], &CpuSet::new(), &set("2-3"), 4, 0).expect_err("too big");
    assert_eq!(err, BudgetError::NotEnoughFree { wanted: 2, free: 1 });
}

#[test]
fn a_shrink_gives_back_the_newest_cpus_never_a_held_one() {
    let t = topo();
    let order = vec![0, 8, 1, 9, 2, 10];
    // 10, the newest, is held exclusively: 2 and 9 go instead.
    let got = resize(&t, &order, &set("10"), &CpuSet::new(), 4, 1).expect("shrinks");
    assert_eq!(got, vec![0, 8, 1, 10]);
    let err = resize(&t, &order, &set("0,8,1,9"), &CpuSet::new(), 4, 1).expect_err("held");
    assert_eq!(err, BudgetError::HeldExclusively { asked: 4, held: 4 });
}
