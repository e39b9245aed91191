//! A privileged container's device nodes are no allocation: it holds no GPU, and the
//! device-plugin containers after it hold theirs alone.

use super::kubernetes::{kctr, kpod, real, BUS};
use super::*;
use crate::enforce::container::DeviceRule;

/// Every device allowed, as containerd's `WithAllDevicesAllowed` writes it.
fn allow_all() -> DeviceRule {
    DeviceRule {
        allow: true,
        kind: String::new(),
        major: None,
        minor: None,
        access: "rwm".into(),
    }
}

/// The host's device nodes: both GPUs, `nvidiactl`, `/dev/kmsg` and a disk.
fn host_devices() -> Vec<crate::enforce::container::DeviceNode> {
    let mut disk = node("/dev/sda", 8, 0);
    disk.kind = "b".into();
    vec![
        node("/dev/nvidia0", 195, 0),
        node("/dev/nvidia1", 195, 1),
        node("/dev/nvidiactl", 195, 255),
        node("/dev/kmsg", 1, 11),
        disk,
    ]
}

fn gpus_of(e: &Engine<crate::placement::Allocator>, id: &str) -> (Vec<String>, Vec<String>) {
    let a = &e.records().containers[id].assignment;
    (a.gpus.clone(), a.shared_gpus.clone())
}

#[test]
fn a_privileged_container_holds_no_gpu_and_later_ones_hold_theirs_alone() {
    // With the device rules the runtime passes, and without them (the nodes alone).
    for rules in [vec![allow_all()], Vec::new()] {
        let mut e = real(Config::default(), "");
        let pod = kpod("kube-system", "dcgm", &[]);
        let mut c = kctr(&pod, "priv", "exporter", 100, None);
        c.devices = host_devices();
        c.resources.device_rules = rules.clone();
        e.create_container(&pod, &c).expect("admitted");
        assert_eq!(gpus_of(&e, "priv"), (vec![], vec![]), "rules {rules:?}");

        let pod = kpod("default", "train", &[]);
        let mut c = kctr(&pod, "dp", "main", 2000, Some(2000));
        c.devices = vec![node("/dev/nvidia0", 195, 0)];
        e.create_container(&pod, &c).expect("admitted");
        assert_eq!(
            gpus_of(&e, "dp"),
            (vec![BUS[0].to_string()], vec![]),
            "held alone, no one's sharer"
        );
    }
}

#[test]
fn every_gpu_node_under_a_deny_all_rule_is_an_allocation() {
    let mut e = real(Config::default(), "");
    let pod = kpod("default", "all-gpus", &[]);
    let mut c = kctr(&pod, "x", "main", 2000, Some(2000));
    c.devices = vec![node("/dev/nvidia0", 195, 0), node("/dev/nvidia1", 195, 1)];
    // A non-privileged spec: deny everything, then allow its own devices.
    c.resources.device_rules = vec![
        DeviceRule {
            allow: false,
            ..allow_all()
        },
        DeviceRule {
            allow: true,
            kind: "c".into(),
            major: Some(195),
            minor: Some(0),
            access: "rw".into(),
        },
    ];
    e.create_container(&pod, &c).expect("admitted");
    let (mut held, shared) = gpus_of(&e, "x");
    held.sort();
    assert_eq!(
        (held, shared),
        (vec![BUS[0].to_string(), BUS[1].to_string()], vec![])
    );
}
