//! The sysfs reader on snapshots with the quirks real machines and their gathered trees have
//! (hostile sizes and damaged files included): each test copies the two-socket fixture
//! (tests/fixtures/sysfs, node0 = CPUs 0-3,8-11, node1 = 4-7,12-15, distances 10/21) and damages it
//! the way a kernel, firmware or snapshot tool does, then checks what the reader makes of it: read
//! as meant, repaired with a warning, or refused with an error naming the file.

use std::fs;
use std::path::{Path, PathBuf};

use align_core::topology::{read_host_checked, NodeSet, Topology};

const NODE: &str = "sys/devices/system/node";
const CPU: &str = "sys/devices/system/cpu";

/// A private copy of fixture `name` (symlinks kept as symlinks).
fn snapshot(name: &str) -> tempfile::TempDir {
    let src = test_support::repo_root()
        .join("tests/fixtures/sysfs")
        .join(name);
    let t = tempfile::tempdir().expect("tmp");
    copy_tree(&src, t.path());
    t
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for e in fs::read_dir(from).expect("readdir") {
        let e = e.expect("entry");
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ft = e.file_type().expect("type");
        if ft.is_symlink() {
            let target = fs::read_link(&src).expect("readlink");
            std::os::unix::fs::symlink(target, &dst).expect("symlink");
        } else if ft.is_dir() {
            copy_tree(&src, &dst);
        } else {
            fs::copy(&src, &dst).expect("copy");
        }
    }
}

fn put(root: &Path, rel: &str, bytes: &[u8]) -> PathBuf {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs::write(&p, bytes).expect("write");
    p
}

fn node_of(t: &Topology, cpu: u32) -> u32 {
    t.cpus.iter().find(|c| c.id == cpu).expect("cpu").numa_node
}

/// `numa_nodes[].cpus` and `cpus[].numa_node` say the same thing.
fn assert_consistent(t: &Topology) {
    for c in &t.cpus {
        let holders: Vec<u32> = t
            .numa_nodes
            .iter()
            .filter(|n| n.cpus.contains(c.id))
            .map(|n| n.id)
            .collect();
        assert_eq!(holders, vec![c.numa_node], "cpu {}", c.id);
    }
}

#[test]
fn nul_padded_lists_and_masks_are_read_as_the_kernel_meant() {
    // Before: `0-3,8-11\0\0` failed to parse, the mask too, and every CPU landed on node 0.
    let t = snapshot("two-socket-smt");
    let root = t.path();
    put(
        root,
        &format!("{NODE}/node0/cpulist"),
        b"0-3,8-11\n\0\0\0\0\0\0",
    );
    put(
        root,
        &format!("{NODE}/node1/cpulist"),
        b"4-7,12-15\0\0\0\0\0\0\0\0",
    );
    put(root, &format!("{NODE}/node1/cpumap"), b"f0f0\n\0\0\0");
    put(root, &format!("{CPU}/online"), b"0-15\n\0\0");
    let (topo, warnings) = read_host_checked(root).expect("read");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(topo.numa_nodes[1].cpus.to_string(), "4-7,12-15");
    assert_eq!((node_of(&topo, 4), node_of(&topo, 12)), (1, 1));
    assert_consistent(&topo);
}

#[test]
fn overlapping_node_cpulists_are_repaired_so_every_cpu_has_one_node() {
    // Buggy SRAT: node1 also lists CPUs 3 and 11, which node0 holds.
    let t = snapshot("two-socket-smt");
    put(t.path(), &format!("{NODE}/node1/cpulist"), b"3-7,11-15\n");
    let (topo, warnings) = read_host_checked(t.path()).expect("read");
    assert_eq!(topo.numa_nodes[0].cpus.to_string(), "0-3,8-11");
    assert_eq!(topo.numa_nodes[1].cpus.to_string(), "4-7,12-15");
    assert_eq!((node_of(&topo, 3), node_of(&topo, 11)), (0, 0));
    assert_consistent(&topo);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("node1 also claims CPUs 3,11"),
        "{warnings:?}"
    );
}

