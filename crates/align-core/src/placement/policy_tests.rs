use super::*;

#[test]
fn names_round_trip_and_unknown_names_list_the_choices() {
    for p in ["none", "best-effort", "restricted", "single-numa-node"] {
        assert_eq!(p.parse::<Policy>().expect("known").to_string(), p);
    }
    let err = "single-numa".parse::<Policy>().expect_err("unknown");
    assert_eq!(
            err.to_string(),
            "unknown policy \"single-numa\"; expected one of: none best-effort restricted single-numa-node"
        );
}

#[test]
fn a_memory_policy_names_the_containers_memory_nodes() {
    use crate::placement::MemoryPolicy;
    use crate::topology::testing::shipped;
    use crate::topology::NodeSet;
    let set = |s: &str| s.parse::<NodeSet>().expect("set");
    // gb200-nvl4-numa: CPU nodes 0-1, each GPU's HBM a memory-only node of its own.
    let topo = shipped("gb200-nvl4-numa");
    let cpu_nodes = set("0");
    let hbm: Vec<u32> = topo
        .numa_nodes
        .iter()
        .filter(|n| n.cpus.is_empty())
        .map(|n| n.id)
        .collect();
    let mut mems = set("0");
    mems.insert(hbm[0]);
    let policy = |mode| MemoryPolicy::for_container(mode, &topo, &mems, &cpu_nodes);
    assert_eq!(policy(MemPolicy::None), None);
    for mode in [
        MemPolicy::Bind,
        MemPolicy::Interleave,
        MemPolicy::WeightedInterleave,
    ] {
        assert_eq!(policy(mode).expect("a policy").nodes, mems, "{mode}");
    }
    // Preferred-many: the CPU node's own memory first; the HBM node stays in cpuset.mems for
    // the kernel to fall back to.
    assert_eq!(
        policy(MemPolicy::PreferredMany).expect("a policy").nodes,
        cpu_nodes
    );
    // Without memory nodes there is nothing to name.
    assert_eq!(
        MemoryPolicy::for_container(MemPolicy::Bind, &topo, &NodeSet::new(), &cpu_nodes),
        None
    );
    for p in [
        "none",
        "bind",
        "interleave",
        "preferred-many",
        "weighted-interleave",
    ] {
        assert_eq!(p.parse::<MemPolicy>().expect("known").to_string(), p);
    }
}
