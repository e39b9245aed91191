//! Round trips of emulated hosts: every shipped description is materialised as a sysfs/proc
//! tree plus NVML fixture, and what comes back (through the fake NVML library and nvml-wrapper,
//! through hwloc's `lstopo`, and through the sysfs reader) must be the
//! description's own topology (`HostDesc::to_topology`).
//!
//! Needs `lstopo` (Debian package `hwloc`): `hack/setup` installs it.

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use align_core::topology::desc::HostDesc;
use align_core::topology::emulate::emulate;
use align_core::topology::nvml::{enrich, NvmlStatus};
use align_core::topology::{CpuSet, PcieLevel, Topology};

/// The fake NVML keeps one fixture per process and reads `FAKE_NVML_FIXTURE` at init: tests
/// that use it take this lock.
static NVML_LOCK: Mutex<()> = Mutex::new(());

fn shipped() -> Vec<HostDesc> {
    let names = HostDesc::shipped_names();
    assert!(names.len() >= 8, "shipped descriptions: {names:?}");
    names
        .iter()
        .map(|n| HostDesc::load(n).unwrap_or_else(|e| panic!("{n}: {e}")))
        .collect()
}

/// Every shipped description, emulated once per test process (the 1024-CPU tree takes a while
/// on a busy disk) and shared by the tests, which only read it.
fn trees() -> &'static [(HostDesc, tempfile::TempDir)] {
    static TREES: OnceLock<Vec<(HostDesc, tempfile::TempDir)>> = OnceLock::new();
    TREES.get_or_init(|| {
        shipped()
            .into_iter()
            .map(|desc| {
                let dir = tempfile::tempdir().expect("tempdir");
                emulate(&desc, dir.path()).unwrap_or_else(|e| panic!("{}: {e}", desc.name));
                (desc, dir)
            })
            .collect()
    })
}

/// The topology without what only NVML knows, as the PCI tree gives it.
fn without_nvml(t: &Topology) -> Topology {
    let mut t = t.clone();
    for g in &mut t.gpus {
        g.uuid = None;
        g.minor = None;
        g.name = None;
        g.mig_enabled = None;
        g.mig_devices.clear();
    }
    t.gpu_links = None;
    t
}

fn with_fixture<T>(dir: &Path, f: impl FnOnce() -> T) -> T {
    let _guard = NVML_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    std::env::set_var("FAKE_NVML_FIXTURE", dir.join("nvml.json"));
    f()
}

