//! Unit tests of the hwloc XML importer on small hand-written documents in the shape
//! `lstopo --of xml` writes (the real lstopo comparison lives in crates/align-core/tests/topology/lstopo.rs).

use super::*;
use crate::topology::PciKind;

/// Two packages with one NUMA node each plus a CPU-less HBM node, two NVIDIA GPUs behind one
/// switch on package 0 with two NVLinks between them, and a Mellanox NIC on package 1.
const TWO_GPU: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000001f" gp_index="1">
    <object type="NUMANode" os_index="2" cpuset="0x0" gp_index="90" local_memory="1073741824" subtype="HBM"/>
    <object type="Package" os_index="0" cpuset="0x00000003" gp_index="2">
      <object type="NUMANode" os_index="0" cpuset="0x00000003" gp_index="3" local_memory="2147483648">
        <page_type size="4096" count="10"/>
        <page_type size="2097152" count="16"/>
      </object>
      <object type="L3Cache" cpuset="0x00000003" gp_index="4" cache_size="1024" depth="3" cache_type="0">
        <object type="Core" os_index="5" cpuset="0x00000003" gp_index="5">
          <object type="PU" os_index="0" cpuset="0x00000001" gp_index="6"/>
          <object type="PU" os_index="1" cpuset="0x00000002" gp_index="7"/>
        </object>
      </object>
      <object type="Bridge" gp_index="20" bridge_type="0-1" depth="0" bridge_pci="0000:[16-1a]">
        <object type="Bridge" gp_index="21" bridge_type="1-1" depth="1" bridge_pci="0000:[17-1a]" pci_busid="0000:16:01.0" pci_type="0604 [8086:347a] [8086:0000] 04 00">
          <object type="Bridge" gp_index="22" bridge_type="1-1" depth="2" bridge_pci="0000:[18-1a]" pci_busid="0000:17:00.0" pci_type="0604 [10b5:c010] [10b5:c010] b0 00">
            <object type="Bridge" gp_index="23" bridge_type="1-1" depth="3" bridge_pci="0000:[19-19]" pci_busid="0000:18:00.0" pci_type="0604 [10b5:c010] [10b5:c010] b0 00">
              <object type="PCIDev" gp_index="24" pci_busid="0000:19:00.0" pci_type="0302 [10de:2330] [10de:16c1] a1 00">
                <object type="OSDev" gp_index="30" name="nvml0" osdev_type="1" subtype="NVML">
                  <info name="GPUModel" value="NVIDIA H100 80GB HBM3"/>
                  <info name="NVIDIAUUID" value="GPU-aaaa"/>
                </object>
              </object>
            </object>
            <object type="Bridge" gp_index="25" bridge_type="1-1" depth="3" bridge_pci="0000:[1a-1a]" pci_busid="0000:18:01.0" pci_type="0604 [10b5:c010] [10b5:c010] b0 00">
              <object type="PCIDev" gp_index="26" pci_busid="0000:1a:00.0" pci_type="0302 [10de:2330] [10de:16c1] a1 00">
                <object type="OSDev" gp_index="31" name="nvml1" osdev_type="1" subtype="NVML">
                  <info name="NVIDIAUUID" value="GPU-bbbb"/>
                </object>
              </object>
            </object>
          </object>
        </object>
      </object>
    </object>
    <object type="Package" os_index="1" cpuset="0x0000000c" gp_index="8">
      <object type="NUMANode" os_index="1" cpuset="0x0000000c" gp_index="9" local_memory="2147483648"/>
      <object type="Core" os_index="0" cpuset="0x0000000c" gp_index="10">
        <object type="PU" os_index="2" cpuset="0x00000004" gp_index="11"/>
        <object type="PU" os_index="3" cpuset="0x00000008" gp_index="12"/>
      </object>
      <object type="Bridge" gp_index="40" bridge_type="0-1" depth="0" bridge_pci="0000:[80-81]">
        <object type="Bridge" gp_index="41" bridge_type="1-1" depth="1" bridge_pci="0000:[81-81]" pci_busid="0000:80:01.0" pci_type="0604 [8086:347a] [8086:0000] 04 00">
          <object type="PCIDev" gp_index="42" pci_busid="0000:81:00.0" pci_type="0207 [15b3:1021] [15b3:0041] 00 00">
            <object type="OSDev" gp_index="43" name="ibp129s0" osdev_type="2"/>
            <object type="OSDev" gp_index="44" name="mlx5_0" osdev_type="3"/>
          </object>
          <object type="PCIDev" gp_index="45" pci_busid="0000:81:00.1" pci_type="0207 [15b3:1021] [15b3:0041] 00 00">
            <object type="OSDev" gp_index="46" name="mlx5_1" osdev_type="3"/>
          </object>
        </object>
      </object>
    </object>
  </object>
  <distances2 type="NUMANode" nbobjs="3" kind="5" name="NUMALatency" indexing="os">
    <indexes length="6">0 1 2 </indexes>
    <u64values length="9">10 21 30 21 10 </u64values>
    <u64values length="9">30 30 30 10 </u64values>
  </distances2>
  <distances2hetero nbobjs="3" kind="25" name="NVLinkBandwidth">
    <indexes length="30">OSDev:30 OSDev:31 Package:2 </indexes>
    <u64values length="40">1000000 50000 0 50000 1000000 </u64values>
    <u64values length="20">0 0 0 1000000 </u64values>
  </distances2hetero>
