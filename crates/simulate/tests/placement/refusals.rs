//! Refusals against the engine's own `free:` state: one case per kind of refusal that carries
//! free counts (`unalignable`, `insufficient`, `shared-pool-exhausted`, `scheduler-choice`),
//! each replayed through `simulate`, whose step after a refused pod is the state the refusal
//! saw. A refusal whose counts disagree with that state, or that leaves out the devices that
//! decided it, sends the user after the wrong cause.

use std::sync::Arc;

use align_core::placement::error::fmt_bytes;
use align_core::placement::policy::GpuMode;
use align_core::placement::{NodeFree, PlacementConfig};
use align_core::topology::{testing, Topology};
use simulate::{replay, Strategy, Workload};

/// Each refused container's message with the free state of its step, replayed on `host`.
fn refusals(host: &str, config: PlacementConfig, workload: &str) -> Vec<(String, Vec<NodeFree>)> {
    let topo = Arc::new(testing::shipped(host));
    let wl = Workload::parse(workload).expect("workload");
    let report = replay(topo, config, &wl, Strategy::NriAlign).expect("replay");
    report
        .decisions
        .iter()
        .filter(|d| !d.admitted)
        .map(|d| (d.reason.clone(), report.steps[d.step - 1].free.clone()))
        .collect()
}

fn keep() -> PlacementConfig {
    PlacementConfig {
        gpu_mode: GpuMode::Keep,
        ..PlacementConfig::default()
    }
}

/// The text after `key` up to the next `,` or `;`.
fn field<'m>(msg: &'m str, key: &str) -> &'m str {
    let at = msg
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in {msg}"))
        + key.len();
    let rest = &msg[at..];
    rest[..rest.find([',', ';']).unwrap_or(rest.len())].trim()
}

/// Asserts the best candidate node's free counts are those of the `free:` state.
fn offer_matches_state(msg: &str, free: &[NodeFree]) {
    let node: u32 = field(msg, "best candidate node ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no node in {msg}"));
    let n = free.iter().find(|f| f.node == node).expect("node in state");
    let offer = &msg[msg.find("best candidate node").expect("offer")..];
    assert_eq!(field(offer, "free cpu "), n.cpus.len().to_string(), "{msg}");
    assert_eq!(field(offer, "memory "), fmt_bytes(n.memory_bytes), "{msg}");
    assert_eq!(field(offer, "gpus "), n.gpus.len().to_string(), "{msg}");
    let nics = field(offer, "nics ");
    assert_eq!(
        nics.split(' ').next(),
        Some(n.nics.len().to_string().as_str()),
        "{msg}"
    );
}

const GB200_PAIR: &str = r#"
pods:
  - name: a
    annotations: {policy.nri-align.io/pod: single-numa-node}
    containers: [{name: t, cpu: "32", memory: 128Gi, gpus: 2, nics: 1}]
  - name: b
    annotations: {policy.nri-align.io/pod: single-numa-node}
    containers: [{name: t, cpu: "32", memory: 128Gi, gpus: 2, nics: 1}]
"#;

/// The second pod has everything it asks for free on node 1; the device plugin's GPUs there
/// and its NIC on node 0, which `keep` does not move, are what refuse it.
#[test]
fn an_unalignable_refusal_names_the_devices_the_plugin_gave_and_the_remedy() {
    let out = refusals("gb200-nvl4-cdmm", keep(), GB200_PAIR);
    let [(msg, free)] = out.as_slice() else {
        panic!("{out:?}")
    };
    assert!(
        msg.contains(
            "the device plugin gave GPUs 0000:09:00.0, 0000:0b:00.0 on node 1 and NIC ibp4s0 \
             on node 0, and gpu_mode: keep does not move them"
        ),
        "{msg}"
    );
    assert!(msg.contains("set gpu_mode: remap"), "{msg}");
    assert!(
        msg.contains("NIC device plugin report each NIC's NUMA node"),
        "{msg}"
    );
    offer_matches_state(msg, free);
    // Where nri-align chooses the devices, the same pod fits and nothing is refused.
    assert!(refusals("gb200-nvl4-cdmm", PlacementConfig::default(), GB200_PAIR).is_empty());
}

/// NICs are shared: a node whose only NIC is in use offers it as shareable, never as free
/// where the state says none is.
#[test]
fn an_unalignable_refusal_counts_free_nics_as_the_state_does() {
    let wl = r#"
pods:
  - name: a
    annotations: {policy.nri-align.io/pod: single-numa-node}
    containers: [{name: c, cpu: "4", memory: 8Gi, gpus: 1, nics: 1}]
  - name: b
    annotations: {policy.nri-align.io/pod: single-numa-node}
    containers: [{name: c, cpu: "4", memory: 8Gi, gpus: 1, nics: 1}]
"#;
    let out = refusals("pcie-4gpu", keep(), wl);
    let [(msg, free)] = out.as_slice() else {
        panic!("{out:?}")
    };
    offer_matches_state(msg, free);
    assert!(msg.contains("nics 0 (+1 in use, shareable)"), "{msg}");
    assert!(
        msg.contains("GPU 0000:04:00.0 on node 0 and NIC ens2f0np0 on node 1"),
        "{msg}"
    );
}

