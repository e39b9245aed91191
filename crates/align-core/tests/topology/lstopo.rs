//! nri-align's sysfs reader against hwloc's `lstopo` (Debian package `hwloc`, installed by
//! hack/setup): on this machine's own /sys and on the fixture trees, both must see
//! the same PUs, cores, packages, NUMA nodes, memory and L3 groups. The hwloc XML importer is
//! checked against the same lstopo captures.

use std::path::{Path, PathBuf};
use test_support::lstopo;

use align_core::topology::{hwloc, read_host};

fn fixture(name: &str) -> PathBuf {
    test_support::repo_root()
        .join("tests/fixtures/sysfs")
        .join(name)
}

const FIXTURES: [&str; 3] = ["two-socket-smt", "memonly-bridge", "sparse-offline"];

#[test]
fn agrees_with_lstopo_on_this_host() {
    lstopo::assert_agrees(Path::new("/"));
}

#[test]
fn agrees_with_lstopo_on_fixture_trees() {
    for name in FIXTURES {
        lstopo::assert_agrees(&fixture(name));
    }
}

#[test]
fn hwloc_import_of_lstopo_capture_matches_the_reader() {
    for name in FIXTURES {
        let root = fixture(name);
        let xml = lstopo::lstopo_xml(&root);
        let imported = hwloc::import_str(&xml, name).expect("import lstopo XML");
        let read = read_host(&root).expect("read tree");
        let a = lstopo::view_from_topology(&imported);
        let b = lstopo::view_from_topology(&read);
        lstopo::compare(&root, &b, &a);
        assert_eq!(
            imported.offline_cpus, read.offline_cpus,
            "{name}: offline CPUs"
        );
        let dist = |t: &align_core::topology::Topology| -> Vec<Vec<u32>> {
            t.numa_nodes.iter().map(|n| n.distances.clone()).collect()
        };
        assert_eq!(dist(&imported), dist(&read), "{name}: distances");
        // Memory-only nodes and what backs them where hwloc 2.9 says (the GPU memory node of
        // memonly-bridge is `GPUMemory` to hwloc and named by numa_status to the reader; hwloc
        // 2.9 does not yet tag CXL nodes, the reader does).
        let memory_only = |t: &align_core::topology::Topology| -> Vec<(u32, Option<String>)> {
            t.numa_nodes
                .iter()
                .filter(|n| n.is_memory_only())
                .map(|n| (n.id, n.memory_kind.clone()))
                .collect()
        };
        let (imp, ours) = (memory_only(&imported), memory_only(&read));
        assert_eq!(
            imp.iter().map(|n| n.0).collect::<Vec<_>>(),
            ours.iter().map(|n| n.0).collect::<Vec<_>>(),
            "{name}: memory-only nodes"
        );
        for (a, b) in imp.iter().zip(&ours) {
            if a.1.as_deref() != Some("unknown") {
                assert_eq!(a, b, "{name}: memory kind");
            }
        }
        // lstopo sees PCI functions (not the bridges: fixtures carry no config space) and
        // network/RDMA devices, with the same locality as the reader.
        let gpus = |t: &align_core::topology::Topology| -> Vec<(String, Option<u32>)> {
            t.gpus
                .iter()
                .map(|g| (g.pci_bus_id.clone(), g.numa_node))
                .collect()
        };
        assert_eq!(gpus(&imported), gpus(&read), "{name}: GPUs");
        let nics =
            |t: &align_core::topology::Topology| -> Vec<(String, Option<String>, Option<u32>)> {
                t.nics
                    .iter()
                    .map(|n| (n.name.clone(), n.rdma_device.clone(), n.numa_node))
                    .collect()
            };
        assert_eq!(nics(&imported), nics(&read), "{name}: NICs");
    }
}

#[test]
fn comparison_catches_a_wrong_reading() {
    // The helper must fail when the two sides differ, or every test above proves nothing.
    let root = fixture("two-socket-smt");
    let mut topo = read_host(&root).expect("read");
    topo.cpus[3].core = 99;
    let ours = lstopo::view_from_topology(&topo);
    let theirs = lstopo::view_from_lstopo(&lstopo::lstopo_xml(&root));
    let caught = std::panic::catch_unwind(|| lstopo::compare(&root, &ours, &theirs));
    assert!(caught.is_err(), "a changed core id went unnoticed");
}
