//! The resize choice alone, then through the allocator, then random sequences of creations,
//! grows, shrinks and removals against the invariants: a grow keeps every CPU, a shrink keeps
//! the admitted ones, no CPU is held twice, the pool is what nobody holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::placement::allocator::Allocator;
use crate::placement::error::PlacementError;
use crate::placement::policy::{PlacementConfig, Policy};
use crate::placement::test_requests::request;
use crate::topology::testing::TopologyBuilder;

fn set(s: &str) -> CpuSet {
    s.parse().expect("cpu list")
}

/// Two sockets, one node each, 4 cores x 2 threads per node: node 0 holds 0-3 and 8-11,
/// node 1 holds 4-7 and 12-15; CPU n and n+8 are siblings.
fn two_nodes() -> Topology {
    TopologyBuilder::new()
        .sockets(2)
        .cores(4)
        .threads(2)
        .build()
}

fn room<'a>(free: &'a CpuSet, pool: &'a CpuSet) -> GrowRoom<'a> {
    GrowRoom {
        free,
        pool,
        within: None,
        whole_only: false,
    }
}

#[test]
fn a_grow_completes_the_held_cores_first_then_stays_on_the_node() {
    let topo = two_nodes();
    let free = set("1-7,9-15");
    let added = grow(&topo, &set("0,8"), 1, room(&free, &free)).expect("fits");
    // 0 and 8 are one core: a whole free core on node 0 before anything else.
    assert_eq!(
        added,
        set("1"),
        "the sibling of core 1 comes with the next one"
    );
    let free8 = set("1-15");
    let added = grow(&topo, &set("0"), 1, room(&free8, &free8)).expect("fits");
    assert_eq!(added, set("8"), "the free thread of a held core first");
    let added = grow(&topo, &set("0,8"), 4, room(&free, &free)).expect("fits");
    assert!(
        added.iter().all(|c| topo.cpus[c as usize].numa_node == 0),
        "{added}"
    );
}

#[test]
fn a_grow_spills_to_the_nearest_node_and_no_further_than_the_policy_allows() {
    let topo = TopologyBuilder::new()
        .sockets(2)
        .numa_per_socket(2)
        .cores(2)
        .build();
    // Nodes 0,1 on socket 0 (distance 12), nodes 2,3 on socket 1 (21). Node 0: 0-1.
    let free = set("1-7");
    let added = grow(&topo, &set("0"), 3, room(&free, &free)).expect("fits");
    assert_eq!(
        added,
        set("1-3"),
        "node 0 then node 1, its socket neighbour"
    );
    let only: NodeSet = "0".parse().expect("nodes");
    let within = GrowRoom {
        within: Some(&only),
        ..room(&free, &free)
    };
    assert_eq!(grow(&topo, &set("0"), 2, within), None);
    assert_eq!(nearest_nodes(&topo, &set("0,2,3"), None), vec![1, 0, 2, 3]);
}

#[test]
fn a_shrink_gives_back_the_newest_additions_and_stops_at_the_admitted_cpus() {
    let topo = two_nodes();
    let held = Holding {
        cpus: set("0-3"),
        admitted: set("0-1"),
        added: vec![3, 2],
    };
    let none = NodeSet::new();
    let given = shrink(&topo, &held, 1, ResizeShrink::Admitted, &none, false).expect("fits");
    assert_eq!(given, set("2"), "2 was added last");
    let given = shrink(&topo, &held, 2, ResizeShrink::Admitted, &none, false).expect("fits");
    assert_eq!(given, set("2-3"));
    let short =
        shrink(&topo, &held, 3, ResizeShrink::Admitted, &none, false).expect_err("below admitted");
    assert_eq!(short.can_give, 2);
}

