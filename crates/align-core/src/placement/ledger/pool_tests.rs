//! The exclusive headroom on the real allocator: exclusive containers taken from it leave the
//! pool where it is, one that needs pool CPUs moves it once and refills the headroom,
//! releases keep the pool until a node's headroom passes twice the setting, and over random
//! sequences the pool never holds an exclusive CPU and never goes empty while a shareable CPU
//! is free.

use std::sync::Arc;

use proptest::prelude::*;

use crate::placement::allocator::Allocator;
use crate::placement::policy::{PlacementConfig, Policy};
use crate::placement::test_requests::{request, Replay, Step};
use crate::topology::testing::TopologyBuilder;
use crate::topology::{CpuSet, NodeSet, Topology};

/// 2 nodes x 8 cores x 2 threads: node 0 has CPUs 0-7 and 16-23, node 1 8-15 and 24-31.
fn topo() -> Arc<Topology> {
    Arc::new(
        TopologyBuilder::new()
            .sockets(2)
            .cores(8)
            .threads(2)
            .build(),
    )
}

fn allocator(headroom: u32) -> Allocator {
    let config = PlacementConfig {
        policy: Policy::BestEffort,
        exclusive_headroom: headroom,
        ..PlacementConfig::default()
    };
    Allocator::new(topo(), config)
}

fn set(s: &str) -> CpuSet {
    s.parse().expect("set")
}

fn on_node(a: &Allocator, node: usize, cpus: &CpuSet) -> CpuSet {
    cpus.intersection(&a.topology().numa_nodes[node].cpus)
}

#[test]
fn without_headroom_the_pool_is_every_free_shareable_cpu() {
    let mut a = allocator(0);
    assert_eq!(a.shared_pool(), set("0-31"));
    let x = a.place(&request(1, 4)).expect("placed");
    assert_eq!(a.shared_pool(), set("0-31").difference(&x.cpus));
    assert!(a.ledger().headroom_cpus().is_empty());
}

#[test]
fn the_headroom_is_whole_cores_per_node_and_the_first_the_picker_takes() {
    let a = allocator(4);
    let spare = a.ledger().headroom_cpus();
    // Two whole cores per node, lowest ids first (the picker's order).
    assert_eq!(spare, set("0-1,8-9,16-17,24-25"));
    assert_eq!(a.shared_pool(), set("0-31").difference(&spare));
}

#[test]
fn an_exclusive_container_taken_from_the_headroom_leaves_the_pool_alone() {
    let mut a = allocator(4);
    let pool = a.shared_pool();
    let x = a.place(&request(1, 4)).expect("placed");
    assert!(x.cpus.is_disjoint(&pool), "{} from the pool {pool}", x.cpus);
    assert_eq!(a.shared_pool(), pool);
    // The NUMA decision is the one without headroom: same node, same count.
    let mut b = allocator(0);
    let y = b.place(&request(1, 4)).expect("placed");
    assert_eq!(x.numa_nodes, y.numa_nodes);
    assert_eq!(x.cpus.len(), y.cpus.len());
}

#[test]
fn one_that_needs_pool_cpus_moves_the_pool_once_and_refills_the_headroom() {
    let mut a = allocator(4);
    a.place(&request(1, 4)).expect("placed");
    let pool = a.shared_pool();
    let x = a.place(&request(2, 4)).expect("placed");
    let node = if on_node(&a, 0, &x.cpus).is_empty() {
        1
    } else {
        0
    };
    assert!(!x.cpus.is_disjoint(&pool), "the headroom was empty");
    let after = a.shared_pool();
    assert!(after.is_disjoint(&x.cpus));
    // The node's headroom is back to 4 CPUs, and the other node's pool did not move.
    let spare = a.ledger().headroom_cpus();
    assert_eq!(on_node(&a, node, &spare).len(), 4);
    assert_eq!(on_node(&a, 1 - node, &after), on_node(&a, 1 - node, &pool));
    // The next one comes from the refilled headroom again.
    let y = a.place(&request(3, 4)).expect("placed");
    assert!(y.cpus.is_disjoint(&after));
    assert_eq!(a.shared_pool(), after);
}

#[test]
fn releases_refill_the_headroom_and_grow_the_pool_only_past_twice_the_setting() {
    let mut a = allocator(2);
    let full = a.shared_pool();
    // Four exclusive containers of 2 CPUs on node 0 (best fit packs them there).
    for n in 1..=4 {
        a.place(&request(n, 2)).expect("placed");
    }
    let pool = a.shared_pool();
    let node = if on_node(&a, 0, &full.difference(&pool)).len() > 4 {
        0
    } else {
        1
    };
    assert_eq!(on_node(&a, node, &a.ledger().headroom_cpus()).len(), 2);
    // Two releases: the headroom grows to 4, then 6 > 2x2: the pool grows back once.
    a.release("c1");
    assert_eq!(a.shared_pool(), pool, "headroom 4 <= 2 x 2 keeps the pool");
    a.release("c2");
    let grown = a.shared_pool();
    assert!(pool.is_subset(&grown) && grown.len() > pool.len());
    assert_eq!(on_node(&a, node, &a.ledger().headroom_cpus()).len(), 2);
}

#[test]
fn a_node_keeps_a_pool_cpu_while_it_has_a_free_one() {
    // 4 CPUs per node, headroom 8: each node's headroom leaves one CPU in the pool.
    let topo = Arc::new(TopologyBuilder::new().sockets(2).cores(4).build());
    let config = PlacementConfig {
        exclusive_headroom: 8,
        ..PlacementConfig::default()
    };
    let mut a = Allocator::new(topo, config);
    assert_eq!(a.shared_pool().len(), 2);
    // An exclusive container may still take all but one shareable CPU.
    let x = a.place(&request(1, 7)).expect("placed");
    assert_eq!(a.shared_pool().len(), 1);
    assert!(a.shared_pool().is_disjoint(&x.cpus));
    assert!(a.place(&request(2, 1)).is_err(), "the pool's last CPU");
}

