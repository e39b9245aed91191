//! Allocator behaviour on the shipped host shapes: SMT and L3 rules, best fit,
//! spanning, GPU sets on the cube mesh, NIC pairing, memory-only nodes, policies, pod scope,
//! rejection messages, restore and release.

use std::sync::Arc;

use align_core::placement::gpus::LinkTable;
use align_core::placement::{
    Allocator, GpuMode, PlacementConfig, PlacementError, Policy, Request, Scope,
};
use align_core::topology::testing::{self, TopologyBuilder};
use align_core::topology::{CpuSet, PcieLevel, Topology};
use test_support::requests::{annotated, guaranteed, in_pod, with_gpus, GIB};

/// A Guaranteed container of `cpus` CPUs and `mem_gib` GiB (none for 0) in pod `pod`.
fn req(id: &str, pod: &str, cpus: u64, mem_gib: u64, ann: &[(&str, &str)]) -> Request {
    let memory = (mem_gib > 0).then_some(mem_gib * GIB);
    annotated(in_pod(guaranteed(id, cpus * 1000, memory), pod), ann)
}

fn alloc(topo: Topology, policy: Policy) -> Allocator {
    Allocator::new(
        Arc::new(topo),
        PlacementConfig {
            policy,
            ..PlacementConfig::default()
        },
    )
}

