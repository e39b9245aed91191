use super::*;
use align_core::topology::testing::shipped;

fn packed(_topo: &Topology) -> impl Fn(&CpuSet, u32) -> CpuSet {
    |a: &CpuSet, n: u32| a.iter().take(n as usize).collect()
}

fn on(topo: &Topology, cpus: &CpuSet, node: u32) -> usize {
    topo.node(node)
        .map_or(0, |n| cpus.intersection_len(&n.cpus))
}

#[test]
fn a_request_wider_than_a_node_is_split_evenly() {
    let topo = shipped("dgx-h100");
    let all = topo.online_cpus();
    let got = take_distributed(&topo, &all, 120, 1, packed(&topo)).expect("distributed");
    assert_eq!((on(&topo, &got, 0), on(&topo, &got, 1)), (60, 60));
    // 121 CPUs: 60 each and the remainder on one of them.
    let got = take_distributed(&topo, &all, 121, 1, packed(&topo)).expect("distributed");
    assert_eq!(got.len(), 121);
    assert!(on(&topo, &got, 0).min(on(&topo, &got, 1)) == 60);
    // Nodes with different free counts (the kubelet's reserved CPUs on node 0).
    let mut some = all.clone();
    some.remove(0);
    some.remove(112);
    let got = take_distributed(&topo, &some, 120, 1, packed(&topo)).expect("distributed");
    assert_eq!((on(&topo, &got, 0), on(&topo, &got, 1)), (60, 60));
}

#[test]
fn a_request_one_node_holds_stays_on_one_node() {
    let topo = shipped("dgx-h100");
    let all = topo.online_cpus();
    let got = take_distributed(&topo, &all, 20, 1, packed(&topo)).expect("one node");
    assert!(
        on(&topo, &got, 0) == 20 || on(&topo, &got, 1) == 20,
        "{got}"
    );
}

#[test]
fn counts_not_in_whole_groups_and_too_few_cpus_fall_back_to_packing() {
    let topo = shipped("dgx-h100");
    let all = topo.online_cpus();
    assert_eq!(take_distributed(&topo, &all, 121, 2, packed(&topo)), None);
    assert_eq!(take_distributed(&topo, &all, 500, 1, packed(&topo)), None);
}

#[test]
fn combinations_are_lexicographic() {
    assert_eq!(
        combinations(4, 2),
        vec![
            vec![0, 1],
            vec![0, 2],
            vec![0, 3],
            vec![1, 2],
            vec![1, 3],
            vec![2, 3]
        ]
    );
    assert!(combinations(2, 3).is_empty());
}
