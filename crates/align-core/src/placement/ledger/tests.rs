//! CPU hot-plug against placement: random sequences of CPUs going offline and online,
//! interleaved with creations and removals, never give a CPU to two containers, never give an
//! offline CPU to a new container, and leave every online CPU either in the shared pool or held.

use std::sync::Arc;

use proptest::prelude::*;

use crate::placement::allocator::Allocator;
use crate::placement::policy::{PlacementConfig, Policy};
use crate::placement::test_requests::{request, Replay, Step};
use crate::topology::testing::TopologyBuilder;
use crate::topology::{CpuSet, NodeSet};

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u64..=4).prop_map(Step::Create),
        (0usize..16).prop_map(Step::Remove),
        (0u32..32).prop_map(Step::Offline),
        (0u32..32).prop_map(Step::Online),
    ]
}

/// The invariants after every step.
fn check(alloc: &Allocator, online: &CpuSet) -> Result<(), TestCaseError> {
    let mut held = CpuSet::new();
    for a in alloc.assignments().filter(|a| a.exclusive) {
        prop_assert!(
            a.cpus.is_disjoint(&held),
            "{} shares CPUs {} with another container",
            a.container_id,
            a.cpus.intersection(&held)
        );
        held.extend_from(&a.cpus);
    }
    let pool = alloc.shared_pool();
    prop_assert!(pool.is_subset(online), "pool {pool} has offline CPUs");
    prop_assert!(pool.is_disjoint(&held), "pool {pool} has held CPUs");
    let covered = pool.union(&held);
    prop_assert!(
        online.is_subset(&covered),
        "online CPUs {} neither pooled nor held",
        online.difference(&covered)
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn hot_plug_never_double_gives_nor_gives_an_offline_cpu(
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        // 2 nodes x 8 cores x 2 threads: CPUs 0-31.
        let topo = Arc::new(TopologyBuilder::new().sockets(2).cores(8).threads(2).build());
        let config = PlacementConfig { policy: Policy::BestEffort, ..PlacementConfig::default() };
        let mut alloc = Allocator::new(Arc::clone(&topo), config);
        let mut replay = Replay::new(&alloc);
        for s in steps {
            if let Some((a, before)) = replay.apply(&mut alloc, s) {
                prop_assert!(
                    a.cpus.is_subset(&replay.online),
                    "{} got offline CPUs {}", a.container_id, a.cpus.difference(&replay.online)
                );
                if a.exclusive {
                    prop_assert!(a.cpus.is_subset(&before), "taken from outside the pool");
                }
            }
            let (online, live) = (&replay.online, &replay.live);
            check(&alloc, online)?;
            // Nothing a container holds is ever dropped by a hot-plug.
            for id in live {
                prop_assert!(alloc.assignments().any(|a| &a.container_id == id));
            }
        }
    }
}

#[test]
fn an_offlined_cpu_stays_with_its_holder_and_returns_to_it() {
    let topo = Arc::new(TopologyBuilder::new().cores(4).build());
    let config = PlacementConfig {
        policy: Policy::BestEffort,
        ..PlacementConfig::default()
    };
    let mut alloc = Allocator::new(Arc::clone(&topo), config);
    let a = alloc.place(&request(1, 2)).expect("placed");
    let held = a.cpus.first().expect("a cpu");
    let mut online = topo.online_cpus();
    online.remove(held);
    alloc.set_online(&online, &NodeSet::new());
    let gone = alloc.ledger().offline_held();
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].0, "c1");
    assert_eq!(gone[0].1.to_string(), held.to_string());
    assert!(!alloc.shared_pool().contains(held));
    // Back online, it is still its holder's, not the pool's.
    online.insert(held);
    alloc.set_online(&online, &NodeSet::new());
    assert!(alloc.ledger().offline_held().is_empty());
    assert!(!alloc.shared_pool().contains(held));
    assert_eq!(alloc.ledger().cpu_holder(held), Some("c1"));
    // A free CPU that comes back is in the pool again.
    let free = alloc.shared_pool().first().expect("a pool cpu");
    online.remove(free);
    alloc.set_online(&online, &NodeSet::new());
    assert!(!alloc.shared_pool().contains(free));
    online.insert(free);
    alloc.set_online(&online, &NodeSet::new());
    assert!(alloc.shared_pool().contains(free));
}

#[test]
fn cpus_the_topology_does_not_describe_are_not_placed_on() {
    let topo = Arc::new(TopologyBuilder::new().cores(4).build());
    let mut alloc = Allocator::new(Arc::clone(&topo), PlacementConfig::default());
    let online: CpuSet = "0-5".parse().expect("set");
    let unknown = alloc.set_online(&online, &NodeSet::new());
    assert_eq!(unknown.to_string(), "4-5");
    assert_eq!(alloc.shared_pool().to_string(), "0-3");
}

#[test]
fn a_node_whose_memory_went_offline_takes_no_new_memory() {
    let topo = Arc::new(TopologyBuilder::new().sockets(2).cores(4).build());
    let mut alloc = Allocator::new(Arc::clone(&topo), PlacementConfig::default());
    let before = alloc.free_by_node();
    assert!(before.iter().all(|n| n.memory_bytes > 0));
    let gone: NodeSet = "1".parse().expect("set");
    alloc.set_online(&topo.online_cpus(), &gone);
    let after = alloc.free_by_node();
    assert_eq!(after[1].memory_bytes, 0);
    assert_eq!(after[0].memory_bytes, before[0].memory_bytes);
    alloc.set_online(&topo.online_cpus(), &NodeSet::new());
    assert_eq!(alloc.free_by_node(), before);
}

#[test]
fn cpus_outside_the_containers_cpuset_are_never_given() {
    let mut topo = TopologyBuilder::new().sockets(2).cores(4).build();
    topo.outside_cpuset = "5-7".parse().expect("set");
    let topo = Arc::new(topo);
    let mut alloc = Allocator::new(Arc::clone(&topo), PlacementConfig::default());
    assert_eq!(alloc.shared_pool().to_string(), "0-4");
    let x = alloc.place(&request(1, 4)).expect("placed");
    assert_eq!(x.cpus.to_string(), "0-3");
    // One CPU of node 1 may be given: the shared pool keeps none of its own then.
    assert!(alloc.place(&request(2, 1)).is_err(), "the pool's last CPU");
    assert_eq!(alloc.free_by_node()[1].offline_cpus.to_string(), "5-7");
    // A hot-plug read (which lists every online CPU) keeps them out.
    alloc.set_online(&topo.online_cpus(), &NodeSet::new());
    assert_eq!(alloc.shared_pool().to_string(), "4");
}
