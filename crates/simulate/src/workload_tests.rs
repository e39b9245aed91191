use super::*;

#[test]
fn quantities() {
    assert_eq!(cpu_milli(&Quantity::Text("500m".into())), Some(500));
    assert_eq!(cpu_milli(&Quantity::Text("16".into())), Some(16000));
    assert_eq!(cpu_milli(&Quantity::Number(1.5)), Some(1500));
    assert_eq!(cpu_milli(&Quantity::Text("lots".into())), None);
    assert_eq!(bytes(&Quantity::Text("64Gi".into())), Some(64 << 30));
    assert_eq!(bytes(&Quantity::Text("1G".into())), Some(1_000_000_000));
    assert_eq!(bytes(&Quantity::Number(4096.0)), Some(4096));
    assert_eq!(bytes(&Quantity::Text("-1Gi".into())), None);
    // Out of range or not a number: an error, never a saturated request.
    assert_eq!(bytes(&Quantity::Text("99999999999Ti".into())), None);
    assert_eq!(bytes(&Quantity::Number(1e30)), None);
    assert_eq!(cpu_milli(&Quantity::Number(1e30)), None);
    assert_eq!(cpu_milli(&Quantity::Text("inf".into())), None);
    assert_eq!(cpu_milli(&Quantity::Text("NaN".into())), None);
}

/// A DRA-allocated accelerator on node 1 of a DGX-1 (as the topology lists a function that is
/// neither GPU nor NIC).
fn dgx1_with_accelerator() -> Topology {
    use align_core::topology::{PciDevice, PciKind};
    let mut topo = align_core::topology::testing::shipped("dgx1-v100");
    topo.pci_devices.push(PciDevice {
        bus_id: "0000:c0:00.0".into(),
        vendor: 0x1d0f,
        device: 0xf010,
        class: 0x120000,
        kind: PciKind::Other,
        numa_node: Some(1),
        sysfs_numa_node: None,
        bridges: vec!["0000:bf:00.0".into()],
        root_complex: "pci0000:bf".into(),
    });
    topo
}

#[test]
fn a_workload_mixes_dra_devices_with_device_plugin_gpus() {
    use crate::{replay, Strategy};
    use align_core::placement::PlacementConfig;
    let wl = Workload::parse(
        r#"
pods:
  - name: gpus
    containers: [{name: t, cpu: "4", memory: 8Gi, gpus: 2}]
  - name: accel
    annotations: {policy.nri-align.io/pod: single-numa-node}
    containers: [{name: t, cpu: "4", memory: 8Gi, devices: ["0000:C0:00.0"]}]
  - name: both
    containers: [{name: t, cpu: "2", memory: 4Gi, gpus: 1, devices: ["0000:c0:00.0"]}]
"#,
    )
    .expect("workload");
    let topo = std::sync::Arc::new(dgx1_with_accelerator());
    let node1 = topo.numa_nodes[1].cpus.clone();
    let ours = replay(
        std::sync::Arc::clone(&topo),
        PlacementConfig::default(),
        &wl,
        Strategy::NriAlign,
    )
    .expect("replay");
    assert_eq!(ours.summary.pods_admitted, 3, "{:?}", ours.decisions);
    let accel = &ours.decisions[1];
    // The accelerator's node, under single-numa-node, and it is recorded on the decision.
    assert!(accel.admitted && accel.aligned, "{accel:?}");
    assert_eq!(accel.mems, "1", "{accel:?}");
    let cpus = align_core::topology::IdSet::parse_list(&accel.cpus).expect("cpus");
    assert!(cpus.is_subset(&node1), "{accel:?}");
    assert_eq!(accel.devices, ["0000:c0:00.0"]);
    // A generic device is never held: the third pod shares it, with a device-plugin GPU.
    let both = &ours.decisions[2];
    assert!(both.admitted, "{both:?}");
    assert_eq!((both.gpus.len(), both.devices.len()), (1, 1), "{both:?}");
    // The kubelet's managers never see DRA devices: its decision records none.
    let kubelet = replay(topo, PlacementConfig::default(), &wl, Strategy::Kubelet).expect("replay");
    assert!(kubelet.decisions.iter().all(|d| d.devices.is_empty()));
}

#[test]
fn dra_devices_must_be_functions_of_the_topology_and_not_gpus() {
    use crate::{replay, Strategy};
    let topo = std::sync::Arc::new(dgx1_with_accelerator());
    let gpu = topo.gpus[0].pci_bus_id.clone();
    for (device, why) in [
        ("0000:ee:00.0", "no PCI function"),
        (gpu.as_str(), "is a GPU"),
    ] {
        let wl = Workload::parse(&format!(
            "pods: [{{name: p, containers: [{{name: t, cpu: \"1\", devices: [\"{device}\"]}}]}}]"
        ))
        .expect("workload");
        let e = replay(
            std::sync::Arc::clone(&topo),
            align_core::placement::PlacementConfig::default(),
            &wl,
            Strategy::NriAlign,
        )
        .expect_err("refused");
        assert!(e.to_string().contains(why), "{e}");
    }
}

#[test]
fn a_workload_of_nested_aliases_is_refused_before_it_expands() {
    let mut text = format!("x0: &l0 [{}]\n", ["\"lol\""; 10].join(", "));
    for i in 1..=9 {
        let row = vec![format!("*l{}", i - 1); 10].join(", ");
        text.push_str(&format!("x{i}: &l{i} [{row}]\n"));
    }
    text.push_str("pods: *l9\n");
    let err = Workload::parse(&text).expect_err("a bomb").to_string();
    assert!(err.contains("YAML aliases"), "{err}");
}
