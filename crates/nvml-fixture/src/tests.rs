use super::*;

#[test]
fn bus_ids_parse_in_both_forms_and_convert_to_nvml_form() {
    assert_eq!(parse_bus_id("00000000:1B:00.0"), Some((0, 0x1b, 0, 0)));
    assert_eq!(parse_bus_id("0000:1b:00.1"), Some((0, 0x1b, 0, 1)));
    assert_eq!(parse_bus_id("garbage"), None);
    assert_eq!(nvml_bus_id("0000:1b:00.0"), "00000000:1B:00.0");
}

#[test]
fn a_fixture_round_trips_through_json() {
    let fx = Fixture {
        host: "h".into(),
        driver_version: "550.54.15".into(),
        nvml_version: "12.550.54.15".into(),
        cuda_driver_version: 12040,
        gpus: vec![FixtureGpu {
            index: 0,
            name: "GPU".into(),
            uuid: "GPU-0".into(),
            pci_bus_id: "00000000:1B:00.0".into(),
            pci_device_id: 0x2330_10de,
            pci_subsystem_id: 0,
            minor: 0,
            numa_node_id: None,
            cpu_affinity: "0-3".into(),
            memory_affinity: "0".into(),
            mig_enabled: true,
            max_mig_devices: 7,
            mig_devices: vec![FixtureMig {
                index: 0,
                uuid: "MIG-1".into(),
                gpu_instance_id: 1,
                compute_instance_id: 0,
                profile: "1g.10gb".into(),
            }],
            nvlink_slots: 18,
            nvlinks: Vec::new(),
            common_ancestor: vec![0],
            p2p_pci: vec![0],
            p2p_nvlink: vec![0],
        }],
    };
    let text = serde_json::to_string(&fx).expect("json");
    assert_eq!(serde_json::from_str::<Fixture>(&text).expect("back"), fx);
    assert_eq!(fx.by_bus_id("0000:1b:00.0"), Some(0));
}

#[test]
fn a_fixture_without_mig_devices_still_loads() {
    // Fixtures written before MIG devices were described have neither field.
    let text = r#"{"index":0,"name":"G","uuid":"GPU-0","pci_bus_id":"00000000:1B:00.0",
            "pci_device_id":0,"pci_subsystem_id":0,"minor":0,"numa_node_id":null,
            "cpu_affinity":"0","memory_affinity":"0","mig_enabled":false,"nvlink_slots":0,
            "nvlinks":[],"common_ancestor":[0],"p2p_pci":[0],"p2p_nvlink":[0]}"#;
    let g: FixtureGpu = serde_json::from_str(text).expect("old fixture");
    assert_eq!((g.max_mig_devices, g.mig_devices.len()), (0, 0));
}
