use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::placement::allocator::Allocator;
use crate::placement::policy::{PlacementConfig, Policy};
use crate::placement::test_requests::request;
use crate::placement::{PlacementError, Request};
use crate::topology::testing::two_node;
use crate::topology::{HugePages, Topology};

const MI2: u64 = 2048;
const GI1: u64 = 1 << 20;

/// Two nodes of 8 cores x 2 threads; node 0 with `n0` and node 1 with `n1` 2 MiB pages.
fn host(n0: u64, n1: u64) -> Arc<Topology> {
    let mut t = two_node();
    for (node, total) in t.numa_nodes.iter_mut().zip([n0, n1]) {
        node.hugepages = vec![HugePages {
            size_kb: MI2,
            total,
            free: total,
        }];
    }
    Arc::new(t)
}

fn alloc(topo: Arc<Topology>, policy: Policy) -> Allocator {
    let config = PlacementConfig {
        policy,
        ..PlacementConfig::default()
    };
    Allocator::new(topo, config)
}

/// Container `n` with `cpus` whole CPUs (0: shared) and `pages` 2 MiB pages.
fn asking(n: usize, cpus: u64, pages: u64) -> Request {
    Request {
        hugepages: vec![HugePageNeed {
            size_kb: MI2,
            pages,
        }],
        ..request(n, cpus)
    }
}

fn pages_on(a: &crate::placement::Assignment, node: u32) -> u64 {
    a.hugepages
        .iter()
        .filter(|h| h.node == node && h.size_kb == MI2)
        .map(|h| h.pages)
        .sum()
}

#[test]
fn a_limit_becomes_whole_pages_rounded_up_and_a_zero_limit_none() {
    assert_eq!(
        HugePageNeed::of_limit(MI2, 4 << 20),
        Some(HugePageNeed {
            size_kb: MI2,
            pages: 2
        })
    );
    assert_eq!(
        HugePageNeed::of_limit(MI2, (4 << 20) + 1).map(|n| n.pages),
        Some(3)
    );
    assert_eq!(HugePageNeed::of_limit(GI1, 0), None);
    assert_eq!(HugePageNeed::of_limit(0, 1 << 30), None);
    assert_eq!(HugePageNeed::of_limit(u64::MAX, u64::MAX), None);
}

#[test]
fn sizes_are_named_as_the_kubelet_names_them_and_needs_merge_by_size() {
    assert_eq!(resource_name(MI2), "hugepages-2Mi");
    assert_eq!(resource_name(GI1), "hugepages-1Gi");
    assert_eq!(resource_name(64), "hugepages-64Ki");
    let needs = [
        HugePageNeed {
            size_kb: GI1,
            pages: 1,
        },
        HugePageNeed {
            size_kb: MI2,
            pages: 2,
        },
        HugePageNeed {
            size_kb: MI2,
            pages: 3,
        },
        HugePageNeed {
            size_kb: 64,
            pages: 0,
        },
    ];
    assert_eq!(
        merged(&needs),
        vec![
            HugePageNeed {
                size_kb: MI2,
                pages: 5
            },
            HugePageNeed {
                size_kb: GI1,
                pages: 1
            }
        ]
    );
}

#[test]
fn a_container_asking_more_pages_than_one_node_has_left_lands_on_the_other() {
    let mut a = alloc(host(512, 512), Policy::SingleNumaNode);
    let first = a.place(&asking(1, 2, 400)).expect("first");
    let home = first.numa_nodes.first().expect("a node");
    assert_eq!(pages_on(&first, home), 400);
    let second = a.place(&asking(2, 2, 300)).expect("second");
    let other = 1 - home;
    assert_eq!(second.numa_nodes.iter().collect::<Vec<_>>(), vec![other]);
    assert_eq!(pages_on(&second, other), 300);
    assert!(second.mems.contains(other), "mems {}", second.mems);
    let node_cpus = &a.topology().numa_nodes[other as usize].cpus;
    assert!(second.cpus.is_subset(node_cpus), "cpus {}", second.cpus);
    let free = a.free_by_node();
    assert_eq!(free[home as usize].hugepages, vec![(MI2, 512, 112)]);
    assert_eq!(free[other as usize].hugepages, vec![(MI2, 512, 212)]);
}

#[test]
fn single_numa_node_refuses_pages_no_node_has_naming_the_size_and_what_is_free() {
    let mut a = alloc(host(512, 512), Policy::SingleNumaNode);
    a.place(&asking(1, 2, 400)).expect("first");
    a.place(&asking(2, 2, 400)).expect("second");
    let e = a
        .place(&asking(3, 2, 200))
        .expect_err("200 pages fit no node");
    let msg = e.to_string();
    assert!(matches!(e, PlacementError::Unalignable { .. }), "{msg}");
    assert!(
        msg.contains("hugepages-2Mi do not fit one NUMA node"),
        "{msg}"
    );
    assert!(msg.contains("112 hugepages-2Mi"), "what is free: {msg}");
    assert!(msg.contains("reduce hugepages-2Mi to 112 pages"), "{msg}");
    // More than the host has free in all: refused whatever the policy.
    let mut b = alloc(host(512, 512), Policy::BestEffort);
    let e = b.place(&asking(1, 2, 1100)).expect_err("beyond the host");
    assert!(
        e.to_string().contains(
            "not enough free huge pages for default/pod1/main: asked 1100 hugepages-2Mi, \
             1024 hugepages-2Mi free"
        ),
        "{e}"
    );
}