/// Amounts alone: no device given, none named; the counts still match.
#[test]
fn an_unalignable_refusal_by_amounts_names_no_device() {
    let wl = r#"
pods:
  - name: big
    annotations: {policy.nri-align.io/pod: single-numa-node}
    containers: [{name: c, cpu: "80", memory: 8Gi}]
"#;
    let out = refusals("pcie-4gpu", keep(), wl);
    let [(msg, free)] = out.as_slice() else {
        panic!("{out:?}")
    };
    offer_matches_state(msg, free);
    assert!(!msg.contains("gave"), "{msg}");
    assert!(msg.contains("reduce cpu to 64"), "{msg}");
}

/// The sum over the CPU nodes of one field of the state.
fn host_sum(topo: &Topology, free: &[NodeFree], f: fn(&NodeFree) -> u64) -> u64 {
    free.iter()
        .filter(|n| topo.node(n.node).is_some_and(|t| !t.is_memory_only()))
        .map(f)
        .sum()
}

#[test]
fn an_insufficient_refusal_states_the_hosts_free_amount() {
    let wl = r#"
pods:
  - name: fill
    containers: [{name: c, cpu: "100", memory: 100Gi}]
  - name: cpu
    containers: [{name: c, cpu: "40", memory: 1Gi}]
  - name: mem
    containers: [{name: c, cpu: "1", memory: 500Gi}]
  - name: nic
    annotations: {nics.nri-align.io/pod: "3"}
    containers: [{name: c, cpu: "1", memory: 1Gi}]
"#;
    let config = PlacementConfig {
        allow_device_annotations: true,
        ..keep()
    };
    let topo = testing::shipped("pcie-4gpu");
    let out = refusals("pcie-4gpu", config, wl);
    let [(cpu, cpu_free), (mem, mem_free), (nic, nic_free)] = out.as_slice() else {
        panic!("{out:?}")
    };
    let cpus = host_sum(&topo, cpu_free, |n| n.cpus.len() as u64);
    assert!(
        cpu.ends_with(&format!("asked 40, {cpus} free on the host")),
        "{cpu}"
    );
    let bytes = host_sum(&topo, mem_free, |n| n.memory_bytes);
    assert!(
        mem.ends_with(&format!(
            "asked 500Gi, {} free on the host",
            fmt_bytes(bytes)
        )),
        "{mem}"
    );
    let unused: usize = nic_free.iter().map(|n| n.nics.len()).sum();
    assert!(
        nic.ends_with(&format!("asked 3, 2 in all ({unused} unused) on the host")),
        "{nic}"
    );
}

#[test]
fn a_shared_pool_refusal_names_the_pool_the_state_holds() {
    let wl = r#"
pods:
  - name: all
    containers: [{name: c, cpu: "128", memory: 1Gi}]
"#;
    let out = refusals("pcie-4gpu", PlacementConfig::default(), wl);
    let [(msg, free)] = out.as_slice() else {
        panic!("{out:?}")
    };
    let cpus = free
        .iter()
        .fold(align_core::topology::CpuSet::new(), |a, n| a.union(&n.cpus));
    assert!(
        msg.contains(&format!("the shared pool ({cpus})")),
        "{msg} vs {cpus}"
    );
}

#[test]
fn a_scheduler_choice_refusal_states_the_chosen_nodes_free_amounts() {
    let wl = r#"
pods:
  - name: exact
    annotations:
      scheduling.koordinator.sh/resource-status: '{"cpuset":"20-21"}'
    containers: [{name: c, cpu: "2", memory: 1Gi}]
  - name: late
    annotations:
      scheduling.koordinator.sh/resource-status: '{"cpuset":"21-22"}'
    containers: [{name: c, cpu: "2", memory: 1Gi}]
"#;
    let out = refusals("epyc-nps4", PlacementConfig::default(), wl);
    let [(msg, free)] = out.as_slice() else {
        panic!("{out:?}")
    };
    let n = free.iter().find(|n| n.node == 1).expect("node 1");
    let there = format!(
        "free there: node 1: cpus {} ({}), {}",
        n.cpus,
        n.cpus.len(),
        fmt_bytes(n.memory_bytes)
    );
    assert!(msg.contains(&there), "{msg} vs {there}");
}
