//! The baseline against the kubelet's own tables and options: rows written from
//! kubernetes/kubernetes `pkg/kubelet/cm/cpumanager/policy_static_test.go` (`TestStaticPolicyAdd`,
//! the row's comment names the case), and each Topology Manager or memory manager option
//! changing a decision as the kubelet's policies do.

use super::*;
use crate::kubelet_cpus::tests::single_socket_ht;
use align_core::placement::Request;
use align_core::topology::testing::TopologyBuilder;

fn request(id: &str, milli: u64, memory: Option<u64>) -> Request {
    Request {
        container_id: id.into(),
        container_name: id.into(),
        cpu_request_milli: milli,
        cpu_limit_milli: Some(milli),
        memory_limit_bytes: memory,
        ..Default::default()
    }
}

fn baseline(topo: Topology, policy: Policy, reserved: &str) -> KubeletBaseline {
    let config = PlacementConfig {
        policy,
        reserved_cpus: reserved.parse().expect("cpu list"),
        ..PlacementConfig::default()
    };
    KubeletBaseline::new(Arc::new(topo), config).expect("baseline")
}

#[test]
fn the_kubelets_static_policy_rows() {
    let cpus = |b: &mut KubeletBaseline, milli| {
        b.place(&request("c", milli, None))
            .map(|a| a.cpus.to_string())
            .unwrap_or_default()
    };
    // "GuPodSingleCore, SingleSocketHT, ExpectError": 8 CPUs with one reserved.
    let mut b = baseline(single_socket_ht(), Policy::None, "0");
    assert_eq!(cpus(&mut b, 8000), "");
    // "GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU": the sibling of the reserved CPU,
    // the partly used core.
    let mut b = baseline(single_socket_ht(), Policy::None, "0");
    assert_eq!(cpus(&mut b, 1000), "4");
    // "GuPodMultipleCores, SingleSocketHT, ExpectAllocOneCore": 2, 3, 6 and 7 assigned, a
    // whole core of what is left.
    let mut b = baseline(single_socket_ht(), Policy::None, "0");
    let held = Assignment {
        container_id: "fakeID100".into(),
        exclusive: true,
        cpus: "2,3,6,7".parse().expect("cpu list"),
        ..Assignment::default()
    };
    b.ledger.record(held, Vec::new()).expect("recorded");
    assert_eq!(cpus(&mut b, 2000), "1,5");
}

/// Four nodes of 4 CPUs, two a socket (distances 10, 12 within a socket, 21 across), node 1
/// reserved whole: 8 CPUs fit nodes {0,2}, {0,3} or {2,3}. The narrowest rule takes the lowest
/// mask, {0,2}, across the sockets; `prefer-closest-numa-nodes` takes {2,3}, on one socket.
#[test]
fn prefer_closest_numa_nodes_keeps_a_two_node_container_on_one_socket() {
    let topo = || {
        TopologyBuilder::new()
            .sockets(2)
            .numa_per_socket(2)
            .cores(4)
            .build()
    };
    let nodes = |b: &mut KubeletBaseline| {
        b.place(&request("c", 8000, None))
            .expect("placed")
            .mems
            .to_string()
    };
    let mut narrowest = baseline(topo(), Policy::Restricted, "4-7");
    assert_eq!(nodes(&mut narrowest), "0,2");
    let options = TopologyManagerOptions {
        prefer_closest_numa_nodes: true,
        ..TopologyManagerOptions::default()
    };
    let mut closest = baseline(topo(), Policy::Restricted, "4-7")
        .with_topology_manager_options(options)
        .expect("options");
    assert_eq!(nodes(&mut closest), "2-3");
    assert!(closest
        .describe()
        .contains("prefer-closest-numa-nodes=true"));
}

/// `max-allowable-numa-nodes` as an option: the 34-node GB200 tray runs once it covers them.
#[test]
fn max_allowable_numa_nodes_admits_a_host_with_more_nodes() {
    let numa = align_core::topology::testing::shipped("gb200-nvl4-numa");
    let b = KubeletBaseline::new(Arc::new(numa.clone()), PlacementConfig::default())
        .map(|_| ())
        .expect_err("refused at the default");
    assert_eq!(b.max, 8);
    let raised =
        KubeletBaseline::with_max_numa_nodes(Arc::new(numa), PlacementConfig::default(), 8)
            .map(|_| ());
    assert!(raised.is_err());
    let topo = Arc::new(align_core::topology::testing::shipped("gb200-nvl4-cdmm"));
    let options = TopologyManagerOptions {
        max_allowable_numa_nodes: 34,
        ..TopologyManagerOptions::default()
    };
    let b = KubeletBaseline::new(topo, PlacementConfig::default())
        .expect("baseline")
        .with_topology_manager_options(options)
        .expect("options");
    assert!(b.describe().contains("max-allowable-numa-nodes=34"));
}

/// The memory manager's default policy, `None`, gives no memory hints: 4 CPUs with more memory
/// than a node holds still fit one node under restricted. Its `Static` policy hints two nodes
/// for the memory, which no CPU hint matches, so restricted refuses.
#[test]
fn memory_hints_only_under_the_static_memory_manager() {
    let ask = request("c", 4000, Some(100 << 30));
    let topo = align_core::topology::testing::two_node;
    let mut none = baseline(topo(), Policy::Restricted, "");
    assert_eq!(none.place(&ask).expect("placed").mems.to_string(), "0");
    let mut fixed = baseline(topo(), Policy::Restricted, "").with_static_memory_manager(true);
    assert!(fixed.place(&ask).is_err());
}

/// The CPU manager's minimal width counts reserved CPUs: with one CPU of each node reserved,
/// 16 CPUs fit neither node's 15 free ones, but each node has 16, so one node is the preferred
/// width and the two-node hint is not preferred: restricted refuses.
#[test]
fn reserved_cpus_count_in_the_minimal_width() {
    let mut b = baseline(
        align_core::topology::testing::two_node(),
        Policy::Restricted,
        "0,8",
    );
    let err = b.place(&request("c", 16_000, None)).expect_err("refused");
    assert!(err.to_string().contains("TopologyAffinityError"), "{err}");
    let mut best_effort = baseline(
        align_core::topology::testing::two_node(),
        Policy::BestEffort,
        "0,8",
    );
    let a = best_effort
        .place(&request("c", 16_000, None))
        .expect("placed");
    assert_eq!(a.mems.to_string(), "0-1");
    assert!(a.reason.contains("not preferred"), "{}", a.reason);
}
