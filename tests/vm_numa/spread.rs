//! A container whose GPUs sit on two NUMA nodes: its exclusive CPUs are split next to each
//! GPU (`cpu_spread: by-device`, the default), and the per-GPU map it is handed
//! (`NRI_ALIGN_GPU_CPUS`) is one a launcher can use: inside the container, `taskset -c` with each
//! entry succeeds and the process then reports exactly those CPUs.

use crate::guest::{guest, ids, list, Ids};
use crate::kubepods::Qos;
use test_support::e2e::ContainerSpec;

/// The minor of the stand-in GPU on `node`.
fn gpu_on(node: u32, gpu_node: &std::collections::BTreeMap<u32, u32>) -> u32 {
    gpu_node
        .iter()
        .find(|(_, n)| **n == node)
        .map(|(m, _)| *m)
        .unwrap_or_else(|| panic!("no GPU on node {node}: {gpu_node:?}"))
}

#[test]
fn t10_gpus_on_two_nodes_get_cpus_next_to_each_and_a_map_taskset_takes() {
    let Some(g) = guest("t10") else { return };
    let f = &g.facts;
    let (a, b) = (gpu_on(0, &f.gpu_node), gpu_on(2, &f.gpu_node));
    let node_a = format!("/dev/nvidia{a}");
    let node_b = format!("/dev/nvidia{b}");
    let spec = ContainerSpec::new("train")
        .cpu_millis(4000, Some(4000))
        .memory(64 << 20)
        .device(&node_a, &node_a, "rw")
        .device(&node_b, &node_b, "rw")
        .env(
            "NVIDIA_VISIBLE_DEVICES",
            &format!("{},{}", f.gpu_uuid[&a], f.gpu_uuid[&b]),
        );
    let pod = g.pod("spread", Qos::Guaranteed, &[("policy", "best-effort")]);
    let id = g.run(&pod, &spec);
    let s = g.seen(&id);
    eprintln!("spread: {s}");
    for node in [0, 2] {
        let here: Ids = s.cpus.intersection(&f.node_cpus[&node]).copied().collect();
        assert_eq!(
            here.len(),
            2,
            "node {node} (a GPU's) should hold 2 of the 4 CPUs, holds {}\n  seen: {s}",
            list(&here)
        );
    }
    let map = s
        .env
        .get("NRI_ALIGN_GPU_CPUS")
        .unwrap_or_else(|| panic!("no NRI_ALIGN_GPU_CPUS in the env: {:?}", s.env));
    let entries: Vec<(&str, &str)> = map.split(';').filter_map(|e| e.split_once(':')).collect();
    assert_eq!(entries.len(), 2, "one entry per GPU: {map}");
    let mut union = Ids::new();
    for (ordinal, cpus) in entries {
        let want = ids(cpus);
        assert_eq!(want.len(), 2, "GPU {ordinal}'s CPUs {cpus}: {map}");
        union.extend(want.iter().copied());
        let r = g
            .ctrd
            .cri()
            .exec(&id, &["taskset", "-c", cpus, "cat", "/proc/self/status"])
            .expect("exec");
        assert_eq!(r.code, 0, "taskset -c {cpus}: {}", r.stderr);
        let got = r
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|v| ids(v.trim()))
            .unwrap_or_default();
        assert_eq!(got, want, "taskset -c {cpus}: {}", r.stdout);
    }
    assert_eq!(
        union, s.cpus,
        "the map's lists are the container's cpuset: {map}"
    );
    let (ok, out) = g.verify();
    assert!(ok, "nri-align verify reports drift:\n{out}");
}
