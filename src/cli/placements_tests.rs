use super::*;
use std::time::Duration;

#[test]
fn rfc3339_of_known_instants() {
    let at = |s| rfc3339(UNIX_EPOCH + Duration::from_secs(s));
    assert_eq!(at(0), "1970-01-01T00:00:00Z");
    assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(at(1_795_993_804), "2026-11-29T23:10:04Z");
}

#[test]
fn devices_the_drawn_host_lacks_are_said_not_dropped() {
    let topo = crate::topology::testing::shipped("dgx-h100");
    let row = |gpus: Vec<String>, nics: Vec<String>| Placement {
        id: "c1".into(),
        pod: "ml/train".into(),
        name: "cuda".into(),
        policy: "best-effort".into(),
        exclusive: true,
        cpus: "0-1".into(),
        mems: "0".into(),
        gpus,
        nics,
        stopped: false,
        offline_cpus: String::new(),
        since: None,
        claims: Vec::new(),
        device_map: DeviceMap::default(),
    };
    let here = topo.gpus[0].pci_bus_id.clone();
    let lines = not_on_host(
        &[
            row(vec![here], Vec::new()),
            row(vec!["0000:ff:00.0".into()], vec!["eth-gone".into()]),
        ],
        &topo,
    );
    assert_eq!(
        lines,
        [
            "ml/train/cuda holds GPU 0000:ff:00.0 that this host does not have: not drawn",
            "ml/train/cuda holds NIC eth-gone that this host does not have: not drawn",
        ]
    );
}

#[test]
fn the_device_map_has_a_line_per_gpu_and_nic() {
    use crate::placement::device_map::{GpuShare, NicShare};
    let map = DeviceMap {
        gpus: vec![GpuShare {
            ordinal: 0,
            pci_bus_id: "0000:1b:00.0".into(),
            cpus: "0-3".parse().expect("set"),
            mems: "0".parse().expect("set"),
        }],
        nics: vec![NicShare {
            name: "ib0".into(),
            cpus: IdSet::new(),
        }],
    };
    assert_eq!(
        map_lines(&map),
        ["gpu 0 (0000:1b:00.0): cpus 0-3 mems 0", "nic ib0: cpus -"]
    );
    assert!(map_lines(&DeviceMap::default()).is_empty());
}