#[test]
fn a_node_that_claims_only_another_nodes_cpus_is_ignored_as_hwloc_does() {
    // hwloc's buggynuma shape: both nodes claim every CPU.
    let t = snapshot("two-socket-smt");
    put(t.path(), &format!("{NODE}/node0/cpulist"), b"0-15\n");
    put(t.path(), &format!("{NODE}/node1/cpulist"), b"0-15\n");
    let (topo, warnings) = read_host_checked(t.path()).expect("read");
    assert_eq!(topo.numa_nodes.len(), 1);
    assert_eq!(topo.numa_nodes[0].cpus.to_string(), "0-15");
    assert_eq!(topo.numa_nodes[0].distances, vec![10]);
    assert_consistent(&topo);
    assert!(
        warnings.iter().any(|w| w.contains("ignoring node1")),
        "{warnings:?}"
    );
}

#[test]
fn quirky_distance_rows_fall_back_to_the_kernels_default_with_one_warning() {
    // Before: the host was refused ("this tree is damaged"), and with it hwloc's real trees
    // offline-cpu0-node0 (a column left for an offline node) and 8ia64-2s2c2t (0 to itself).
    for (row, says) in [
        (&b"21 x\n"[..], "not a number"),
        (b"21\n", "1 value(s) for 2 node(s)"),
        (b"21 10 10\n", "more than 2"),
        (b"21 11\n", "not 10"),
        (b"21 0\n", "distance of 0 to itself"),
        (b"\0\0\0\0", "0 value(s)"),
    ] {
        let t = snapshot("two-socket-smt");
        put(t.path(), &format!("{NODE}/node1/distance"), row);
        let (topo, warnings) =
            read_host_checked(t.path()).unwrap_or_else(|e| panic!("{row:?} refused the host: {e}"));
        let rows: Vec<Vec<u32>> = topo
            .numa_nodes
            .iter()
            .map(|n| n.distances.clone())
            .collect();
        assert_eq!(rows, vec![vec![10, 20], vec![20, 10]], "{row:?}");
        let about: Vec<&String> = warnings.iter().filter(|w| w.contains("distance")).collect();
        assert_eq!(about.len(), 1, "{row:?}: {warnings:?}");
        assert!(about[0].contains("node1/distance"), "{about:?}");
        assert!(about[0].contains(says), "{row:?}: {about:?}");
        assert!(about[0].contains("10 from themselves and 20"), "{about:?}");
    }
    // NUL padding after a good row is fine, and says nothing.
    let t = snapshot("two-socket-smt");
    put(t.path(), &format!("{NODE}/node1/distance"), b"21 10\n\0\0");
    let (topo, warnings) = read_host_checked(t.path()).expect("read");
    assert_eq!(topo.numa_nodes[1].distances, vec![21, 10]);
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn an_offline_nodes_column_left_in_the_online_rows_falls_back_too() {
    // hwloc's offline-cpu0-node0: node0 offline (no directory, not in `online`), node1's row
    // still lists both columns.
    let t = snapshot("two-socket-smt");
    let root = t.path();
    fs::remove_dir_all(root.join(format!("{NODE}/node0"))).expect("rm node0");
    put(root, &format!("{NODE}/online"), b"1\n");
    put(root, &format!("{NODE}/has_cpu"), b"1\n");
    put(root, &format!("{NODE}/has_memory"), b"1\n");
    let (topo, warnings) = read_host_checked(root).expect("an offline node refused the host");
    assert!(
        warnings.iter().any(|w| w.contains("node1/distance")),
        "{warnings:?}"
    );
    // The CPUs still link to node0 (`cpuN/node0`): node 0 is kept with them and no memory, so
    // they never count as local to node 1's memory, and its containers get memory node 1.
    let ids: Vec<u32> = topo.numa_nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![0, 1]);
    let node0 = &topo.numa_nodes[0];
    assert_eq!(node0.memory_bytes, 0);
    assert!(!node0.cpus.is_empty() && node0.cpus.is_disjoint(&topo.numa_nodes[1].cpus));
    assert!(topo
        .cpus
        .iter()
        .filter(|c| node0.cpus.contains(c.id))
        .all(|c| c.numa_node == 0));
    assert_eq!(node0.distances, vec![10, 20]);
    assert_eq!(topo.numa_nodes[1].distances, vec![20, 10]);
    let just_node0: NodeSet = [0].into_iter().collect();
    assert_eq!(topo.memory_nodes_for(&just_node0).to_string(), "1");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("which has no node directory")),
        "{warnings:?}"
    );
}