</topology>
"#;

#[test]
fn imports_cpus_nodes_and_distances() {
    let t = import_str(TWO_GPU, "test").expect("import");
    let ids: Vec<u32> = t.cpus.iter().map(|c| c.id).collect();
    assert_eq!(ids, vec![0, 1, 2, 3]);
    assert_eq!(t.offline_cpus.to_string(), "4");
    let c1 = &t.cpus[1];
    assert_eq!((c1.package, c1.core, c1.numa_node), (0, 5, 0));
    assert_eq!(c1.thread_siblings.to_string(), "0-1");
    assert_eq!(c1.l3_group, Some(0));
    assert_eq!(t.cpus[2].l3_group, None);
    assert_eq!(t.cpus[3].numa_node, 1);
    let node_ids: Vec<u32> = t.numa_nodes.iter().map(|n| n.id).collect();
    assert_eq!(node_ids, vec![0, 1, 2]);
    assert_eq!(t.numa_nodes[0].cpus.to_string(), "0-1");
    assert_eq!(t.numa_nodes[0].memory_bytes, 2 << 30);
    assert_eq!(t.numa_nodes[0].hugepages.len(), 1);
    assert_eq!(t.numa_nodes[0].hugepages[0].size_kb, 2048);
    assert_eq!(t.numa_nodes[0].hugepages[0].total, 16);
    let hbm = &t.numa_nodes[2];
    assert!(hbm.is_memory_only());
    assert_eq!(hbm.memory_kind.as_deref(), Some("hbm"));
    assert_eq!(t.numa_nodes[0].distances, vec![10, 21, 30]);
    assert_eq!(t.numa_nodes[2].distances, vec![30, 30, 10]);
}

#[test]
fn imports_pci_gpus_nics_and_nvlink() {
    let t = import_str(TWO_GPU, "test").expect("import");
    let gpu0 = t.pci("0000:19:00.0").expect("gpu0");
    assert_eq!(gpu0.kind, PciKind::Gpu);
    assert_eq!(gpu0.class, 0x030200);
    assert_eq!(
        gpu0.bridges,
        vec!["0000:18:00.0", "0000:17:00.0", "0000:16:01.0"]
    );
    assert_eq!(gpu0.root_complex, "pci0000:16");
    assert_eq!(gpu0.numa_node, Some(0));
    assert_eq!(t.gpus.len(), 2);
    assert_eq!(t.gpus[0].uuid.as_deref(), Some("GPU-aaaa"));
    assert_eq!(t.gpus[0].name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(t.gpus[1].pci_bus_id, "0000:1a:00.0");
    assert_eq!(
        t.pcie_level("0000:19:00.0", "0000:1a:00.0"),
        crate::topology::PcieLevel::SingleSwitch
    );
    assert_eq!(
        t.pcie_level("0000:19:00.0", "0000:81:00.0"),
        crate::topology::PcieLevel::CrossSocket
    );
    let links = t.gpu_links.as_ref().expect("nvlink matrix");
    assert_eq!(links.nvlink, vec![vec![0, 2], vec![2, 0]]);
    assert!(!links.nvswitch);
    let names: Vec<&str> = t.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, vec!["ibp129s0", "mlx5_1"]);
    assert_eq!(t.nics[0].rdma_device.as_deref(), Some("mlx5_0"));
    assert_eq!(t.nics[0].numa_node, Some(1));
    assert_eq!(t.nics[1].rdma_device.as_deref(), Some("mlx5_1"));
}

