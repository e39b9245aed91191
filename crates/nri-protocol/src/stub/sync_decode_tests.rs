use super::*;
use crate::api::MessageField;

fn kept() -> SyncKeep {
    SyncKeep::Only(KeptFields {
        env: vec!["NVIDIA_VISIBLE_DEVICES".into()],
        annotation_domains: vec!["nri-align.io".into(), "cdi.k8s.io".into()],
        labels: vec!["io.kubernetes.container.name".into()],
        mount_prefixes: vec!["/var/run/nvidia-container-devices".into()],
    })
}

fn full_container() -> api::Container {
    let mut c = api::Container::new();
    c.id = "c1".into();
    c.pod_sandbox_id = "sb1".into();
    c.name = "app".into();
    c.state = api::ContainerState::CONTAINER_RUNNING.into();
    c.pid = 42;
    c.args = vec!["sleep".into(), "1000".into()];
    c.env = vec![
        "PATH=/bin".into(),
        "NVIDIA_VISIBLE_DEVICES=GPU-1".into(),
        "NVIDIA_VISIBLE_DEVICES_X=2".into(),
        String::new(),
    ];
    c.labels
        .insert("io.kubernetes.container.name".into(), "app".into());
    c.labels.insert("team".into(), "a".into());
    for (k, v) in [
        ("cpus.nri-align.io/pod", "exclusive"),
        ("nri-align.io/decision", "cpus=1"),
        ("cdi.k8s.io/x", "nvidia.com/gpu=0"),
        ("kubectl.kubernetes.io/last-applied-configuration", "{...}"),
        ("evilnri-align.io/x", "no"),
        ("nri-align.io", "no slash"),
    ] {
        c.annotations.insert(k.into(), v.into());
    }
    c.mounts = vec![
        api::Mount {
            destination: "/etc/hosts".into(),
            source: "/x".into(),
            ..Default::default()
        },
        api::Mount {
            destination: "/var/run/nvidia-container-devices/GPU-1".into(),
            source: "/dev/null".into(),
            type_: "bind".into(),
            options: vec!["ro".into()],
            ..Default::default()
        },
    ];
    c.CDI_devices = vec![api::CDIDevice {
        name: "nvidia.com/gpu=0".into(),
        ..Default::default()
    }];
    let cpu = api::LinuxCPU {
        cpus: "0-3".into(),
        mems: "0".into(),
        ..Default::default()
    };
    let mut unified = std::collections::HashMap::new();
    unified.insert("memory.high".to_string(), "max".to_string());
    c.linux = MessageField::some(api::LinuxContainer {
        devices: vec![api::LinuxDevice {
            path: "/dev/nvidia1".into(),
            type_: "c".into(),
            major: 195,
            minor: 1,
            ..Default::default()
        }],
        resources: MessageField::some(api::LinuxResources {
            cpu: MessageField::some(cpu),
            memory: MessageField::some(api::LinuxMemory {
                limit: MessageField::some(api::OptionalInt64 {
                    value: 1 << 30,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            devices: vec![api::LinuxDeviceCgroup {
                allow: false,
                access: "rwm".into(),
                ..Default::default()
            }],
            hugepage_limits: vec![api::HugepageLimit {
                page_size: "2MB".into(),
                limit: 64 << 21,
                ..Default::default()
            }],
            unified,
            ..Default::default()
        }),
        cgroups_path: "/kubepods/c1".into(),
        ..Default::default()
    });
    c
}

fn request(pods: Vec<api::PodSandbox>, containers: Vec<api::Container>, more: bool) -> Vec<u8> {
    api::SynchronizeRequest {
        pods,
        containers,
        more,
        ..Default::default()
    }
    .write_to_bytes()
    .expect("encode")
}

#[test]
fn keep_all_decodes_what_the_generated_types_decode() {
    let mut pod = api::PodSandbox::new();
    pod.id = "sb1".into();
    pod.ips = vec!["10.0.0.1".into()];
    let bytes = request(vec![pod.clone()], vec![full_container()], true);
    let (chunk, totals) = decode_chunk(
        &bytes,
        &SyncKeep::All,
        &SyncLimits::default(),
        Totals::default(),
    )
    .expect("decodes");
    assert_eq!(chunk.pods, vec![pod]);
    assert_eq!(chunk.containers, vec![full_container()]);
    assert!(chunk.more);
    assert_eq!(totals.chunks, 1);
    assert_eq!(totals.objects, 2);
}

#[test]
fn keep_only_keeps_identity_resources_devices_and_the_named_entries() {
    let bytes = request(Vec::new(), vec![full_container()], false);
    let (chunk, totals) =
        decode_chunk(&bytes, &kept(), &SyncLimits::default(), Totals::default()).expect("decodes");
    assert!(!chunk.more);
    let c = &chunk.containers[0];
    let full = full_container();
    assert_eq!(
        (&c.id, &c.pod_sandbox_id, &c.name, c.state, c.pid),
        (
            &full.id,
            &full.pod_sandbox_id,
            &full.name,
            full.state,
            full.pid
        )
    );
    assert!(c.args.is_empty());
    assert_eq!(c.env, vec!["NVIDIA_VISIBLE_DEVICES=GPU-1".to_string()]);
    assert_eq!(c.labels.len(), 1);
    let mut keys: Vec<&str> = c.annotations.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "cdi.k8s.io/x",
            "cpus.nri-align.io/pod",
            "nri-align.io/decision"
        ]
    );
    assert_eq!(c.mounts.len(), 1);
    assert_eq!(
        c.mounts[0].destination,
        "/var/run/nvidia-container-devices/GPU-1"
    );
    assert!(c.mounts[0].options.is_empty());
    assert_eq!(c.CDI_devices, full.CDI_devices);
    let (l, fl) = (
        c.linux.as_ref().expect("linux"),
        full.linux.as_ref().expect("linux"),
    );
    assert_eq!(l.devices, fl.devices);
    assert_eq!(l.cgroups_path, fl.cgroups_path);
    let (r, fr) = (
        l.resources.as_ref().expect("r"),
        fl.resources.as_ref().expect("r"),
    );
    assert_eq!(
        (&r.cpu, &r.memory, &r.devices, &r.hugepage_limits),
        (&fr.cpu, &fr.memory, &fr.devices, &fr.hugepage_limits)
    );
    assert_eq!(r.hugepage_limits.len(), 1, "the huge page limit is kept");
    assert!(r.unified.is_empty());
    // 1 variable, 1 label, 3 annotations, 1 mount, 1 CDI device, 1 node, 1 rule, 1 huge
    // page limit.
    assert_eq!(totals.entries, 10);
}

#[test]
fn objects_are_counted_before_they_are_decoded() {
    let limits = SyncLimits {
        max_chunks: 4,
        max_objects: 10,
        max_bytes: 1 << 20,
    };
    let bytes = request(Vec::new(), vec![api::Container::new(); 11], false);
    // Nameless ones are counted too, before they are dropped.
    let (chunk, _) = decode_chunk(
        &request(Vec::new(), vec![api::Container::new(); 10], false),
        &kept(),
        &limits,
        Totals::default(),
    )
    .expect("at the limit");
    assert_eq!((chunk.containers.len(), chunk.nameless), (0, 10));
    for keep in [SyncKeep::All, kept()] {
        let err = decode_chunk(&bytes, &keep, &limits, Totals::default()).expect_err("over");
        assert!(
            err.to_string()
                .contains("11 pods and containers in 1 chunk(s), more than the limit of 10"),
            "{err}"
        );
    }
    // What earlier chunks held counts too.
    let before = Totals {
        chunks: 1,
        objects: 9,
        bytes: 0,
        entries: 0,
    };
    let two = request(Vec::new(), vec![api::Container::new(); 2], false);
    assert!(decode_chunk(&two, &kept(), &limits, before).is_err());
    let before = Totals {
        chunks: 4,
        ..before
    };
    let err = decode_chunk(
        &request(Vec::new(), Vec::new(), false),
        &kept(),
        &limits,
        before,
    )
    .expect_err("chunks");
    assert!(err.to_string().contains("5 chunks"), "{err}");
}

#[test]
fn kept_entries_are_bounded_and_skipped_ones_cost_nothing() {
    let limits = SyncLimits {
        max_chunks: 4,
        max_objects: 100,
        max_bytes: 64 << 20,
    };
    let mut c = api::Container::new();
    c.id = "c1".into();
    // A million empty strings and unwanted variables: skipped, never counted.
    c.env = vec![String::new(); 1_000_000];
    c.env.push("HOME=/".into());
    let (chunk, totals) = decode_chunk(
        &request(Vec::new(), vec![c], false),
        &kept(),
        &limits,
        Totals::default(),
    )
    .expect("skipped");
    assert!(chunk.containers[0].env.is_empty());
    assert_eq!(totals.entries, 0);
    // 101 wanted variables cross the bound of 100.
    let mut c = api::Container::new();
    c.env = vec!["NVIDIA_VISIBLE_DEVICES=0".into(); 101];
    let err = decode_chunk(
        &request(Vec::new(), vec![c], false),
        &kept(),
        &limits,
        Totals::default(),
    )
    .expect_err("over");
    assert!(err.to_string().contains("101 entries kept"), "{err}");
}

#[test]
fn malformed_bytes_are_refused_not_panicked_on() {
    let good = request(Vec::new(), vec![full_container()], false);
    for cut in [1, good.len() / 2, good.len() - 1] {
        for keep in [SyncKeep::All, kept()] {
            let r = decode_chunk(
                &good[..cut],
                &keep,
                &SyncLimits::default(),
                Totals::default(),
            );
            assert!(matches!(r, Err(DecodeError::Wire(_))), "cut at {cut}");
        }
    }
    // Field number 0, an undefined wire type, a string that is not UTF-8.
    for bad in [
        vec![0x02, 0x00],
        vec![0x0e],
        vec![0x12, 0x03, 0x0a, 0x01, 0xff],
    ] {
        let r = decode_chunk(&bad, &kept(), &SyncLimits::default(), Totals::default());
        assert!(matches!(r, Err(DecodeError::Wire(_))), "{bad:?}");
    }
}

#[test]
fn annotation_domains_match_whole_labels() {
    let d = ["nri-align.io".to_string()];
    assert!(in_domain(b"nri-align.io/decision", &d));
    assert!(in_domain(b"cpus.nri-align.io/pod", &d));
    assert!(!in_domain(b"evilnri-align.io/x", &d));
    assert!(!in_domain(b"nri-align.io", &d));
    assert!(!in_domain(b"x/nri-align.io/y", &d));
}
