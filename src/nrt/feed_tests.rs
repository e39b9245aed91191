use super::*;
use crate::topology::{HugePages, NumaNode};

#[test]
fn hugepages_are_read_again_for_nodes_with_pools_only() {
    let root = tempfile::tempdir().expect("tmp");
    let dir = root
        .path()
        .join("sys/devices/system/node/node1/hugepages/hugepages-2048kB");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("nr_hugepages"), "16\n").expect("nr");
    std::fs::write(dir.join("free_hugepages"), "5\n").expect("free");
    let node = |id, total| NumaNode {
        id,
        cpus: Default::default(),
        memory_bytes: 1 << 30,
        hugepages: vec![HugePages {
            size_kb: 2048,
            total,
            free: total,
        }],
        distances: vec![10, 20],
        memory_kind: None,
    };
    let topo = Topology {
        numa_nodes: vec![node(0, 0), node(1, 16)],
        ..Default::default()
    };
    let mut free = vec![
        ZoneFree {
            node: 0,
            ..Default::default()
        },
        ZoneFree {
            node: 1,
            ..Default::default()
        },
    ];
    hugepages_refresh(root.path().into())(&topo, &mut free);
    assert_eq!(free[0].hugepages_free, vec![]);
    assert_eq!(free[1].hugepages_free, vec![(2048, 5)]);
}

#[test]
fn the_smaller_of_the_kernels_free_pages_and_the_unheld_pages_is_published() {
    let root = tempfile::tempdir().expect("tmp");
    let dir = root
        .path()
        .join("sys/devices/system/node/node0/hugepages/hugepages-2048kB");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("nr_hugepages"), "16\n").expect("nr");
    std::fs::write(dir.join("free_hugepages"), "12\n").expect("free");
    let topo = Topology {
        numa_nodes: vec![NumaNode {
            id: 0,
            cpus: Default::default(),
            memory_bytes: 1 << 30,
            hugepages: vec![HugePages {
                size_kb: 2048,
                total: 16,
                free: 16,
            }],
            distances: vec![10],
            memory_kind: None,
        }],
        ..Default::default()
    };
    // Containers hold 10 of the 16 pages but have faulted in only 4 of them.
    let mut free = vec![ZoneFree {
        node: 0,
        hugepages_free: vec![(2048, 6)],
        ..Default::default()
    }];
    hugepages_refresh(root.path().into())(&topo, &mut free);
    assert_eq!(free[0].hugepages_free, vec![(2048, 6)]);
    // Pages used outside the containers: the kernel's count is the smaller.
    std::fs::write(dir.join("free_hugepages"), "2\n").expect("free");
    hugepages_refresh(root.path().into())(&topo, &mut free);
    assert_eq!(free[0].hugepages_free, vec![(2048, 2)]);
}
