use super::*;
use crate::enforce::container::DeviceNode;
use crate::enforce::inputs::tests::{gpu_topology, node};

fn rule(allow: bool, kind: &str, major: Option<i64>, access: &str) -> DeviceRule {
    DeviceRule {
        allow,
        kind: kind.into(),
        major,
        minor: None,
        access: access.into(),
    }
}

fn with(devices: Vec<DeviceNode>, rules: Vec<DeviceRule>) -> ContainerView {
    let mut c = ContainerView {
        devices,
        ..Default::default()
    };
    c.resources.device_rules = rules;
    c
}

#[test]
fn the_last_rule_over_every_device_decides() {
    let topo = gpu_topology();
    let all = |allow| rule(allow, "", None, "rwm");
    assert!(privileged_shaped(&topo, &with(vec![], vec![all(true)])));
    assert!(privileged_shaped(
        &topo,
        &with(vec![], vec![rule(true, "a", None, "rwm")])
    ));
    // Deny all, then allow one device class: a non-privileged spec.
    let plain = vec![all(false), rule(true, "c", Some(195), "rw")];
    assert!(!privileged_shaped(&topo, &with(vec![], plain)));
    // Allowed, then denied again; or allowed without mknod.
    assert!(!privileged_shaped(
        &topo,
        &with(vec![], vec![all(true), all(false)])
    ));
    assert!(!privileged_shaped(
        &topo,
        &with(vec![], vec![rule(true, "", None, "rw")])
    ));
}

#[test]
fn without_rules_every_gpu_node_and_a_host_only_node_are_needed() {
    let topo = gpu_topology();
    let gpus = || vec![node("/dev/nvidia0", 195, 0), node("/dev/nvidia1", 195, 1)];
    assert!(
        !privileged_shaped(&topo, &with(gpus(), vec![])),
        "a device plugin's"
    );
    let mut host = gpus();
    host.push(node("/dev/kmsg", 1, 11));
    assert!(privileged_shaped(&topo, &with(host.clone(), vec![])));
    host.remove(1);
    assert!(
        !privileged_shaped(&topo, &with(host, vec![])),
        "one GPU missing"
    );
}