#[test]
fn shipped_descriptions_have_the_advertised_shapes() {
    let by_name = |n: &str| {
        HostDesc::load(n)
            .unwrap_or_else(|e| panic!("{n}: {e}"))
            .to_topology()
    };
    let h100 = by_name("dgx-h100");
    assert_eq!(h100.cpus.len(), 224);
    assert_eq!(h100.numa_nodes.len(), 2);
    assert_eq!(h100.gpus.len(), 8);
    let links = h100.gpu_links.as_ref().expect("links");
    assert!(links.nvswitch);
    assert!(links.nvlink[0][7] == 18 && links.nvlink[3][4] == 18);
    // Each compute NIC shares a PCIe switch with its GPU; GPUs on one socket meet at the node.
    let gpu0 = &h100.gpus[0].pci_bus_id;
    let ib0 = h100
        .nics
        .iter()
        .find(|n| n.name == "ibp24s0")
        .expect("ibp24s0");
    let ib0_bus = ib0.pci_bus_id.as_deref().expect("bus id");
    assert_eq!(h100.pcie_level(gpu0, ib0_bus), PcieLevel::SingleSwitch);
    assert_eq!(
        h100.pcie_level(gpu0, &h100.gpus[1].pci_bus_id),
        PcieLevel::SameNuma
    );
    assert_eq!(
        h100.pcie_level(gpu0, &h100.gpus[4].pci_bus_id),
        PcieLevel::CrossSocket
    );
    assert_eq!(
        h100.nics.iter().filter(|n| n.rdma_device.is_some()).count(),
        12
    );

    let v100 = by_name("dgx1-v100");
    let m = &v100.gpu_links.as_ref().expect("links").nvlink;
    assert_eq!((m[0][1], m[0][3], m[0][5]), (1, 2, 0));
    assert!(m.iter().all(|row| row.iter().sum::<u32>() == 6));
    assert_eq!(
        v100.pcie_level(&v100.gpus[0].pci_bus_id, &v100.gpus[2].pci_bus_id),
        PcieLevel::HostBridge
    );

    let pcie = by_name("pcie-4gpu");
    assert!(pcie
        .gpu_links
        .as_ref()
        .expect("links")
        .nvlink
        .iter()
        .flatten()
        .all(|&l| l == 0));
    assert_eq!(
        pcie.pcie_level(&pcie.gpus[0].pci_bus_id, &pcie.gpus[1].pci_bus_id),
        PcieLevel::SingleSwitch
    );

    let epyc = by_name("epyc-nps4");
    assert_eq!(epyc.numa_nodes.len(), 8);
    assert!(epyc.gpus.is_empty());
    assert_eq!(epyc.distance(0, 1), 11);
    assert_eq!(epyc.distance(0, 4), 32);
    let l3: std::collections::BTreeSet<u32> = epyc.cpus.iter().filter_map(|c| c.l3_group).collect();
    assert_eq!(l3.len(), 16);

    let gh = by_name("grace-hopper");
    assert_eq!(gh.cpus.len(), 72);
    assert!(gh.numa_nodes[1].is_memory_only());
    assert_eq!(gh.numa_nodes[1].memory_kind.as_deref(), Some("gpu"));
    assert_eq!(gh.gpus[0].numa_node, Some(0));
    // Sequential numbering without SMT: every CPU is its own core.
    assert!(gh.cpus.iter().all(|c| c.thread_siblings.len() == 1));

    let big = by_name("numa16-1024");
    assert_eq!((big.cpus.len(), big.numa_nodes.len()), (1024, 16));

    let vm = by_name("vm-2s4n");
    assert_eq!(vm.cpus.len(), 8);
    assert_eq!(vm.cpu_nodes().len(), 4);
    assert_eq!(
        vm.node(0).map(|n| n.cpus.to_list_string()),
        Some("0-1".to_string())
    );
    assert_eq!((vm.distance(0, 1), vm.distance(0, 2)), (12, 21));

    let local = by_name("localhost-1n");
    assert_eq!(local.online_cpus(), "0-1".parse::<CpuSet>().expect("list"));
    assert_eq!((local.gpus.len(), local.nics.len()), (2, 1));
}

#[test]
fn fake_nvml_serves_every_shipped_description_through_nvml_wrapper() {
    let lib = test_support::fake_nvml();
    for (desc, dir) in trees() {
        let expected = desc.to_topology();
        let mut topo = without_nvml(&expected);
        let status = with_fixture(dir.path(), || enrich(&mut topo, Some(&lib)))
            .unwrap_or_else(|e| panic!("{}: {e}", desc.name));
        let NvmlStatus::Present {
            gpu_count,
            common_ancestor,
            ..
        } = status
        else {
            panic!("{}: NVML absent", desc.name);
        };
        assert_eq!(gpu_count as usize, expected.gpus.len(), "{}", desc.name);
        assert_eq!(topo, expected, "{}", desc.name);
        // NVML's common ancestors agree with the PCI tree.
        for (i, a) in expected.gpus.iter().enumerate() {
            for (j, b) in expected.gpus.iter().enumerate() {
                let want = expected.pcie_level(&a.pci_bus_id, &b.pci_bus_id);
                assert_eq!(
                    common_ancestor[i][j],
                    Some(want),
                    "{} GPU{i}-GPU{j}",
                    desc.name
                );
            }
        }
    }
}