#[test]
fn shrink_any_then_gives_back_the_admitted_cpus_farthest_from_the_devices() {
    let topo = two_nodes();
    let held = Holding::admitted_with(&set("2-5"));
    let device_on_1: NodeSet = "1".parse().expect("nodes");
    let given = shrink(&topo, &held, 2, ResizeShrink::Any, &device_on_1, false).expect("fits");
    assert_eq!(given, set("2-3"), "node 0 is the far one");
    let device_on_0: NodeSet = "0".parse().expect("nodes");
    let given = shrink(&topo, &held, 2, ResizeShrink::Any, &device_on_0, false).expect("fits");
    assert_eq!(given, set("4-5"));
}

#[test]
fn whole_cores_go_back_whole() {
    let topo = two_nodes();
    let held = Holding {
        cpus: set("0-1,8-9"),
        admitted: set("0,8"),
        added: vec![1, 9],
    };
    let given = shrink(
        &topo,
        &held,
        2,
        ResizeShrink::Admitted,
        &NodeSet::new(),
        true,
    )
    .expect("fits");
    assert_eq!(given, set("1,9"));
}

#[test]
fn holding_after_a_resize_appends_new_cpus_and_drops_given_ones() {
    let h = Holding::admitted_with(&set("0-1"));
    let grown = h.after(&set("0-3"));
    assert_eq!(grown.added, vec![2, 3]);
    assert_eq!(grown.admitted, set("0-1"));
    let shrunk = grown.after(&set("0-2"));
    assert_eq!(shrunk.added, vec![2]);
    let below = shrunk.after(&set("0"));
    assert_eq!((below.admitted, below.added), (set("0"), vec![]));
}

fn alloc(policy: Policy) -> Allocator {
    let topo = Arc::new(two_nodes());
    let config = PlacementConfig {
        policy,
        ..PlacementConfig::default()
    };
    Allocator::new(topo, config)
}

fn resize_to(
    a: &mut Allocator,
    n: usize,
    cpus: u64,
    held: &Holding,
) -> Result<CpuSet, PlacementError> {
    let plan = a
        .plan_resize(&request(n, cpus), held)
        .expect("an exclusive resize")?;
    a.commit_resize(plan).map(|x| x.cpus)
}

#[test]
fn the_allocator_grows_and_shrinks_in_place_where_a_fresh_decision_would_move() {
    let mut a = alloc(Policy::BestEffort);
    a.place(&request(1, 2)).expect("filler");
    let held_cpus = a.place(&request(2, 2)).expect("placed").cpus;
    a.release("c1");
    let h = Holding::admitted_with(&held_cpus);
    let grown = resize_to(&mut a, 2, 3, &h).expect("grown");
    assert!(held_cpus.is_subset(&grown), "{held_cpus} kept in {grown}");
    let h = h.after(&grown);
    let shrunk = resize_to(&mut a, 2, 2, &h).expect("shrunk");
    assert_eq!(shrunk, held_cpus);
    assert_eq!(
        a.ledger().get("c2").map(|x| x.cpus.clone()),
        Some(held_cpus)
    );
}

#[test]
fn a_refused_resize_says_what_is_free_next_to_it_and_leaves_it_as_it_was() {
    let mut a = alloc(Policy::SingleNumaNode);
    let held = a.place(&request(1, 6)).expect("placed").cpus;
    let h = Holding::admitted_with(&held);
    let err = resize_to(&mut a, 1, 9, &h).expect_err("too big");
    let msg = err.to_string();
    assert_eq!(err.reason(), "resize");
    assert!(
        msg.contains("from 6 to 9 exclusive CPU(s) under policy single-numa-node"),
        "{msg}"
    );
    assert!(msg.contains("free next to them: node 0: 2"), "{msg}");
    assert!(msg.contains("ask for at most 8"), "{msg}");
    let err = resize_to(&mut a, 1, 4, &h)
        .expect_err("below admitted")
        .to_string();
    assert!(
        err.contains("admitted with 6 CPU(s)") && err.contains("resize_shrink: any"),
        "{err}"
    );
    assert_eq!(a.ledger().get("c1").map(|x| x.cpus.clone()), Some(held));
}

