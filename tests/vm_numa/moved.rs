//! Where a container's memory lives after its memory nodes moved under it, as `nri-align
//! verify` reports it. With `leave_to_others: [mems]`, another plugin owns `cpuset.mems`: the
//! container starts without memory nodes set (nri-align places its CPU, the memory goes where
//! it is first touched, next to that CPU), then the owner moves them (here through the CRI's
//! `UpdateContainerResources`, as the kubelet carries a memory manager's choice) and nri-align
//! moves the CPUs after them. What was touched before stays where it was on cgroup v1
//! (`cpuset.memory_migrate` is 0 unless set): verify shows that remote share and flags it. On
//! cgroup v2 the kernel migrates a cgroup's pages when its `cpuset.mems` changes: verify then
//! shows the memory on its new node.

use crate::guest::{guest, list, Guest, Ids};
use crate::kubepods::Qos;
use test_support::e2e::ContainerSpec;

const FILL: u64 = 64 << 20;

/// Puts the guest's configuration back when the test ends, passed or not.
struct Restore<'a>(&'a Guest);

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        self.0.reconfigure("");
    }
}

#[test]
fn t14_memory_left_behind_by_a_move_is_reported_as_remote() {
    let Some(g) = guest("t14") else { return };
    let f = &g.facts;
    g.reconfigure("leave_to_others: [mems]\n");
    let _restore = Restore(g);
    let writer = ContainerSpec::new("writer")
        .cpu_millis(1000, Some(1000))
        .memory(256 << 20)
        .command(&[
            "sh",
            "-c",
            "dd if=/dev/zero bs=64M count=1 2>/dev/null | sleep 3600",
        ]);
    let pod = g.pod("moved", Qos::Guaranteed, &[]);
    let id = g.run(&pod, &writer);
    let s = g.seen(&id);
    let first = f.nodes_of(&s.cpus);
    assert_eq!(first.len(), 1, "one CPU, one node: {s}");
    let first = *first.iter().next().expect("a node");
    let touched = Guest::wait(180, || {
        Guest::anon_by_node(&s.cgroup)
            .get(&first)
            .is_some_and(|b| *b >= FILL)
    });
    assert!(
        touched,
        "the 64 MiB never showed on node {first}, next to its CPU: {:?}",
        Guest::anon_by_node(&s.cgroup)
    );

    // The owner of cpuset.mems moves it to the node farthest from the first.
    let to = *f
        .node_cpus
        .keys()
        .max_by_key(|n| (f.dist(first, **n), **n))
        .expect("nodes");
    let args = [
        "update",
        "--cpu-period",
        "100000",
        "--cpu-quota",
        "100000",
        "--cpu-share",
        "1024",
        "--memory",
        &(256_i64 << 20).to_string(),
        "--cpuset-mems",
        &to.to_string(),
        id.as_str(),
    ];
    g.ctrd
        .cri()
        .ok(&args)
        .unwrap_or_else(|e| panic!("move the memory nodes: {e}\n{}", g.plugin_tail(20)));
    let mut moved = None;
    let followed = Guest::wait(60, || {
        let now = g.seen(&id);
        let ok = now.mems == Ids::from([to]) && f.nodes_of(&now.cpus) == Ids::from([to]);
        moved = Some(now);
        ok
    });
    let moved = moved.expect("seen");
    assert!(
        followed,
        "memory nodes moved to {to} and the CPU after them: {moved}\n{}",
        g.plugin_tail(20)
    );

    let v2 = s.cgroup.join("cgroup.controllers").exists();
    let stat = Guest::anon_by_node(&s.cgroup);
    let checks = g.verify_json();
    let check = checks
        .as_array()
        .and_then(|a| a.iter().find(|c| c["id"] == id.as_str()))
        .unwrap_or_else(|| panic!("{id} not in verify's report: {checks}"));
    let memory = &check["memory"];
    let on = |node: u32| {
        memory["bytes_per_node"][node.to_string()]
            .as_u64()
            .unwrap_or(0)
    };
    eprintln!(
        "moved from node {first} to {to} (cgroup v{}): memory.numa_stat anon {stat:?}; verify: {check}",
        if v2 { 2 } else { 1 }
    );
    if v2 {
        assert!(
            on(to) >= FILL
                && memory["local_percent"].as_u64().unwrap_or(0) >= 90
                && check["remote_memory"].is_null(),
            "cgroup v2 migrates the pages with cpuset.mems: verify shows them on node {to}: \
             {check}"
        );
    } else {
        let remote = &check["remote_memory"];
        assert!(
            on(first) >= FILL && memory["local_percent"].as_u64().unwrap_or(100) <= 10,
            "cgroup v1 leaves the pages on node {first}: verify shows them there, off the \
             container's node {to}: {check}"
        );
        assert!(
            remote["remote_percent"].as_u64().unwrap_or(0) >= 90,
            "verify flags the remote share of a container moved after it touched its memory \
             (CPUs {}): {check}",
            list(&moved.cpus)
        );
    }
}