#[test]
fn nvml_wrapper_reads_the_fixture_fields() {
    use nvml_wrapper::enum_wrappers::device::TopologyLevel;
    let lib = test_support::fake_nvml();
    let desc = HostDesc::load("grace-hopper").expect("grace-hopper");
    let dir = tempfile::tempdir().expect("tempdir");
    emulate(&desc, dir.path()).expect("emulate");
    with_fixture(dir.path(), || {
        let nvml = nvml_wrapper::Nvml::builder()
            .lib_path(lib.as_os_str())
            .init()
            .expect("init");
        assert_eq!(nvml.device_count().expect("count"), 1);
        let dev = nvml.device_by_index(0).expect("handle");
        // GPU memory is NUMA node 1; CPU locality is node 0's 72 CPUs.
        assert_eq!(dev.numa_node_id().expect("numa"), 1);
        let cpus = dev.cpu_affinity(2).expect("cpu affinity");
        assert_eq!((cpus[0], cpus[1]), (u64::MAX, 0xff));
        let bus = dev.pci_info().expect("pci").bus_id;
        let same = nvml
            .device_by_pci_bus_id(bus.to_lowercase())
            .expect("by bus id");
        assert_eq!(same.uuid().expect("uuid"), dev.uuid().expect("uuid"));
        assert!(dev
            .topology_nearest_gpus(TopologyLevel::System)
            .expect("nearest")
            .is_empty());
        assert!(!dev.link_wrapper_for(0).is_active().expect("link 0"));
        assert!(dev.link_wrapper_for(18).is_active().is_err());
        // What the fixture does not know is "not supported", as on a real driver.
        assert!(matches!(
            dev.is_multi_gpu_board(),
            Err(nvml_wrapper::error::NvmlError::NotSupported)
        ));
    });
    let desc = HostDesc::load("dgx1-v100").expect("dgx1-v100");
    let dir = tempfile::tempdir().expect("tempdir");
    emulate(&desc, dir.path()).expect("emulate");
    with_fixture(dir.path(), || {
        let nvml = nvml_wrapper::Nvml::builder()
            .lib_path(lib.as_os_str())
            .init()
            .expect("init");
        let d0 = nvml.device_by_index(0).expect("gpu0");
        let d5 = nvml.device_by_index(5).expect("gpu5");
        let d3 = nvml.device_by_index(3).expect("gpu3");
        use nvml_wrapper::enum_wrappers::device::P2pCapabilitiesIndex as P;
        use nvml_wrapper::enum_wrappers::device::P2pStatus as S;
        assert_eq!(d0.p2p_status(&d3, P::NvLink).expect("p2p"), S::Ok);
        assert_ne!(d0.p2p_status(&d5, P::NvLink).expect("p2p"), S::Ok);
        assert_eq!(
            nvml.topology_common_ancestor(&d0, &d5).expect("level"),
            TopologyLevel::System
        );
        // GPU0's pair under the same switch, then the other switch of its socket.
        let near = d0
            .topology_nearest_gpus(TopologyLevel::Single)
            .expect("nearest");
        assert_eq!(near.len(), 1);
        assert_eq!(near[0].index().expect("index"), 1);
    });
}