#[test]
fn a_grow_past_its_node_widens_its_memory_nodes_and_a_shrink_never_narrows_them() {
    let mut a = alloc(Policy::BestEffort);
    let held = a.place(&request(1, 7)).expect("placed");
    assert_eq!(held.mems.to_string(), "0");
    let h = Holding::admitted_with(&held.cpus);
    let grown = resize_to(&mut a, 1, 9, &h).expect("grown");
    let rec = a.ledger().get("c1").cloned().expect("held");
    assert_eq!(
        (rec.numa_nodes.to_string(), rec.mems.to_string()),
        ("0-1".into(), "0-1".into())
    );
    resize_to(&mut a, 1, 7, &h.after(&grown)).expect("shrunk");
    let rec = a.ledger().get("c1").cloned().expect("held");
    assert_eq!((rec.cpus, rec.mems.to_string()), (held.cpus, "0-1".into()));
}

#[test]
fn a_shared_container_or_one_turning_shared_is_not_resized_in_place() {
    let mut a = alloc(Policy::BestEffort);
    let held = a.place(&request(1, 0)).expect("shared").cpus;
    assert!(a
        .plan_resize(&request(1, 2), &Holding::admitted_with(&held))
        .is_none());
    let held = a.place(&request(2, 2)).expect("placed").cpus;
    assert!(a
        .plan_resize(&request(2, 0), &Holding::admitted_with(&held))
        .is_none());
}

#[derive(Debug, Clone)]
enum Op {
    Create(u64),
    Resize(usize, u64),
    Remove(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u64..5).prop_map(Op::Create),
        (0usize..8, 1u64..8).prop_map(|(i, n)| Op::Resize(i, n)),
        (0usize..8).prop_map(Op::Remove),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn resizes_keep_what_is_held_and_the_pool_is_what_nobody_holds(
        ops in proptest::collection::vec(op(), 1..40),
        any in any::<bool>(),
    ) {
        let mut a = alloc(Policy::BestEffort);
        let mut cfg = a.config().clone();
        cfg.resize_shrink = if any { ResizeShrink::Any } else { ResizeShrink::Admitted };
        a.set_config(cfg);
        let mut live: BTreeMap<usize, Holding> = BTreeMap::new();
        for (n, o) in ops.into_iter().enumerate() {
            match o {
                Op::Create(k) => if let Ok(x) = a.place(&request(n, k)) {
                    live.insert(n, Holding::admitted_with(&x.cpus));
                },
                Op::Remove(i) => if let Some(id) = live.keys().nth(i % live.len().max(1)).copied() {
                    a.release(&format!("c{id}"));
                    live.remove(&id);
                },
                Op::Resize(i, k) => {
                    let Some(id) = live.keys().nth(i % live.len().max(1)).copied() else { continue };
                    let h = live[&id].clone();
                    let Some(plan) = a.plan_resize(&request(id, k), &h) else { continue };
                    match plan.and_then(|p| a.commit_resize(p)) {
                        Ok(x) => {
                            let (old, new) = (&h.cpus, &x.cpus);
                            prop_assert_eq!(new.len() as u64, k);
                            if new.len() >= old.len() {
                                prop_assert!(old.is_subset(new), "grow {} -> {}", old, new);
                            } else {
                                prop_assert!(new.is_subset(old), "shrink {} -> {}", old, new);
                                if !any {
                                    prop_assert!(h.admitted.is_subset(new), "admitted {} kept in {}", h.admitted, new);
                                }
                            }
                            live.insert(id, h.after(new));
                        }
                        Err(_) => prop_assert_eq!(a.ledger().get(&format!("c{id}")).map(|x| x.cpus.clone()), Some(h.cpus.clone())),
                    }
                }
            }
            let mut held = CpuSet::new();
            for x in a.ledger().assignments() {
                prop_assert!(held.intersection(&x.cpus).is_empty(), "{} held twice", x.cpus);
                held.extend_from(&x.cpus);
            }
            let nobody = a.topology().online_cpus().difference(&held);
            prop_assert_eq!(a.shared_pool(), nobody);
        }
    }
}
