use super::*;

#[test]
fn bus_ids() {
    assert!(is_bus_id("0000:1b:00.0"));
    assert!(is_bus_id("10000:01:00.7"));
    assert!(!is_bus_id("pci0000:00"));
    assert!(!is_bus_id("virtio2"));
    assert!(!is_bus_id("0000:1b:00"));
}

#[test]
fn uverbs_fall_back_to_the_device_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let verbs = dir
        .path()
        .join("sys/class/infiniband/mlx5_0/device/infiniband_verbs/uverbs3");
    fs::create_dir_all(&verbs).expect("mkdir");
    fs::write(verbs.join("ibdev"), "mlx5_0\n").expect("write");
    let map = uverbs_by_ibdev(&SysFs::new(dir.path()));
    assert_eq!(map.get("mlx5_0"), Some(&vec!["uverbs3".to_string()]));
}

#[test]
fn a_numa_node_outside_local_cpulist_loses_to_the_nearest_covered_node() {
    let node = |id: u32, cpus: &str, distances: Vec<u32>| NumaNode {
        id,
        cpus: cpus.parse().expect("list"),
        memory_bytes: 1 << 30,
        hugepages: Vec::new(),
        distances,
        memory_kind: None,
    };
    let nodes = vec![
        node(0, "0-1", vec![10, 21, 12]),
        node(1, "2-3", vec![21, 10, 21]),
        node(2, "4-5", vec![12, 21, 10]),
    ];
    let local: CpuSet = "2-5".parse().expect("list");
    // Node 0 named, nodes 1 and 2 covered: node 2 is nearer to node 0.
    assert_eq!(overruled_by_cpulist(0, &local, &nodes), Some(2));
    // A named node inside local_cpulist stands.
    assert_eq!(overruled_by_cpulist(1, &local, &nodes), None);
    // A node that is not a CPU node (or unknown) is left alone.
    assert_eq!(overruled_by_cpulist(7, &local, &nodes), None);
}

#[test]
fn chains_stop_at_non_functions() {
    let (rc, chain) = split_chain(Path::new(
        "pci0000:00/0000:00:01.0/0000:01:00.0/virtio2/net/eth0",
    ));
    assert_eq!(rc, "pci0000:00");
    assert_eq!(chain, vec!["0000:00:01.0", "0000:01:00.0"]);
}