#[test]
fn nvml_wrapper_walks_mig_devices_to_their_parent() {
    use nvml_wrapper::error::NvmlError as E;
    let lib = test_support::fake_nvml();
    let desc = HostDesc::load("dgx-a100-mig").expect("dgx-a100-mig");
    let dir = tempfile::tempdir().expect("tempdir");
    emulate(&desc, dir.path()).expect("emulate");
    let first = "MIG-3f1c8d52-7a0e-5b9b-a4c6-2e8f10d7b001";
    with_fixture(dir.path(), || {
        let nvml = nvml_wrapper::Nvml::builder()
            .lib_path(lib.as_os_str())
            .init()
            .expect("init");
        let gpu0 = nvml.device_by_index(0).expect("gpu0");
        assert_eq!(gpu0.mig_mode().expect("mode").current, 1);
        assert_eq!(gpu0.mig_device_count().expect("max MIG devices"), 7);
        assert!(!gpu0.mig_is_mig_device_handle().expect("is MIG"));
        let m0 = gpu0.mig_device_by_index(0).expect("slot 0");
        assert!(m0.mig_is_mig_device_handle().expect("is MIG"));
        assert_eq!(m0.uuid().expect("uuid"), first);
        assert_eq!(
            m0.name().expect("name"),
            "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
        );
        let parent = m0.mig_parent_device().expect("parent");
        assert_eq!(parent.uuid().expect("uuid"), gpu0.uuid().expect("uuid"));
        // Four devices configured: slot 4 is empty, slot 7 past the maximum.
        assert!(matches!(gpu0.mig_device_by_index(4), Err(E::NotFound)));
        assert!(matches!(gpu0.mig_device_by_index(7), Err(E::InvalidArg)));
        // A MIG handle is found by its UUID too, and is no GPU for GPU queries.
        let by_uuid = nvml.device_by_uuid(first).expect("by MIG uuid");
        assert_eq!(by_uuid.uuid().expect("uuid"), first);
        assert!(m0.pci_info().is_err());
        // A GPU without MIG mode has no MIG devices.
        let gpu1 = nvml.device_by_index(1).expect("gpu1");
        assert_eq!(gpu1.mig_mode().expect("mode").current, 0);
        assert!(matches!(gpu1.mig_device_count(), Err(E::NotSupported)));
    });
    // The reader keeps each GPU's MIG devices: what the description says, through NVML.
    let expected = desc.to_topology();
    let mut topo = without_nvml(&expected);
    with_fixture(dir.path(), || enrich(&mut topo, Some(&lib))).expect("enrich");
    assert_eq!(topo, expected);
    let slots: Vec<usize> = topo.gpus.iter().map(|g| g.mig_devices.len()).collect();
    assert_eq!(slots, vec![4, 0, 0, 0, 7, 0, 0, 0]);
    let m = &topo.gpus[0].mig_devices[0];
    assert_eq!(
        (m.index, m.uuid.as_str(), m.profile.as_deref()),
        (0, first, Some("3g.40gb"))
    );
    // Generated UUIDs are distinct and MIG-shaped.
    let mut all: Vec<&str> = topo
        .gpus
        .iter()
        .flat_map(|g| g.mig_devices.iter().map(|m| m.uuid.as_str()))
        .collect();
    assert!(
        all.iter().all(|u| u.starts_with("MIG-") && u.len() == 40),
        "{all:?}"
    );
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 11);
}

#[test]
fn emulated_trees_match_lstopo() {
    let lstopo = Command::new("lstopo-no-graphics").arg("--version").output();
    assert!(
        lstopo.is_ok_and(|o| o.status.success()),
        "lstopo-no-graphics missing: run hack/setup"
    );
    for (desc, dir) in trees() {
        assert_lstopo_agrees(desc, dir.path());
    }
    // Offline CPUs (a whole core among them), isolated CPUs, -1 NUMA nodes in sysfs.
    let awkward = HostDesc::from_yaml(AWKWARD).expect("awkward");
    let dir = tempfile::tempdir().expect("tempdir");
    emulate(&awkward, dir.path()).expect("emulate");
    assert_lstopo_agrees(&awkward, dir.path());
}

/// A host with what real trees throw at readers.
const AWKWARD: &str = "name: awkward\nsockets: 2\ncores_per_numa: 4\nthreads_per_core: 2\n\
    memory_per_numa: 8Gi\noffline_cpus: \"6,14\"\nisolated_cpus: \"3,11\"\n\
    pcie_switches: [{id: s, numa_node: 1}, {id: t, numa_node: 1, parent: s}]\n\
    gpus: [{switch: s, hide_numa_node: true}, {switch: t}, {numa_node: 1}]\n\
    nics: [{name: eth9, numa_node: 0, hide_numa_node: true}]\n";