#[test]
fn a_full_node_takes_its_first_cpus_back_as_headroom() {
    // 4 CPUs per node, headroom 2: node 0 filled by two exclusive containers.
    let topo = Arc::new(TopologyBuilder::new().sockets(2).cores(4).build());
    let config = PlacementConfig {
        exclusive_headroom: 2,
        ..PlacementConfig::default()
    };
    let mut a = Allocator::new(topo, config);
    let x = a.place(&request(1, 2)).expect("placed");
    let y = a.place(&request(2, 2)).expect("placed");
    assert_eq!(x.cpus.union(&y.cpus), set("0-3"), "best fit packs node 0");
    let pool = a.shared_pool();
    // Released, its CPUs stay out of the pool (2 <= h), and the next exclusive container
    // takes them back without a move.
    a.release("c1");
    assert_eq!(a.shared_pool(), pool);
    let z = a.place(&request(3, 2)).expect("placed");
    assert_eq!(z.cpus, x.cpus);
    assert_eq!(a.shared_pool(), pool);
    // Past h free CPUs the node gets a pool CPU again.
    a.release("c2");
    a.release("c3");
    assert_eq!(on_node(&a, 0, &a.shared_pool()).len(), 2);
}

#[test]
fn a_shared_container_bound_to_a_node_without_pool_cpus_opens_it() {
    let topo = Arc::new(TopologyBuilder::new().sockets(2).cores(4).build());
    let config = PlacementConfig {
        exclusive_headroom: 2,
        ..PlacementConfig::default()
    };
    let mut a = Allocator::new(topo, config);
    a.place(&request(1, 2)).expect("placed");
    a.place(&request(2, 2)).expect("placed");
    a.release("c1");
    let node0: NodeSet = "0".parse().expect("set");
    assert!(on_node(&a, 0, &a.shared_pool()).is_empty());
    // What it would get: the node's part as a recompute leaves it (one CPU of two free).
    let cpus = a.ledger().shared_on(&node0);
    assert_eq!(cpus.len(), 1);
    assert!(cpus.is_subset(&a.ledger().free_cpus_for(false)));
    let shared = crate::placement::Assignment {
        container_id: "s1".into(),
        cpus: cpus.clone(),
        numa_nodes: node0.clone(),
        ..Default::default()
    };
    a.restore(shared).expect("recorded");
    // Recorded, those CPUs are pool CPUs: never the headroom an exclusive container takes.
    assert_eq!(on_node(&a, 0, &a.shared_pool()), cpus);
    let x = a.place(&request(3, 1)).expect("placed");
    assert!(x.cpus.is_disjoint(&cpus));
}

#[test]
fn changing_the_headroom_recomputes_the_pool_once() {
    let mut a = allocator(0);
    a.place(&request(1, 2)).expect("placed");
    let before = a.shared_pool();
    let mut c = a.config().clone();
    c.exclusive_headroom = 4;
    a.set_config(c.clone());
    assert_eq!(before.difference(&a.shared_pool()).len(), 8);
    c.exclusive_headroom = 0;
    a.set_config(c);
    assert_eq!(a.shared_pool(), before);
}

#[test]
fn an_adopted_pool_is_kept_where_valid() {
    let mut a = allocator(4);
    let pool = a.shared_pool();
    // What the shared containers were last moved onto, after a restart: the whole free set
    // (a headroom of 0 is valid), kept rather than shrunk.
    let mut b = allocator(4);
    b.adopt_pool(&set("0-31"));
    assert_eq!(b.shared_pool(), set("0-31"));
    // A pool with a CPU that is no longer free is recomputed on that node only.
    a.place(&request(1, 4)).expect("placed");
    let held: CpuSet = a.assignments().flat_map(|x| x.cpus.iter()).collect();
    let mut stale = pool.clone();
    stale.extend_from(&held);
    a.adopt_pool(&stale);
    assert!(a.shared_pool().is_disjoint(&held));
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u64..=6).prop_map(Step::Create),
        2 => (0usize..16).prop_map(Step::Remove),
        1 => (0u32..32).prop_map(Step::Offline),
        1 => (0u32..32).prop_map(Step::Online),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn the_pool_never_holds_an_exclusive_cpu_nor_goes_empty(
        h in 0u32..6,
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        let mut a = allocator(h);
        let mut replay = Replay::new(&a);
        for s in steps {
            replay.apply(&mut a, s);
            let held: CpuSet = a
                .assignments()
                .filter(|x| x.exclusive)
                .flat_map(|x| x.cpus.iter())
                .collect();
            let pool = a.shared_pool();
            let free = a.ledger().free_cpus_for(false);
            prop_assert!(pool.is_disjoint(&held), "pool {pool} holds exclusive CPUs");
            prop_assert!(pool.is_subset(&free), "pool {pool} is not free ({free})");
            prop_assert!(free.is_empty() || !pool.is_empty(), "pool empty, {free} free");
            for (i, node) in a.topology().numa_nodes.iter().enumerate() {
                let free_n = free.intersection(&node.cpus);
                let pool_n = pool.intersection(&node.cpus);
                prop_assert!(
                    free_n.len() <= h as usize || !pool_n.is_empty(),
                    "node {i}: {free_n} free, none in the pool"
                );
                prop_assert!(free_n.len() - pool_n.len() <= 2 * h as usize);
            }
            if h == 0 {
                prop_assert_eq!(&pool, &free);
            }
        }
    }
}
