//! An in-place resize on a host with NUMA nodes: the kubelet's `UpdateContainerResources`
//! (`crictl update`) of a Guaranteed container, read from inside it (`/proc/self/status`). A
//! grow keeps every CPU it holds and adds the nearest free ones: the other thread of its core
//! first, then the node closest by distance, whose memory node is added too; a shrink back
//! gives back exactly the CPUs added, and the memory nodes stay widened.

use crate::guest::{guest, list, Guest, Ids, Seen};
use crate::kubepods::Qos;
use test_support::e2e::ContainerSpec;

/// `crictl update` as the kubelet sends an in-place resize to `cpus` whole CPUs (request =
/// limit, 64 MiB of memory as before).
fn resize(g: &Guest, id: &str, cpus: i64) {
    let (quota, shares) = ((cpus * 100_000).to_string(), (cpus * 1024).to_string());
    let args = [
        "update",
        "--cpu-period",
        "100000",
        "--cpu-quota",
        &quota,
        "--cpu-share",
        &shares,
        "--memory",
        &(64_i64 << 20).to_string(),
        id,
    ];
    g.ctrd.cri().ok(&args).unwrap_or_else(|e| {
        panic!(
            "resize to {cpus} CPUs: {e}\nnri-align log tail:\n{}",
            g.plugin_tail(20)
        )
    });
}

/// What the container sees once its CPUs number `want` (the update is applied by the runtime
/// after nri-align answered).
fn seen_with(g: &Guest, id: &str, want: usize) -> Seen {
    let mut last = None;
    let done = Guest::wait(60, || {
        let s = g.seen(id);
        let ok = s.cpus.len() == want;
        last = Some(s);
        ok
    });
    let s = last.expect("seen once");
    assert!(done, "never {want} CPUs after the resize: {s}");
    s
}

#[test]
fn t13_a_resize_keeps_the_cpus_it_holds_and_grows_next_to_them() {
    let Some(g) = guest("t13") else { return };
    let f = &g.facts;
    let spec = ContainerSpec::new("app")
        .cpu_millis(1000, Some(1000))
        .memory(64 << 20);
    let pod = g.pod("resize", Qos::Guaranteed, &[("policy", "best-effort")]);
    let id = g.run(&pod, &spec);
    let admitted = seen_with(g, &id, 1);
    let home = f.nodes_of(&admitted.cpus);
    assert_eq!(home.len(), 1, "one CPU on one node: {admitted}");
    let home = *home.iter().next().expect("a node");

    resize(g, &id, 2);
    let two = seen_with(g, &id, 2);
    assert!(
        admitted.cpus.is_subset(&two.cpus) && f.nodes_of(&two.cpus) == Ids::from([home]),
        "a grow to 2 keeps CPU {} and takes the other thread of its core, on node {home}: {two}",
        list(&admitted.cpus)
    );

    resize(g, &id, 3);
    let three = seen_with(g, &id, 3);
    assert!(
        two.cpus.is_subset(&three.cpus),
        "a grow to 3 keeps {}: {three}",
        list(&two.cpus)
    );
    let added: Ids = three.cpus.difference(&two.cpus).copied().collect();
    let nodes = f.nodes_of(&added);
    let nearest = f
        .node_cpus
        .keys()
        .filter(|n| **n != home)
        .map(|n| f.dist(home, *n))
        .min()
        .expect("other nodes");
    assert!(
        nodes.len() == 1 && nodes.iter().all(|n| f.dist(home, *n) == nearest),
        "node {home} is full: the added CPU {} is on the node nearest to it (distance \
         {nearest}): {three}",
        list(&added)
    );
    assert!(
        three.mems.is_superset(&f.nodes_of(&three.cpus)),
        "memory nodes widen to the added CPU's node: {three}"
    );

    resize(g, &id, 1);
    let back = seen_with(g, &id, 1);
    assert_eq!(
        back.cpus, admitted.cpus,
        "a shrink gives back the added CPUs, newest first, down to the admitted one: {back}"
    );
    assert_eq!(
        back.mems, three.mems,
        "memory nodes only widen: a shrink leaves them: {back}"
    );
}