fn assert_lstopo_agrees(desc: &HostDesc, dir: &Path) {
    {
        let expected = desc.to_topology();
        let hw = lstopo_summary(dir);
        assert_eq!(hw.pus, expected.online_cpus(), "{} PUs", desc.name);
        let cores: std::collections::BTreeSet<CpuSet> = expected
            .cpus
            .iter()
            .map(|c| c.thread_siblings.clone())
            .collect();
        assert_eq!(hw.cores, cores, "{} cores", desc.name);
        let packages: std::collections::BTreeSet<CpuSet> = (0..desc.sockets)
            .map(|p| {
                expected
                    .cpus
                    .iter()
                    .filter(|c| c.package == p)
                    .map(|c| c.id)
                    .collect()
            })
            .collect();
        assert_eq!(hw.packages, packages, "{} packages", desc.name);
        // hwloc gives a CPU-less node the CPUs of where it attaches (the closest CPU node by
        // distance; for GPU memory, the GPU's locality) and marks GPU memory as such.
        let nodes: Vec<(u32, CpuSet, u64, bool)> = expected
            .numa_nodes
            .iter()
            .map(|n| {
                let locality = match n.id.checked_sub(desc.cpu_node_count()) {
                    Some(m) => {
                        let at = desc.memory_only_nodes[m as usize].attached_to;
                        expected
                            .node(at)
                            .map(|a| a.cpus.clone())
                            .unwrap_or_default()
                    }
                    None => n.cpus.clone(),
                };
                let gpu = n.memory_kind.as_deref() == Some("gpu");
                (n.id, locality, n.memory_bytes, gpu)
            })
            .collect();
        assert_eq!(hw.nodes, nodes, "{} NUMA nodes", desc.name);
        let mut pci: Vec<String> = expected
            .gpus
            .iter()
            .map(|g| g.pci_bus_id.clone())
            .chain(expected.nics.iter().filter_map(|n| n.pci_bus_id.clone()))
            .collect();
        pci.sort();
        assert_eq!(hw.endpoints, pci, "{} GPUs and NICs", desc.name);
    }
}

struct LstopoSummary {
    pus: CpuSet,
    cores: std::collections::BTreeSet<CpuSet>,
    packages: std::collections::BTreeSet<CpuSet>,
    /// (os index, cpus, local memory bytes, GPU memory), sorted by os index.
    nodes: Vec<(u32, CpuSet, u64, bool)>,
    /// Bus ids of PCI functions that are not bridges, sorted.
    endpoints: Vec<String>,
}

