//! Huge pages through the engine on the real allocator: a container's `hugepage_limits` (as
//! the runtime passes them, `2MB` pages) choose its node, `cpuset.mems` covers the pages' node,
//! the pages are held across a restart (from the state file) and freed at removal.

use std::sync::Arc;

use super::kubernetes::{host, kctr, kpod};
use super::*;
use crate::enforce::testing::AllDevices;
use crate::placement::{Allocator, Policy};
use crate::topology::HugePages;

/// 2 nodes x 4 CPUs, 512 pages of 2 MiB on each node.
fn engine(store: Option<StateStore>) -> Engine<Allocator> {
    let mut topo = host("");
    for n in &mut topo.numa_nodes {
        n.hugepages = vec![HugePages {
            size_kb: 2048,
            total: 512,
            free: 512,
        }];
    }
    let mut config = Config::default();
    config.placement.policy = Policy::SingleNumaNode;
    let a = Allocator::new(Arc::new(topo), config.placement.clone());
    Engine::new(
        a,
        config,
        store,
        Some(Arc::new(Metrics::new())),
        Box::new(AllDevices),
    )
}

/// A Guaranteed 1-CPU container asking for `pages` 2 MiB pages, as the kubelet sends it: a
/// limit for every page size of the host, 0 for those it does not ask.
fn asking(p: &PodView, id: &str, pages: u64) -> ContainerView {
    let mut c = kctr(p, id, id, 1000, Some(1000));
    c.resources.hugepage_limits = vec![("2MB".into(), pages << 21), ("1GB".into(), 0)];
    c
}

#[test]
fn a_container_asking_more_pages_than_its_node_has_left_lands_on_the_other_node() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = || Some(StateStore::open(dir.path()).expect("store"));
    let mut e = engine(store());
    let p = kpod("net", "dpdk", &[]);
    let first = e
        .create_container(&p, &asking(&p, "c1", 400))
        .expect("create")
        .expect("placed");
    let home = first.adjustment.cpuset_mems.clone();
    assert_eq!(home.len(), 1, "one node: {home}");
    let q = kpod("net", "dpdk2", &[]);
    let second = e
        .create_container(&q, &asking(&q, "c2", 300))
        .expect("create")
        .expect("placed");
    let mems = &second.adjustment.cpuset_mems;
    assert_eq!(mems.len(), 1, "one node: {mems}");
    assert!(
        mems.is_disjoint(&home),
        "c2 on {mems}, c1's pages on {home}"
    );
    let node = mems.first().expect("a node");
    let node_cpus = &e.placer.topology().numa_nodes[node as usize].cpus;
    assert!(second.adjustment.cpuset_cpus.is_subset(node_cpus));
    let held = &e.records().containers["c2"].assignment.hugepages;
    assert_eq!(held.len(), 1);
    assert_eq!((held[0].node, held[0].pages), (node, 300));
    drop(e); // kill -9: the state file keeps the pages

    let mut again = engine(store());
    assert!(matches!(
        again.start(),
        StartState::Restored { restored: 2, .. }
    ));
    // 112 and 212 pages left: 250 fits no node under single-numa-node.
    let r = kpod("net", "dpdk3", &[]);
    let err = again
        .create_container(&r, &asking(&r, "c3", 250))
        .expect_err("no node has 250 pages left")
        .to_string();
    assert!(err.contains("hugepages-2Mi"), "{err}");
    assert!(err.contains("212 hugepages-2Mi"), "what is free: {err}");
    // c1 removed: its node has 512 again, and takes the container.
    again.release_container("c1");
    let third = again
        .create_container(&r, &asking(&r, "c3", 250))
        .expect("create")
        .expect("placed");
    assert_eq!(third.adjustment.cpuset_mems, home);
}

#[test]
fn a_resize_that_does_not_name_the_pages_keeps_them() {
    let mut e = engine(None);
    let p = kpod("net", "dpdk", &[]);
    // Shared first (500m, no limit), so that the resize to exclusive CPUs is decided anew.
    let mut c = asking(&p, "c1", 400);
    c.resources.cpu_shares = Some(512);
    c.resources.cpu_quota = None;
    e.create_container(&p, &c).expect("create").expect("placed");
    let before = e.records().containers["c1"].assignment.hugepages.clone();
    assert_eq!(before.iter().map(|h| h.pages).sum::<u64>(), 400);
    // Grown to 2 exclusive CPUs; the update's resources carry no hugepage limits.
    let mut r = c.resources.clone();
    r.cpu_shares = Some(2048);
    r.cpu_quota = Some(200_000);
    r.hugepage_limits.clear();
    e.update_container(&p, &c, &r).expect("resize");
    let after = &e.records().containers["c1"].assignment;
    assert!(after.exclusive, "resized to exclusive CPUs: {}", after.cpus);
    assert_eq!(after.hugepages, before);
}

#[test]
fn a_record_rebuilt_after_a_lost_state_holds_its_pages_again() {
    let p = kpod("net", "dpdk", &[]);
    let c = asking(&p, "c1", 400);
    // The first daemon placed it and lost its state (no store).
    let mut first = engine(None);
    let placed = first
        .create_container(&p, &c)
        .expect("create")
        .expect("placed");
    let first_mems = placed.adjustment.cpuset_mems.to_string();
    let mut live = c.clone();
    live.state = crate::enforce::container::ContainerState::Running;
    live.resources.cpuset_cpus = first.records().containers["c1"]
        .applied_cpus
        .to_string()
        .into();
    live.resources.cpuset_mems = first_mems.clone().into();
    // A new daemon learns of it from the runtime's listing (Synchronize), whose decoder keeps
    // the huge page limits: the rebuilt record holds the 400 pages, so they are not free.
    let mut second = engine(None);
    second.synchronize(std::slice::from_ref(&p), &[live]);
    let held: u64 = second.records().containers["c1"]
        .assignment
        .hugepages
        .iter()
        .map(|h| h.pages)
        .sum();
    assert_eq!(held, 400, "the rebuilt record holds the container's pages");
    // A second container asking 300 pages must go to the other node.
    let q = kpod("net", "dpdk2", &[]);
    let again = second
        .create_container(&q, &asking(&q, "c2", 300))
        .expect("create")
        .expect("placed");
    assert_ne!(
        again.adjustment.cpuset_mems.to_string(),
        first_mems,
        "c2 must not share c1's node, which has 112 pages left"
    );
}
