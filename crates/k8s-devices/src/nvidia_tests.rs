//! `NVIDIA_VISIBLE_DEVICES` as the device plugin writes it per strategy and as images set it.

use super::*;

fn list(v: &str) -> Vec<GpuRef> {
    match parse_visible_devices(Some(v)) {
        Ok(VisibleDevices::List(l)) => l,
        other => panic!("{v:?}: {other:?}"),
    }
}

#[test]
fn markers_are_never_allocations() {
    for (value, want) in [
        (None, VisibleDevices::Void),
        (Some(""), VisibleDevices::Void),
        (Some("  "), VisibleDevices::Void),
        (Some("void"), VisibleDevices::Void),
        (Some("none"), VisibleDevices::None),
        (Some("all"), VisibleDevices::All),
        (Some(VOLUME_MOUNTS_ROOT), VisibleDevices::VolumeMounts),
    ] {
        let got = parse_visible_devices(value).expect("marker");
        assert_eq!(got, want, "{value:?}");
        assert!(!got.names_devices());
    }
}

#[test]
fn envvar_strategy_values() {
    // deviceIDStrategy uuid (the default): the UUIDs joined by ','.
    assert_eq!(
        list("GPU-8a0e7d6c-3d5b-4e8a-9f1a-0d7f2e1c5b3a,GPU-1aaa"),
        vec![
            GpuRef::GpuUuid("GPU-8a0e7d6c-3d5b-4e8a-9f1a-0d7f2e1c5b3a".into()),
            GpuRef::GpuUuid("GPU-1aaa".into())
        ]
    );
    // deviceIDStrategy index, whole GPUs and MIG devices.
    assert_eq!(list("0,3"), vec![GpuRef::Index(0), GpuRef::Index(3)]);
    assert_eq!(list("0:1"), vec![GpuRef::MigIndex { gpu: 0, mig: 1 }]);
    // MIG by UUID, current and old form.
    let mig = list("MIG-1f1f6b8e-8a46-5b2c-9d0b-3c1d7b0e9e11");
    assert!(mig[0].is_mig());
    assert_eq!(
        list("MIG-GPU-8a0e7d6c-3d5b-4e8a-9f1a-0d7f2e1c5b3a/1/0"),
        vec![GpuRef::MigLegacy {
            gpu_uuid: "GPU-8a0e7d6c-3d5b-4e8a-9f1a-0d7f2e1c5b3a".into(),
            gi: 1,
            ci: 0
        }]
    );
    // Blanks around entries are ignored; display gives the id back.
    let l = list(" 1 , GPU-2b ");
    assert_eq!(l[0].to_string(), "1");
    assert_eq!(l[1].to_string(), "GPU-2b");
}

#[test]
fn malformed_values_are_errors() {
    for v in [
        "-1",
        "0,,1",
        "0,",
        "all,0",
        "GPU-",
        "MIG-",
        "GPU-a/b",
        "1.5",
        "+1",
        "0:x",
        "MIG-GPU-abc/1",
        "MIG-GPU-abc/1/2/3",
        "99999999999",
        "gpu0",
    ] {
        assert!(parse_visible_devices(Some(v)).is_err(), "{v:?}");
    }
    let many = vec!["0"; MAX_ENTRIES + 1].join(",");
    assert!(matches!(
        parse_visible_devices(Some(&many)),
        Err(NvidiaError::TooLarge { .. })
    ));
    let huge = "1".repeat(MAX_INPUT_LEN + 1);
    assert!(matches!(
        parse_visible_devices(Some(&huge)),
        Err(NvidiaError::TooLarge { .. })
    ));
}

#[test]
fn volume_mounts_strategy_paths() {
    assert_eq!(
        parse_volume_mount("/var/run/nvidia-container-devices/GPU-1aaa"),
        Some(Ok(MountedDevice::Gpu(GpuRef::GpuUuid("GPU-1aaa".into()))))
    );
    assert_eq!(
        parse_volume_mount("/var/run/nvidia-container-devices/2"),
        Some(Ok(MountedDevice::Gpu(GpuRef::Index(2))))
    );
    assert_eq!(
        parse_volume_mount("/var/run/nvidia-container-devices/imex/7"),
        Some(Ok(MountedDevice::ImexChannel(7)))
    );
    assert!(matches!(
        parse_volume_mount("/var/run/nvidia-container-devices/../etc"),
        Some(Err(_))
    ));
    assert_eq!(
        parse_volume_mount("/var/run/nvidia-container-devices"),
        None
    );
    assert_eq!(
        parse_volume_mount("/var/run/nvidia-container-devicesX/0"),
        None
    );
    assert_eq!(parse_volume_mount("/dev/termination-log"), None);
}

#[test]
fn replica_ids_of_time_slicing_and_mps() {
    assert_eq!(split_replica_id("GPU-1aaa::3"), ("GPU-1aaa", Some(3)));
    assert_eq!(split_replica_id("GPU-1aaa"), ("GPU-1aaa", None));
    assert_eq!(split_replica_id("MIG-abc::0"), ("MIG-abc", Some(0)));
    // Not a replica number: the id is kept whole.
    assert_eq!(split_replica_id("weird::x"), ("weird::x", None));
}

#[test]
fn device_nodes() {
    assert_eq!(parse_device_node("/dev/nvidia0"), Some(NvidiaNode::Gpu(0)));
    assert_eq!(
        parse_device_node("/dev/nvidia15"),
        Some(NvidiaNode::Gpu(15))
    );
    assert_eq!(
        parse_device_node("/dev/nvidiactl"),
        Some(NvidiaNode::Control)
    );
    assert!(parse_device_node("/dev/nvidia-uvm").is_some_and(NvidiaNode::is_control));
    assert!(parse_device_node("/dev/nvidia-uvm-tools").is_some_and(NvidiaNode::is_control));
    assert!(parse_device_node("/dev/nvidia-modeset").is_some_and(NvidiaNode::is_control));
    assert_eq!(
        parse_device_node("/dev/nvidia-caps/nvidia-cap21"),
        Some(NvidiaNode::Capability(21))
    );
    assert_eq!(
        parse_device_node("/dev/nvidia-caps-imex-channels/channel0"),
        Some(NvidiaNode::ImexChannel(0))
    );
    for p in [
        "/dev/nvidia",
        "/dev/nvidia-x",
        "/dev/nvidia0p1",
        "/dev/null",
        "/dev/dri/card0",
    ] {
        assert_eq!(parse_device_node(p), None, "{p}");
    }
}