fn node_of(topo: &Topology, cpus: &CpuSet) -> Vec<u32> {
    let mut v: Vec<u32> = cpus
        .iter()
        .map(|c| topo.cpus[c as usize].numa_node)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[test]
fn whole_cores_first_then_leftover_siblings() {
    let topo = testing::two_node();
    let mut a = alloc(topo.clone(), Policy::SingleNumaNode);
    let x = a.place(&req("a", "p", 4, 1, &[])).expect("4 cpus");
    assert!(x.exclusive);
    // Two whole cores: every CPU's sibling is in the set.
    for c in x.cpus.iter() {
        assert!(
            topo.cpus[c as usize].thread_siblings.is_subset(&x.cpus),
            "{:?}",
            x.cpus
        );
    }
    let y = a.place(&req("b", "p", 3, 1, &[])).expect("3 cpus");
    let z = a.place(&req("c", "p", 1, 1, &[])).expect("1 cpu");
    // The odd thread of b's split core goes to c, so no second core is broken.
    let broken: Vec<u32> = y
        .cpus
        .iter()
        .filter(|c| !topo.cpus[*c as usize].thread_siblings.is_subset(&y.cpus))
        .collect();
    assert_eq!(broken.len(), 1);
    let sib = topo.cpus[broken[0] as usize]
        .thread_siblings
        .difference(&y.cpus);
    assert_eq!(z.cpus, sib);
}

#[test]
fn full_pcpus_only_refuses_odd_counts_with_the_next_multiple() {
    let mut a = Allocator::new(
        Arc::new(testing::two_node()),
        PlacementConfig {
            full_pcpus_only: true,
            ..PlacementConfig::default()
        },
    );
    let err = a.place(&req("a", "p", 3, 0, &[])).expect_err("odd");
    assert!(
        matches!(err, PlacementError::SmtAlignment { suggest: 4, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("ask for 4 CPUs"), "{err}");
}

#[test]
fn one_l3_group_before_spreading() {
    let topo = testing::shipped("epyc-nps4");
    let mut a = alloc(topo.clone(), Policy::SingleNumaNode);
    let x = a.place(&req("a", "p", 8, 1, &[])).expect("8");
    let groups: std::collections::BTreeSet<_> = x
        .cpus
        .iter()
        .map(|c| topo.cpus[c as usize].l3_group)
        .collect();
    assert_eq!(groups.len(), 1, "{:?}", x.cpus);
    // 16 CPUs: a whole CCX (8 cores x 2 threads) again in one group, in the same node (best fit).
    let y = a.place(&req("b", "p", 16, 1, &[])).expect("16");
    let groups: std::collections::BTreeSet<_> = y
        .cpus
        .iter()
        .map(|c| topo.cpus[c as usize].l3_group)
        .collect();
    assert_eq!(groups.len(), 1, "{:?}", y.cpus);
}

#[test]
fn best_fit_keeps_a_whole_node_for_a_large_request() {
    let topo = testing::two_node();
    let mut a = alloc(topo.clone(), Policy::SingleNumaNode);
    let big = a.place(&req("a", "p", 12, 1, &[])).expect("12");
    let small = a.place(&req("b", "p", 4, 1, &[])).expect("4");
    assert_eq!(
        node_of(&topo, &big.cpus),
        node_of(&topo, &small.cpus),
        "4 goes where it fits exactly"
    );
    // The other node is still whole: 15 of its 16 CPUs fit on it (the 16th stays in the
    // shared pool, which never goes empty).
    let whole = a
        .place(&req("c", "p", 15, 1, &[]))
        .expect("15 still fits one node");
    assert_eq!(whole.numa_nodes.len(), 1);
    assert_ne!(node_of(&topo, &whole.cpus), node_of(&topo, &big.cpus));
}

#[test]
fn spanning_uses_the_closest_nodes_and_policies_decide() {
    let topo = testing::shipped("epyc-nps4");
    let mut be = alloc(topo.clone(), Policy::BestEffort);
    let x = be
        .place(&req("a", "p", 40, 1, &[]))
        .expect("best-effort spans");
    assert_eq!(x.numa_nodes.len(), 2);
    let ids: Vec<u32> = x.numa_nodes.iter().collect();
    assert_eq!(topo.distance(ids[0], ids[1]), 11, "neighbours: {:?}", ids);
    let mut re = alloc(topo.clone(), Policy::Restricted);
    assert!(
        re.place(&req("a", "p", 40, 1, &[])).is_ok(),
        "2 nodes is the narrowest possible"
    );
    let mut sn = alloc(topo, Policy::SingleNumaNode);
    let err = sn
        .place(&req("a", "p", 40, 1, &[]))
        .expect_err("too big for a node");
    let msg = err.to_string();
    assert!(msg.contains("cpu does not fit one NUMA node"), "{msg}");
    assert!(
        msg.contains("best candidate node 0 had free cpu 32"),
        "{msg}"
    );
    assert!(msg.contains("reduce cpu to 32"), "{msg}");
    assert!(msg.contains("restricted or best-effort"), "{msg}");
}

#[test]
fn restricted_refuses_a_wider_set_than_needed() {
    let topo = testing::two_node();
    let mut a = alloc(topo, Policy::Restricted);
    a.place(&req("a", "p", 10, 1, &[])).expect("10 on one node");
    a.place(&req("b", "p", 10, 1, &[]))
        .expect("10 on the other");
    let err = a
        .place(&req("c", "p", 8, 1, &[]))
        .expect_err("8 would span");
    assert!(err.to_string().contains("reduce cpu to 6"), "{err}");
}

#[test]
fn cube_mesh_never_returns_an_unlinked_pair_while_a_linked_one_is_free() {
    let topo = testing::shipped("dgx1-v100");
    let links = LinkTable::new(&topo);
    for busy in 0u32..256 {
        let mut a = Allocator::new(
            Arc::new(topo.clone()),
            PlacementConfig {
                gpu_mode: GpuMode::Keep,
                ..PlacementConfig::default()
            },
        );
        let held: Vec<usize> = (0..8).filter(|g| busy & (1 << g) != 0).collect();
        if held.len() > 6 {
            continue;
        }
        a.place(&with_gpus(req("hold", "h", 0, 0, &[]), &topo, &held))
            .expect("hold");
        a.set_config(PlacementConfig::default());
        let free: Vec<usize> = (0..8).filter(|g| !held.contains(g)).collect();
        let linked_free = free
            .iter()
            .any(|i| free.iter().any(|j| i != j && links.linked(*i, *j)));
        let got = a
            .place(&with_gpus(req("x", "p", 2, 1, &[]), &topo, &[0, 1]))
            .expect("pair");
        let idx: Vec<usize> = got
            .gpus
            .iter()
            .map(|b| {
                topo.gpus
                    .iter()
                    .position(|g| &g.pci_bus_id == b)
                    .expect("known")
            })
            .collect();
        assert!(
            idx.iter().all(|g| !held.contains(g)),
            "busy {busy:08b}: {idx:?}"
        );
        if linked_free {
            assert!(
                links.linked(idx[0], idx[1]),
                "busy {busy:08b}: got unlinked {idx:?}"
            );
        }
    }
}

#[test]
fn cube_mesh_pairs_take_double_links_and_quads_stay_whole() {
    let topo = testing::shipped("dgx1-v100");
    let mut a = alloc(topo.clone(), Policy::SingleNumaNode);
    // In a quad the double links are 0-3, 1-2 and 2-3 (2-3 also shares a switch): taking 2-3
    // first would leave 0-1 with a single link, so the pairs must be 0-3 and 1-2.
    let quad = a
        .place(&with_gpus(req("q", "p", 8, 1, &[]), &topo, &[0, 4, 5, 6]))
        .expect("quad");
    let mut idx: Vec<usize> = quad
        .gpus
        .iter()
        .map(|b| {
            topo.gpus
                .iter()
                .position(|g| &g.pci_bus_id == b)
                .expect("known")
        })
        .collect();
    idx.sort();
    assert!(
        idx == vec![0, 1, 2, 3] || idx == vec![4, 5, 6, 7],
        "a quad, got {idx:?}"
    );
    let pair = a
        .place(&with_gpus(req("r", "p2", 4, 1, &[]), &topo, &[0, 1]))
        .expect("pair");
    let links = LinkTable::new(&topo);
    let p: Vec<usize> = pair
        .gpus
        .iter()
        .map(|b| {
            topo.gpus
                .iter()
                .position(|g| &g.pci_bus_id == b)
                .expect("known")
        })
        .collect();
    assert_eq!(
        topo.gpu_links.as_ref().expect("links").nvlink[p[0]][p[1]],
        2,
        "{p:?}"
    );
    assert_ne!(
        topo.pcie_level(&pair.gpus[0], &pair.gpus[1]),
        PcieLevel::SingleSwitch,
        "not 2-3 / 6-7"
    );
    assert!(links.linked(p[0], p[1]));
    // The remaining two of that quad are the other double-linked pair.
    let rest = a
        .place(&with_gpus(req("s", "p3", 4, 1, &[]), &topo, &[0, 1]))
        .expect("pair 2");
    let q: Vec<usize> = rest
        .gpus
        .iter()
        .map(|b| {
            topo.gpus
                .iter()
                .position(|g| &g.pci_bus_id == b)
                .expect("known")
        })
        .collect();
    assert_eq!(
        topo.gpu_links.as_ref().expect("links").nvlink[q[0]][q[1]],
        2,
        "{q:?}"
    );
    assert_eq!(pair.numa_nodes, rest.numa_nodes);
}

#[test]
fn nics_pair_with_gpus_under_the_same_switch() {
    let topo = testing::shipped("dgx-h100");
    let mut a = alloc(topo.clone(), Policy::SingleNumaNode);
    let mut r = with_gpus(req("a", "p", 8, 16, &[]), &topo, &[5, 6]);
    // Allocated under sw0 and sw7, far from the GPUs on sw5 and sw6.
    r.allocated_nics = vec!["ibp24s0".into(), "ibp220s0".into()];
    let x = a.place(&r).expect("2 gpus 2 nics");
    assert_eq!(x.gpus.len(), 2);
    assert_eq!(x.nics.len(), 2);
    for (g, n) in x.gpus.iter().zip(&x.nics) {
        let nic = topo.nics.iter().find(|z| &z.name == n).expect("nic");
        let lvl = topo.pcie_level(nic.pci_bus_id.as_deref().expect("bus"), g);
        assert_eq!(lvl, PcieLevel::SingleSwitch, "{g} {n}");
    }
    assert!(x.aligned);
    assert!(x.reason.contains("nic path PIX/PIX"), "{}", x.reason);
    let node = x.numa_nodes.first().expect("node");
    assert!(node_of(&topo, &x.cpus) == vec![node]);
}

#[test]
fn keep_mode_keeps_the_allocated_gpus_and_follows_them() {
    let topo = testing::shipped("dgx1-v100");
    let mut a = Allocator::new(
        Arc::new(topo.clone()),
        PlacementConfig {
            gpu_mode: GpuMode::Keep,
            ..PlacementConfig::default()
        },
    );
    let x = a
        .place(&with_gpus(req("a", "p", 4, 8, &[]), &topo, &[6]))
        .expect("keep");
    assert_eq!(x.gpus, vec![topo.gpus[6].pci_bus_id.clone()]);
    assert_eq!(x.numa_nodes.iter().collect::<Vec<_>>(), vec![1]);
    assert_eq!(node_of(&topo, &x.cpus), vec![1]);
    // The kubelet hands a device id to one container at a time: a kept GPU given again was
    // advertised twice by its device plugin (time-slicing or MPS replicas), so the second
    // container is aligned to it too and neither holds it alone any more.
    let y = a
        .place(&with_gpus(req("b", "p", 0, 0, &[]), &topo, &[6]))
        .expect("shared");
    let bus = topo.gpus[6].pci_bus_id.clone();
    assert!(y.gpus.is_empty(), "{y:?}");
    assert_eq!(y.shared_gpus, vec![bus]);
    assert_eq!(y.numa_nodes.iter().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn memory_only_nodes_only_when_asked() {
    let topo = testing::shipped("grace-hopper");
    let mut a = alloc(topo.clone(), Policy::SingleNumaNode);
    let x = a
        .place(&with_gpus(req("a", "p", 8, 64, &[]), &topo, &[0]))
        .expect("default");
    assert_eq!(x.mems.to_string(), "0");
    let y = a
        .place(&with_gpus(
            req(
                "b",
                "q",
                8,
                64,
                &[("mems.nri-align.io/pod", "with-memory-only")],
            ),
            &topo,
            &[],
        ))
        .expect("asked");
    assert_eq!(y.mems.to_string(), "0-1");
    let err = a
        .place(&req("c", "r", 4, 400, &[]))
        .expect_err("HBM is not CPU memory");
    assert!(err.to_string().contains("memory"), "{err}");
}

#[test]
fn pod_scope_keeps_containers_together_or_says_why() {
    let topo = testing::two_node();
    let ann = [("scope.nri-align.io/pod", "pod")];
    let mut a = alloc(topo.clone(), Policy::SingleNumaNode);
    let first = a.place(&req("a", "p", 4, 1, &ann)).expect("first");
    let second = a.place(&req("b", "p", 4, 1, &ann)).expect("second");
    assert_eq!(first.numa_nodes, second.numa_nodes);
    let side = a
        .place(&{
            let mut r = req("s", "p", 0, 1, &ann);
            r.cpu_limit_milli = None;
            r.cpu_request_milli = 100;
            r
        })
        .expect("sidecar");
    assert!(!side.exclusive);
    assert_eq!(side.numa_nodes, first.numa_nodes);
    assert!(node_of(&topo, &side.cpus) == first.numa_nodes.iter().collect::<Vec<_>>());
    let err = a
        .place(&req("c", "p", 10, 1, &ann))
        .expect_err("does not fit the pod's node");
    assert!(err.to_string().contains("the pod's NUMA node"), "{err}");
    assert!(err.to_string().contains("scope container"), "{err}");
    let be = [
        ("scope.nri-align.io/pod", "pod"),
        ("policy.nri-align.io/pod", "best-effort"),
    ];
    let d = a
        .place(&req("d", "p", 10, 1, &be))
        .expect("best-effort goes elsewhere");
    assert!(!d.aligned);
    assert!(d.reason.contains("does not fit the pod's"), "{}", d.reason);
}

#[test]
fn policy_none_and_shared_containers_use_the_pool() {
    let topo = TopologyBuilder::new()
        .sockets(2)
        .cores(4)
        .threads(2)
        .isolated("15")
        .build();
    let mut a = Allocator::new(
        Arc::new(topo),
        PlacementConfig {
            reserved_cpus: "0".parse().expect("set"),
            ..PlacementConfig::default()
        },
    );
    let mut shared = req("s", "p", 0, 0, &[]);
    shared.cpu_request_milli = 1500;
    shared.cpu_limit_milli = Some(2000);
    let s = a.place(&shared).expect("shared");
    assert!(!s.exclusive);
    assert_eq!(s.cpus.to_string(), "1-14");
    let x = a
        .place(&req(
            "x",
            "p",
            4,
            0,
            &[("policy.nri-align.io/container.x", "none")],
        ))
        .expect("none");
    assert!(x.exclusive && !x.cpus.contains(0));
    assert_eq!(
        a.shared_pool(),
        "1-14".parse::<CpuSet>().expect("set").difference(&x.cpus)
    );
    assert_eq!(x.policy, Policy::None);
    let sh = a
        .place(&req("y", "p", 2, 0, &[("cpus.nri-align.io/pod", "shared")]))
        .expect("forced shared");
    assert!(!sh.exclusive);
}

#[test]
fn release_and_restore() {
    let topo = testing::shipped("dgx1-v100");
    let mut a = alloc(topo.clone(), Policy::BestEffort);
    let before = a.free_by_node();
    let x = a
        .place(&with_gpus(req("a", "p", 6, 32, &[]), &topo, &[0, 1]))
        .expect("place");
    assert_ne!(a.free_by_node(), before);
    let mut clash = x.clone();
    clash.container_id = "other".into();
    let err = a.restore(clash).expect_err("same cpus twice");
    assert!(matches!(err, PlacementError::Conflict { .. }), "{err}");
    let back = a.release("a").expect("was placed");
    assert_eq!(back, x);
    assert_eq!(a.free_by_node(), before);
    a.restore(x.clone()).expect("restore into empty");
    assert_eq!(a.assignments().count(), 1);
    assert_eq!(
        a.plan(&with_gpus(req("b", "q", 2, 1, &[]), &topo, &[0]))
            .expect("plan")
            .gpus
            .len(),
        1
    );
    assert_eq!(a.assignments().count(), 1, "plan does not record");
}

#[test]
fn insufficient_and_scope_annotation_errors() {
    let mut a = alloc(testing::two_node(), Policy::BestEffort);
    let err = a
        .place(&req("a", "p", 40, 0, &[]))
        .expect_err("only 32 cpus");
    assert_eq!(
        err.to_string(),
        "not enough free cpu for default/p/a: asked 40, 32 free on the host"
    );
    let cfg = PlacementConfig {
        scope: Scope::Pod,
        ..PlacementConfig::default()
    };
    a.set_config(cfg);
    assert_eq!(a.config().scope, Scope::Pod);
}

#[test]
fn gpu_rejection_says_what_the_best_node_had() {
    let topo = testing::shipped("dgx1-v100");
    let mut a = Allocator::new(
        Arc::new(topo.clone()),
        PlacementConfig {
            gpu_mode: GpuMode::Keep,
            ..PlacementConfig::default()
        },
    );
    // Hold GPUs 0, 1 and 4, 5: each node keeps two free GPUs.
    a.place(&with_gpus(req("h", "h", 0, 0, &[]), &topo, &[0, 1, 4, 5]))
        .expect("hold");
    a.set_config(PlacementConfig {
        policy: Policy::SingleNumaNode,
        ..PlacementConfig::default()
    });
    let err = a
        .place(&with_gpus(req("x", "p", 4, 8, &[]), &topo, &[2, 3, 6, 7]))
        .expect_err("4 gpus");
    let msg = err.to_string();
    assert!(msg.contains("gpus do not fit one NUMA node"), "{msg}");
    assert!(
        msg.contains("asked cpu 4, memory 8Gi, gpus 4, nics 0"),
        "{msg}"
    );
    assert!(msg.contains("gpus 2, nics"), "{msg}");
    assert!(msg.contains("reduce gpus to 2"), "{msg}");
    // best-effort takes the two pairs across the sockets, and says it is not aligned.
    a.set_config(PlacementConfig::default());
    let x = a
        .place(&with_gpus(req("x", "p", 4, 8, &[]), &topo, &[2, 3, 6, 7]))
        .expect("best-effort");
    assert!(!x.aligned, "{}", x.reason);
    assert_eq!(x.gpus.len(), 4);
}

#[test]
fn gpu_reporting_its_memory_node_belongs_with_the_closest_cpu_node() {
    let mut topo = testing::shipped("grace-hopper");
    topo.gpus[0].numa_node = Some(1);
    let mut a = alloc(topo.clone(), Policy::SingleNumaNode);
    let x = a
        .place(&with_gpus(req("a", "p", 8, 32, &[]), &topo, &[0]))
        .expect("aligned");
    assert!(x.aligned);
    assert_eq!(x.mems.to_string(), "0");
}

#[test]
fn wide_requests_stay_in_one_socket_while_they_can() {
    let topo = testing::shipped("epyc-nps4");
    let mut a = alloc(topo.clone(), Policy::BestEffort);
    let x = a.place(&req("a", "p", 80, 1, &[])).expect("80 cpus");
    let ids: Vec<u32> = x.numa_nodes.iter().collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    for p in &ids {
        for q in &ids {
            assert!(topo.distance(*p, *q) <= 12, "{ids:?} crosses sockets");
        }
    }
    assert_eq!(x.cpus.len(), 80);
    assert_eq!(node_of(&topo, &x.cpus).len(), 3);
}

#[test]
fn exclusive_cpus_never_take_the_last_shared_cpu() {
    let topo = testing::two_node();
    let online = topo.online_cpus().len() as u64;
    let mut a = alloc(topo, Policy::BestEffort);
    // Everything but one CPU can go exclusive...
    let x = a
        .place(&req("x", "p", online - 1, 0, &[]))
        .expect("all but one CPU");
    assert_eq!(x.cpus.len() as u64, online - 1);
    let pool = a.shared_pool();
    assert_eq!(pool.len(), 1, "{pool}");
    // ...but not the last one: shared containers would have nowhere to run.
    let err = a
        .place(&req("y", "p", 1, 0, &[]))
        .expect_err("last shared CPU");
    assert!(
        matches!(err, PlacementError::SharedPoolExhausted { asked: 1, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains(&format!("({pool})")), "{err}");
    assert_eq!(a.shared_pool(), pool, "a refusal changes nothing");
    // Shared containers still get the pool, and a release makes room again.
    let s = a.place(&req("s", "p", 0, 0, &[])).expect("shared");
    assert_eq!(s.cpus, pool);
    a.release("x");
    a.place(&req("y", "p", 1, 0, &[])).expect("room again");
}
