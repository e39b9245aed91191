//! Huge pages per NUMA node: with 2 MiB pages reserved on nodes 0 and 1 (at the guest's
//! set-up, before nri-align reads the topology), a container asking for more pages than its
//! first choice of node has left lands on the other node: its CPUs and `cpuset.mems` there.

use std::path::PathBuf;

use serde_json::json;

use crate::guest::{guest, list, Ids};
use crate::kubepods::Qos;
use test_support::e2e::ContainerSpec;

/// Pages of 2 MiB reserved on each of nodes 0 and 1.
pub const RESERVED: u64 = 16;

fn nr_hugepages(node: u32) -> PathBuf {
    PathBuf::from(format!(
        "/sys/devices/system/node/node{node}/hugepages/hugepages-2048kB/nr_hugepages"
    ))
}

/// Reserves [`RESERVED`] 2 MiB pages on nodes 0 and 1, before nri-align starts (it reads each
/// node's `nr_hugepages` once, with the topology). A node the kernel cannot fill keeps fewer;
/// the test reads what it got.
pub fn reserve() {
    for node in [0, 1] {
        let path = nr_hugepages(node);
        if let Err(e) = std::fs::write(&path, RESERVED.to_string()) {
            eprintln!("cannot reserve huge pages on node {node}: {e}");
        }
    }
}

fn reserved(node: u32) -> u64 {
    std::fs::read_to_string(nr_hugepages(node))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// A Guaranteed 1-CPU container asking for `pages` 2 MiB pages, as the kubelet asks them.
fn asking(name: &str, pages: u64) -> ContainerSpec {
    ContainerSpec::new(name)
        .cpu_millis(1000, Some(1000))
        .memory(32 << 20)
        .resource(
            "hugepage_limits",
            json!([{ "page_size": "2MB", "limit": pages << 21 }]),
        )
}

#[test]
fn t12_a_container_asking_more_huge_pages_than_a_node_has_left_lands_on_the_other() {
    let Some(g) = guest("t12") else { return };
    let f = &g.facts;
    let have = reserved(0).min(reserved(1));
    assert!(
        have >= 8,
        "nodes 0 and 1 should hold {RESERVED} pages of 2 MiB each (reserved at set-up): {} and {}",
        reserved(0),
        reserved(1)
    );
    // The first takes all but 4 pages of whichever node it lands on; the second asks 6.
    let first_pages = have - 4;
    let single = [("policy", "single-numa-node")];
    let p1 = g.pod("huge-a", Qos::Guaranteed, &single);
    let a = g.run(&p1, &asking("huge-a", first_pages));
    let sa = g.seen(&a);
    eprintln!("huge-a ({first_pages} pages): {sa}");
    let home = f.nodes_of(&sa.cpus);
    assert_eq!(home.len(), 1, "huge-a on one node: {sa}");
    let home = *home.iter().next().expect("a node");
    assert!(
        home <= 1,
        "huge-a asked huge pages only nodes 0 and 1 have, landed on node {home}\n  seen: {sa}"
    );
    assert_eq!(sa.mems, Ids::from([home]), "huge-a's mems: {sa}");
    let other = 1 - home;
    let p2 = g.pod("huge-b", Qos::Guaranteed, &single);
    let b = g.run(&p2, &asking("huge-b", 6));
    let sb = g.seen(&b);
    eprintln!("huge-b (6 pages): {sb}");
    // What the runtime put in the spec (and so passed to NRI).
    let spec = g.ctrd.cri().inspect(&b).expect("inspect");
    let limits = &spec["info"]["runtimeSpec"]["linux"]["resources"]["hugepageLimits"];
    eprintln!("huge-b's spec hugepageLimits: {limits}");
    assert_eq!(
        sb.mems,
        Ids::from([other]),
        "huge-b's pages can only come from node {other} (node {home} has 4 left)\n  seen: {sb}\n  \
         spec hugepageLimits: {limits}"
    );
    assert!(
        sb.cpus.is_subset(&f.node_cpus[&other]),
        "huge-b's CPUs {} should be node {other}'s ({})",
        list(&sb.cpus),
        list(&f.node_cpus[&other])
    );
    let (ok, out) = g.verify();
    assert!(ok, "nri-align verify reports drift:\n{out}");
}