#[test]
fn a_missing_distance_file_falls_back_to_the_kernels_default_with_a_warning() {
    let t = snapshot("two-socket-smt");
    fs::remove_file(t.path().join(format!("{NODE}/node1/distance"))).expect("rm");
    let (topo, warnings) = read_host_checked(t.path()).expect("read");
    assert_eq!(topo.numa_nodes[0].distances, vec![10, 20]);
    assert!(
        warnings[0].contains("node1/distance is missing"),
        "{warnings:?}"
    );
}

#[test]
fn a_cpu_node_without_memory_is_bound_to_the_nearest_node_with_memory() {
    // Three nodes: node2 has CPUs 12-15 and no memory (a memory-side initiator); node1 is
    // nearer to it (12) than node0 (21).
    let t = snapshot("two-socket-smt");
    let root = t.path();
    put(root, &format!("{NODE}/node1/cpulist"), b"4-7\n");
    put(root, &format!("{NODE}/node1/cpumap"), b"00f0\n");
    put(root, &format!("{NODE}/node0/distance"), b"10 21 21\n");
    put(root, &format!("{NODE}/node1/distance"), b"21 10 12\n");
    put(root, &format!("{NODE}/node2/distance"), b"21 12 10\n");
    put(root, &format!("{NODE}/node2/cpulist"), b"12-15\n");
    put(
        root,
        &format!("{NODE}/node2/meminfo"),
        b"Node 2 MemTotal:       0 kB\nNode 2 MemFree:        0 kB\n",
    );
    let (topo, warnings) = read_host_checked(root).expect("read");
    assert_consistent(&topo);
    let n2 = topo.node(2).expect("node2 kept");
    assert_eq!((n2.cpus.to_string(), n2.memory_bytes), ("12-15".into(), 0));
    let only2: NodeSet = [2].into_iter().collect();
    assert_eq!(topo.memory_nodes_for(&only2).to_string(), "1");
    let both: NodeSet = [0, 2].into_iter().collect();
    assert_eq!(topo.memory_nodes_for(&both).to_string(), "0-1");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("node2 has CPUs 12-15 but no memory") && w.contains("mems 1")),
        "{warnings:?}"
    );
}

#[test]
fn cpu_and_node_ids_no_kernel_has_are_bounded() {
    // Unbounded, a `cpu4294967295` directory or an id of 4294967295 would allocate gigabytes.
    let t = snapshot("two-socket-smt");
    let root = t.path();
    fs::create_dir_all(root.join(format!("{CPU}/cpu4294967295/topology"))).expect("mkdir");
    put(
        root,
        &format!("{CPU}/cpu4294967295/topology/core_id"),
        b"0\n",
    );
    fs::create_dir_all(root.join(format!("{NODE}/node4294967295"))).expect("mkdir");
    put(
        root,
        &format!("{NODE}/node4294967295/cpulist"),
        b"0-4294967295\n",
    );
    let (topo, warnings) = read_host_checked(root).expect("read");
    assert_eq!(topo.cpus.len(), 16);
    assert_eq!(topo.numa_nodes.len(), 2);
    assert_consistent(&topo);
    assert!(warnings.is_empty(), "{warnings:?}");

    // An online list naming such a CPU is not allocated.
    put(root, &format!("{CPU}/online"), b"0-15,4294967295\n");
    put(root, &format!("{CPU}/present"), b"0-15\n");
    // The list's bound makes it unreadable: the (bounded) cpuN directories count instead.
    let (topo, warnings) = read_host_checked(root).expect("read");
    assert_eq!(topo.cpus.len(), 16);
    assert!(warnings[0].contains("not a CPU list"), "{warnings:?}");
}
