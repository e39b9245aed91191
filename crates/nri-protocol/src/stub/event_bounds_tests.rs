use protobuf::Message as _;

use super::*;
use crate::api;

fn encoded(req: &api::CreateContainerRequest) -> Vec<u8> {
    req.write_to_bytes().unwrap_or_default()
}

/// A request with entries at every depth the schema follows.
fn full() -> api::CreateContainerRequest {
    let mut pod = api::PodSandbox::new();
    pod.labels.insert("a".into(), "b".into());
    pod.ips = vec!["10.0.0.1".into(), "fd00::1".into()];
    let pod_linux = pod.linux.mut_or_insert_default();
    pod_linux
        .pod_resources
        .mut_or_insert_default()
        .unified
        .insert("memory.high".into(), "1".into());
    let mut c = api::Container::new();
    c.id = "c1".into();
    c.env = vec!["A=1".into(), "B=2".into()];
    c.args = vec!["sleep".into()];
    c.mounts = vec![api::Mount {
        destination: "/data".into(),
        options: vec!["ro".into(), "bind".into()],
        ..Default::default()
    }];
    c.hooks.mut_or_insert_default().prestart = vec![api::Hook {
        path: "/hook".into(),
        args: vec!["x".into(), "y".into()],
        ..Default::default()
    }];
    let linux = c.linux.mut_or_insert_default();
    linux.devices = vec![api::LinuxDevice::default(); 3];
    linux.resources.mut_or_insert_default().devices = vec![api::LinuxDeviceCgroup::default()];
    linux.seccomp_policy.mut_or_insert_default().syscalls = vec![api::LinuxSyscall {
        names: vec!["read".into(), "write".into()],
        ..Default::default()
    }];
    c.user.mut_or_insert_default().additional_gids = vec![1, 2, 3];
    api::CreateContainerRequest {
        pod: protobuf::MessageField::some(pod),
        container: protobuf::MessageField::some(c),
        ..Default::default()
    }
}

#[test]
fn entries_are_counted_at_every_depth() {
    // Pod: label 1, ips 2, linux 1 + pod_resources 1 + unified 1 = 6.
    // Container: env 2, args 1, mount 1 + options 2, hooks 1 + prestart 1 + args 2,
    // linux 1 + devices 3 + resources 1 + rule 1 + seccomp 1 + syscall 1 + names 2,
    // user 1 + 3 packed gids = 24. Plus the pod and container messages themselves: 2.
    let n = count_entries(&encoded(&full()), POD_CONTAINER, 1000).expect("within bounds");
    assert_eq!(n, 6 + 24 + 2);
    // One fewer allowed: refused.
    let err = count_entries(&encoded(&full()), POD_CONTAINER, n - 1).expect_err("over");
    assert!(
        matches!(&err, DecodeError::Over(m) if m.contains(&format!("more than {}", n - 1))),
        "{err}"
    );
}

#[test]
fn a_million_empty_mounts_are_refused_at_the_bound() {
    // 2 bytes on the wire for each empty mount: the container's field 9, length 0.
    let mut container = vec![0x0a, 2, b'c', b'1'];
    for _ in 0..1_000_000 {
        container.extend_from_slice(&[0x4a, 0]);
    }
    let mut req = vec![0x12];
    let mut len = container.len();
    while len >= 0x80 {
        req.push((len as u8) | 0x80);
        len >>= 7;
    }
    req.push(len as u8);
    req.extend_from_slice(&container);
    let err = count_entries(&req, POD_CONTAINER, 65_536).expect_err("over");
    assert!(matches!(err, DecodeError::Over(_)), "{err}");
    // The same shape under the bound is counted exactly.
    assert_eq!(
        count_entries(&req, POD_CONTAINER, 2_000_000).ok(),
        Some(1_000_001)
    );
}

#[test]
fn every_request_carrying_pods_or_containers_has_a_schema_and_malformed_bytes_are_refused() {
    for method in [
        "CreateContainer",
        "UpdateContainer",
        "StopContainer",
        "RunPodSandbox",
        "UpdatePodSandbox",
        "StateChange",
        "ValidateContainerAdjustment",
    ] {
        assert!(request_schema(method).is_some(), "{method}");
    }
    assert!(request_schema("Configure").is_none());
    // A length past the end of the message.
    let err = count_entries(&[0x12, 0x7f, 0], POD_CONTAINER, 10).expect_err("malformed");
    assert!(matches!(err, DecodeError::Wire(_)), "{err}");
}

#[test]
fn a_validation_request_is_counted_through_its_adjustment_updates_and_owners() {
    let mut adjust = api::ContainerAdjustment::new();
    adjust.env = vec![api::KeyValue::default(); 4];
    adjust.linux.mut_or_insert_default().devices = vec![api::LinuxDevice::default(); 2];
    let mut update = api::ContainerUpdate::new();
    update
        .linux
        .mut_or_insert_default()
        .resources
        .mut_or_insert_default()
        .devices = vec![api::LinuxDeviceCgroup::default(); 3];
    let mut owners = api::FieldOwners::new();
    owners.simple.insert(1, "p".into());
    let mut compound = api::CompoundFieldOwners::new();
    compound.owners.insert("k".into(), "p".into());
    owners.compound.insert(2, compound);
    let mut owning = api::OwningPlugins::new();
    owning.owners.insert("c1".into(), owners);
    let req = api::ValidateContainerAdjustmentRequest {
        adjust: protobuf::MessageField::some(adjust),
        update: vec![update],
        owners: protobuf::MessageField::some(owning),
        ..Default::default()
    };
    let schema = request_schema("ValidateContainerAdjustment").expect("a schema");
    // Adjustment 1 + env 4 + linux 1 + devices 2; update 1 + linux 1 + resources 1 + rules 3;
    // owners 1 + entry 1 + its FieldOwners 1 + simple 1 + compound entry 1 + its
    // CompoundFieldOwners 1 + their owners 1.
    let bytes = req.write_to_bytes().unwrap_or_default();
    assert_eq!(count_entries(&bytes, schema, 1000).ok(), Some(8 + 6 + 7));
}