/// Runs lstopo on the tree and reads its XML with roxmltree.
fn lstopo_summary(root: &Path) -> LstopoSummary {
    let out = Command::new("lstopo-no-graphics")
        .args(["--of", "xml", "-"])
        .env("HWLOC_FSROOT", root)
        // The x86 backend would read this machine's CPUID instead of the tree.
        .env("HWLOC_COMPONENTS", "-x86")
        // hwloc hides GPU memory nodes (Grace Hopper) unless asked to keep them.
        .env("HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES", "1")
        .output()
        .expect("run lstopo");
    assert!(
        out.status.success(),
        "lstopo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let xml = String::from_utf8(out.stdout).expect("utf-8 xml");
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(&xml, opts).expect("lstopo xml");
    let mut s = LstopoSummary {
        pus: CpuSet::new(),
        cores: Default::default(),
        packages: Default::default(),
        nodes: Vec::new(),
        endpoints: Vec::new(),
    };
    let cpuset = |n: &roxmltree::Node| hwloc_set(n.attribute("cpuset").unwrap_or("0x0"));
    for n in doc.descendants().filter(|n| n.has_tag_name("object")) {
        let os: u32 = n
            .attribute("os_index")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        match n.attribute("type") {
            Some("PU") => {
                s.pus.insert(os);
            }
            Some("Core") => {
                s.cores.insert(cpuset(&n));
            }
            Some("Package") => {
                s.packages.insert(cpuset(&n));
            }
            Some("NUMANode") => {
                let mem = n
                    .attribute("local_memory")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let gpu = n.attribute("subtype") == Some("GPUMemory");
                s.nodes.push((os, cpuset(&n), mem, gpu));
            }
            Some("PCIDev") => {
                if let Some(b) = n.attribute("pci_busid") {
                    s.endpoints.push(b.to_string());
                }
            }
            _ => {}
        }
    }
    s.nodes.sort_by_key(|n| n.0);
    s.endpoints.sort();
    s
}

/// hwloc's bitmap form: comma-separated 32-bit hex words, most significant first; an empty
/// word is zero.
fn hwloc_set(s: &str) -> CpuSet {
    let words: Vec<&str> = s.split(',').collect();
    let mut set = CpuSet::new();
    for (k, w) in words.iter().rev().enumerate() {
        let hex = w.trim_start_matches("0x");
        let v = if hex.is_empty() {
            0
        } else {
            u32::from_str_radix(hex, 16).expect("hex word")
        };
        for b in 0..32 {
            if v & (1 << b) != 0 {
                set.insert(k as u32 * 32 + b);
            }
        }
    }
    set
}

#[test]
fn emulate_refuses_to_mix_two_hosts_in_one_directory() {
    let desc = HostDesc::load("localhost-1n").expect("localhost-1n");
    let dir = tempfile::tempdir().expect("tempdir");
    emulate(&desc, dir.path()).expect("first");
    let err = emulate(&desc, dir.path()).expect_err("second must fail");
    assert!(err.to_string().contains("already exists"), "{err}");
}

// The emulated trees read back through the sysfs reader: what the description says is what a
// node agent reading that tree finds.
mod sysfs_roundtrip {
    use super::*;
    use align_core::topology::read_host;

    /// What a sysfs tree cannot carry, or carries in a reader-specific shape, made comparable:
    /// the source label, memory-only nodes' kind (sysfs has no field for it: only its presence is
    /// compared), NICs in name order, and only the PCI functions of GPUs and NICs.
    fn comparable(t: &Topology) -> Topology {
        let mut t = t.clone();
        t.source = String::new();
        for n in &mut t.numa_nodes {
            n.memory_kind = n.memory_kind.as_ref().map(|_| "memory-only".to_string());
        }
        // Nodes with neither CPUs nor memory (GB200 and GH200 keep several for MIG) are no
        // place anything can go: the reader leaves them out, with their distance columns.
        let keep_node: Vec<bool> = t
            .numa_nodes
            .iter()
            .map(|n| !n.cpus.is_empty() || n.memory_bytes > 0)
            .collect();
        t.numa_nodes = std::mem::take(&mut t.numa_nodes)
            .into_iter()
            .zip(&keep_node)
            .filter(|(_, k)| **k)
            .map(|(mut n, _)| {
                n.distances = n
                    .distances
                    .iter()
                    .zip(&keep_node)
                    .filter(|(_, k)| **k)
                    .map(|(d, _)| *d)
                    .collect();
                n
            })
            .collect();
        t.nics.sort_by(|a, b| a.name.cmp(&b.name));
        let keep: Vec<String> = t
            .gpus
            .iter()
            .map(|g| g.pci_bus_id.clone())
            .chain(t.nics.iter().filter_map(|n| n.pci_bus_id.clone()))
            .collect();
        t.pci_devices.retain(|d| keep.contains(&d.bus_id));
        t
    }

    #[test]
    fn every_shipped_description_round_trips_through_sysfs_and_nvml() {
        let lib = test_support::fake_nvml();
        for (desc, dir) in trees() {
            let expected = desc.to_topology();
            let mut read = read_host(dir.path()).unwrap_or_else(|e| panic!("{}: {e}", desc.name));
            // Without NVML: the PCI tree alone gives the GPUs' places but no UUIDs or links.
            assert_eq!(
                comparable(&without_nvml(&read)),
                comparable(&without_nvml(&expected)),
                "{} (sysfs only)",
                desc.name
            );
            with_fixture(dir.path(), || enrich(&mut read, Some(&lib)))
                .unwrap_or_else(|e| panic!("{}: {e}", desc.name));
            assert_eq!(comparable(&read), comparable(&expected), "{}", desc.name);
        }
    }

    #[test]
    fn awkward_trees_round_trip() {
        // Offline and isolated CPUs, a hidden (-1) GPU NUMA node, no NVLink.
        let desc = HostDesc::from_yaml(AWKWARD).expect("desc");
        let dir = tempfile::tempdir().expect("tempdir");
        emulate(&desc, dir.path()).expect("emulate");
        let read = read_host(dir.path()).expect("read");
        let expected = desc.to_topology();
        assert_eq!(read.offline_cpus, expected.offline_cpus);
        assert_eq!(read.isolated_cpus, expected.isolated_cpus);
        assert_eq!(
            comparable(&without_nvml(&read)),
            comparable(&without_nvml(&expected))
        );
    }
}