#[test]
fn nvswitch_peers_give_all_to_all_links() {
    let xml = TWO_GPU.replace(
        r#"<object type="PCIDev" gp_index="45""#,
        r#"<object type="PCIDev" gp_index="45" subtype="NVSwitch""#,
    );
    let xml = xml.replace(
        r#"<distances2hetero nbobjs="3" kind="25" name="NVLinkBandwidth">
    <indexes length="30">OSDev:30 OSDev:31 Package:2 </indexes>
    <u64values length="40">1000000 50000 0 50000 1000000 </u64values>
    <u64values length="20">0 0 0 1000000 </u64values>"#,
        r#"<distances2hetero nbobjs="3" kind="25" name="NVLinkBandwidth">
    <indexes length="30">OSDev:30 OSDev:31 PCIDev:45 </indexes>
    <u64values length="40">1000000 0 150000 0 1000000 100000 </u64values>
    <u64values length="20">150000 100000 1000000 </u64values>"#,
    );
    let t = import_str(&xml, "test").expect("import");
    let links = t.gpu_links.as_ref().expect("links");
    assert!(links.nvswitch);
    assert_eq!(links.nvlink, vec![vec![0, 4], vec![4, 0]]);
}

#[test]
fn hwloc_bitmaps() {
    let s = parse_hwloc_bitmap("0x00000303,0x03030000,,0x03030303").expect("parse");
    assert!(s.contains(0) && s.contains(1) && s.contains(8) && s.contains(25));
    assert!(s.contains(64 + 16) && s.contains(96) && s.contains(96 + 9));
    assert!(!s.contains(32));
    assert_eq!(s.len(), 8 + 4 + 4);
    assert_eq!(parse_hwloc_bitmap("0x0").map(|s| s.len()), Some(0));
    assert!(parse_hwloc_bitmap("0xzz").is_none());
}

#[test]
fn rejects_non_hwloc_documents() {
    assert!(matches!(
        import_str("<a/>", "x"),
        Err(HwlocError::NotHwloc(_))
    ));
    assert!(matches!(import_str("<a", "x"), Err(HwlocError::Xml(_))));
    let no_pu = r#"<topology version="2.0"><object type="Machine" os_index="0"/></topology>"#;
    assert!(matches!(
        import_str(no_pu, "x"),
        Err(HwlocError::NotHwloc(_))
    ));
}

#[test]
fn odd_attributes_degrade_instead_of_panicking() {
    let xml = TWO_GPU
        .replace(r#"pci_busid="0000:81:00.1""#, r#"pci_busid="éé""#)
        .replace(r#"bridge_pci="0000:[80-81]""#, r#"bridge_pci="é""#)
        .replace(r#"local_memory="2147483648"/>"#, r#"local_memory="lots"/>"#);
    let t = import_str(&xml, "odd").expect("import");
    assert_eq!(t.cpus.len(), 4);
    assert_eq!(t.numa_nodes[1].memory_bytes, 0);
    assert!(t.pci("éé").is_some());
}

#[test]
fn report_shows_nvlink_counts_and_json_round_trips() {
    let t = import_str(TWO_GPU, "test").expect("import");
    let text = crate::topology::report::render(&t);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|cells| cells.first() == Some(&"GPU0") && cells.get(1) == Some(&"X"))
        .collect();
    assert_eq!(rows.len(), 1, "{text}");
    // GPU0: self, two NVLinks to GPU1, then the two NICs across the socket interconnect.
    assert_eq!(&rows[0][1..5], &["X", "NV2", "SYS", "SYS"], "{text}");
    assert!(text.contains("memory-only, hbm"), "{text}");
    let json = crate::topology::report::to_json(&t).expect("json");
    let back: Topology = serde_json::from_str(&json).expect("parse back");
    assert_eq!(back, t);
}
