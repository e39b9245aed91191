//! Where a container's memory lives after its memory nodes moved under it, as `nri-align
//! verify` reports it. With `leave_to_others: [mems]`, another plugin owns `cpuset.mems`: the
//! container starts without memory nodes set (nri-align places its CPU; memory goes where it
//! is first touched, next to that CPU), then the owner moves them (here through the CRI's
//! `UpdateContainerResources`, as the kubelet carries a memory manager's choice) and nri-align
//! moves the CPU after them. The kernel moves the processes' own pages with `cpuset.mems` on
//! cgroup v2 (and on v1 only with `cpuset.memory_migrate`), never data in page cache or tmpfs
//! that no process maps: the 40 MiB the container wrote to `/dev/shm` before the move stay on
//! the first node, and verify reports them as the remote share and flags it.

use crate::guest::{guest, list, Guest, Ids};
use crate::kubepods::Qos;
use test_support::e2e::ContainerSpec;

/// Written to the container's `/dev/shm` (a 64 MiB tmpfs): shmem, `file` in `memory.numa_stat`.
const FILL: u64 = 40 << 20;

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario in the multi-NUMA guest, step by step: each step checks what the steps before left in the guest"
)]
fn t14_memory_left_behind_by_a_move_is_reported_as_remote() {
    let Some(g) = guest("t14") else { return };
    let f = &g.facts;
    let _config = g.reconfigured("leave_to_others: [mems]\n");
    let writer = ContainerSpec::new("writer")
        .cpu_millis(1000, Some(1000))
        .memory(256 << 20)
        .command(&[
            "sh",
            "-c",
            "dd if=/dev/zero of=/dev/shm/data bs=1M count=40 2>/dev/null; sleep 3600",
        ]);
    let pod = g.pod("moved", Qos::Guaranteed, &[]);
    let id = g.run(&pod, &writer);
    let s = g.seen(&id);
    let first = f.nodes_of(&s.cpus);
    assert_eq!(first.len(), 1, "one CPU, one node: {s}");
    let first = *first.iter().next().expect("a node");
    let touched = Guest::wait(180, || {
        Guest::numa_stat(&s.cgroup, "shmem")
            .get(&first)
            .is_some_and(|b| *b >= FILL)
    });
    assert!(
        touched,
        "the 40 MiB in /dev/shm never showed on node {first}, next to its CPU: {:?}",
        Guest::numa_stat(&s.cgroup, "shmem")
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

    let stat = Guest::numa_stat(&s.cgroup, "file");
    let checks = g.verify_json();
    let check = checks
        .as_array()
        .and_then(|a| a.iter().find(|c| c["id"] == id.as_str()))
        .unwrap_or_else(|| panic!("{id} not in verify's report: {checks}"));
    eprintln!("moved from node {first} to {to}: memory.numa_stat file {stat:?}; verify: {check}");
    let memory = &check["memory"];
    assert!(
        memory["bytes_per_node"][first.to_string()]
            .as_u64()
            .unwrap_or(0)
            >= FILL
            && memory["local_percent"].as_u64().unwrap_or(100) <= 10,
        "verify shows the data on node {first}, off the container's node {to}: {check}"
    );
    let remote = &check["remote_memory"];
    assert!(
        remote["reasons"]
            .as_array()
            .is_some_and(|r| r.iter().any(|w| w
                .as_str()
                .is_some_and(|w| w.contains("memory nodes were moved")))),
        "verify says why: its memory nodes moved after it started: {check}"
    );
    assert!(
        remote["remote_percent"].as_u64().unwrap_or(0) >= 90,
        "verify flags the remote share of a container moved after it wrote its data (CPUs {}): \
         {check}",
        list(&moved.cpus)
    );
}