#[test]
fn best_effort_spans_two_nodes_for_pages_one_cannot_give_and_binds_memory_to_both() {
    let mut a = alloc(host(512, 512), Policy::BestEffort);
    let x = a.place(&asking(1, 2, 700)).expect("spans");
    assert_eq!(pages_on(&x, 0) + pages_on(&x, 1), 700);
    for h in &x.hugepages {
        assert!(
            x.mems.contains(h.node),
            "pages on {} outside {}",
            h.node,
            x.mems
        );
    }
}

#[test]
fn a_shared_container_asking_pages_is_bound_to_the_node_that_has_them() {
    let mut a = alloc(host(0, 64), Policy::SingleNumaNode);
    let x = a.place(&asking(1, 0, 10)).expect("shared");
    assert!(!x.exclusive);
    assert_eq!(x.mems.iter().collect::<Vec<_>>(), vec![1]);
    assert_eq!(pages_on(&x, 1), 10);
    let node1 = &a.topology().numa_nodes[1].cpus;
    assert!(x.cpus.is_subset(node1), "cpus {}", x.cpus);
}

#[test]
fn pages_are_freed_at_removal_and_held_again_on_restore() {
    let mut a = alloc(host(512, 512), Policy::SingleNumaNode);
    let x = a.place(&asking(1, 2, 500)).expect("placed");
    let node = x.numa_nodes.first().expect("node") as usize;
    assert_eq!(a.ledger().free_huge(node, MI2), 12);
    a.release("c1").expect("released");
    assert_eq!(a.ledger().free_huge(node, MI2), 512);
    // A new allocator (a restart) restores the record and holds its pages again.
    let mut b = alloc(host(512, 512), Policy::SingleNumaNode);
    b.restore(x.clone()).expect("restored");
    assert_eq!(b.ledger().free_huge(node, MI2), 12);
    // A record asking more than a node has is refused, naming what is free.
    let mut c = alloc(host(100, 100), Policy::SingleNumaNode);
    let e = c.restore(x).expect_err("500 pages on a 100-page node");
    assert!(e.to_string().contains("100 hugepages-2Mi free"), "{e}");
}

#[test]
fn a_record_without_hugepages_reads_as_holding_none() {
    let x = alloc(host(8, 8), Policy::SingleNumaNode)
        .place(&asking(1, 2, 4))
        .expect("placed");
    let mut v = serde_json::to_value(&x).expect("json");
    assert!(v.get("hugepages").is_some());
    v.as_object_mut().expect("object").remove("hugepages");
    let old: crate::placement::Assignment = serde_json::from_value(v).expect("old record");
    assert!(old.hugepages.is_empty());
}

/// What a random sequence does: place a container with this many 2 MiB pages (and CPUs), or
/// remove the live one at this position.
#[derive(Debug, Clone)]
enum Op {
    Place(u64, u64),
    Remove(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..300, 0u64..3).prop_map(|(p, c)| Op::Place(p, c)),
        (0usize..8).prop_map(Op::Remove),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn held_pages_never_exceed_a_nodes_pages_and_always_lie_in_mems(
        ops in proptest::collection::vec(op(), 1..40),
        n0 in 0u64..600,
        n1 in 0u64..600,
        single in any::<bool>(),
    ) {
        let policy = if single { Policy::SingleNumaNode } else { Policy::BestEffort };
        let mut a = alloc(host(n0, n1), policy);
        let (mut live, mut next) = (Vec::<String>::new(), 0);
        for o in ops {
            match o {
                Op::Place(pages, cpus) => {
                    next += 1;
                    if let Ok(x) = a.place(&asking(next, cpus, pages)) {
                        let got: u64 = x.hugepages.iter().map(|h| h.pages).sum();
                        prop_assert_eq!(got, pages);
                        for h in &x.hugepages {
                            prop_assert!(x.mems.contains(h.node));
                        }
                        live.push(x.container_id);
                    }
                }
                Op::Remove(i) if !live.is_empty() => {
                    let id = live.remove(i % live.len());
                    prop_assert!(a.release(&id).is_some());
                }
                Op::Remove(_) => {}
            }
            for (node, total) in [(0u32, n0), (1, n1)] {
                let held: u64 = a
                    .assignments()
                    .flat_map(|x| x.hugepages.iter())
                    .filter(|h| h.node == node)
                    .map(|h| h.pages)
                    .sum();
                prop_assert!(held <= total, "node {} holds {} of {}", node, held, total);
                prop_assert_eq!(a.ledger().free_huge(node as usize, MI2), total - held);
            }
        }
        for id in live {
            a.release(&id);
        }
        prop_assert_eq!(a.ledger().free_huge(0, MI2), n0);
        prop_assert_eq!(a.ledger().free_huge(1, MI2), n1);
    }
}

#[test]
fn restricted_admits_the_width_the_pages_need_and_single_numa_node_says_so() {
    // 8 pages per node: 12 can never fit one node.
    let mut a = alloc(host(8, 8), Policy::Restricted);
    let x = a
        .place(&asking(1, 2, 12))
        .expect("two nodes are the narrowest");
    assert_eq!(x.numa_nodes.len(), 2, "{}", x.numa_nodes);
    assert_eq!(pages_on(&x, 0) + pages_on(&x, 1), 12);
    let mut b = alloc(host(8, 8), Policy::SingleNumaNode);
    let e = b.place(&asking(1, 2, 12)).expect_err("no node has 12");
    assert!(
        e.to_string()
            .contains("use policy restricted or best-effort"),
        "{e}"
    );
}
