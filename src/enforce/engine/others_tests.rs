use super::*;
use crate::enforce::container::DeviceRule;
use crate::placement::{PodInfo, Policy};
use crate::topology::testing::TopologyBuilder;
use crate::topology::Gpu;

/// 2 NUMA nodes x 4 CPUs (0-3, 4-7), one GPU on node 0.
fn host() -> Topology {
    let mut t = TopologyBuilder::new()
        .sockets(2)
        .cores(4)
        .threads(1)
        .memory_gib(16)
        .build();
    t.gpus = vec![Gpu {
        index: 0,
        pci_bus_id: "0000:1b:00.0".into(),
        numa_node: Some(0),
        uuid: Some("GPU-0aaa".into()),
        minor: Some(0),
        name: None,
        mig_enabled: None,
        mig_devices: Vec::new(),
        memory_node: None,
    }];
    t
}

fn ctr(env: &[&str], cpuset: &str) -> ContainerView {
    let mut c = ContainerView {
        id: "c1".into(),
        name: "app".into(),
        env: env.iter().map(|e| e.to_string()).collect(),
        ..ContainerView::default()
    };
    c.resources.cpuset_cpus = cpuset.into();
    c
}

fn set(list: &str) -> CpuSet {
    list.parse().expect("cpu list")
}

/// The devices of `c` as the engine gets them.
fn claims(t: &Topology, c: &ContainerView) -> crate::enforce::inputs::DeviceClaims {
    crate::enforce::inputs::build(t, &Default::default(), c, false)
        .expect("built")
        .devices
}

/// `c` with the DRA CPU claims `(uid, cpus)`.
fn claimed(mut c: ContainerView, given: &[(&str, &str)]) -> ContainerView {
    for (uid, cpus) in given {
        crate::enforce::testing::dra_cpu_claim(&mut c, uid, cpus);
    }
    c
}

#[test]
fn the_claims_cpus_come_before_the_reported_cpuset() {
    let t = host();
    // Two claims: their CPUs together, whatever cpuset the spec carries.
    let c = claimed(
        ctr(&["PATH=/bin"], "0-7"),
        &[("uid-a", "4-5"), ("uid-b", "7")],
    );
    assert_eq!(
        others_cpus(&t, &c, &claims(&t, &c)),
        OthersCpus::Claimed(set("4-5,7"))
    );
    let c = ctr(&[], "1-2");
    assert_eq!(
        others_cpus(&t, &c, &claims(&t, &c)),
        OthersCpus::Reported(set("1-2"))
    );
    let c = ctr(&[], "");
    assert_eq!(others_cpus(&t, &c, &claims(&t, &c)), OthersCpus::Unknown);
}

#[test]
fn a_dra_cpuset_entry_no_claim_gave_is_never_a_claim() {
    let t = host();
    // The pod spec's own env: any pod may carry it.
    let c = ctr(&["DRA_CPUSET_uid-a=0-7"], "0-3");
    assert_eq!(
        others_cpus(&t, &c, &claims(&t, &c)),
        OthersCpus::Reported(set("0-3"))
    );
    // The same entry in a spec device nobody named (matched back from that env alone).
    let mut c = claimed(ctr(&[], "0-3"), &[("uid-a", "0-7")]);
    c.kubelet_claims.clear();
    assert_eq!(
        others_cpus(&t, &c, &claims(&t, &c)),
        OthersCpus::Reported(set("0-3"))
    );
}

#[test]
fn a_claim_env_this_host_cannot_have_is_ignored() {
    let t = host();
    // CPU 99 is not on this host, an empty claim uid names no claim, a bare prefix is no entry.
    for env in [
        "DRA_CPUSET_uid-a=99",
        "DRA_CPUSET_=1",
        "DRA_CPUSET_uid-a",
        "DRA_CPUSET_x=a-b",
    ] {
        let mut c = claimed(ctr(&[], "0-3"), &[("uid-a", "1")]);
        c.cdi_resolved[0].env = vec![env.to_string()];
        assert_eq!(
            others_cpus(&t, &c, &claims(&t, &c)),
            OthersCpus::Reported(set("0-3")),
            "{env}"
        );
    }
}

#[test]
fn only_the_fields_left_are_taken_out() {
    let full = Adjustment {
        cpuset_cpus: "0-3".parse().expect("list"),
        cpuset_mems: "0".parse().expect("list"),
        add_devices: vec![crate::enforce::container::DeviceNode {
            path: "/dev/nvidia0".into(),
            kind: "c".into(),
            major: 195,
            minor: 0,
            file_mode: None,
            uid: None,
            gid: None,
        }],
        device_rules: vec![DeviceRule {
            allow: true,
            kind: "c".into(),
            major: Some(195),
            minor: Some(0),
            access: "rwm".into(),
        }],
        remove_devices: vec!["/dev/nvidia1".into()],
        env: [
            ("NVIDIA_VISIBLE_DEVICES", "GPU-0aaa"),
            ("CUDA_VISIBLE_DEVICES", "0"),
            ("NRI_ALIGN_DECISION", "policy=best-effort"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        ..Adjustment::default()
    };
    let mut none = full.clone();
    strip_left(&mut none, LeftToOthers::default());
    assert_eq!(none, full);

    let mut cpus = full.clone();
    strip_left(
        &mut cpus,
        LeftToOthers::of(&[crate::config::LeftField::Cpus]),
    );
    assert_eq!(cpus.cpuset_cpus.to_string(), "");
    assert_eq!(cpus.cpuset_mems.to_string(), "0");
    assert_eq!(cpus.add_devices, full.add_devices);

    let mut rest = full.clone();
    strip_left(
        &mut rest,
        LeftToOthers::of(&[
            crate::config::LeftField::Mems,
            crate::config::LeftField::Devices,
        ]),
    );
    assert_eq!(rest.cpuset_cpus.to_string(), "0-3");
    assert_eq!(rest.cpuset_mems.to_string(), "");
    assert!(rest.add_devices.is_empty() && rest.device_rules.is_empty());
    assert!(rest.remove_devices.is_empty());
    // The decision record is nri-align's own env, never another plugin's.
    assert_eq!(
        rest.env.keys().collect::<Vec<_>>(),
        vec!["NRI_ALIGN_DECISION"]
    );
}

fn request(gpus: &[&str]) -> Request {
    Request {
        container_id: "c1".into(),
        container_name: "app".into(),
        pod: PodInfo {
            uid: "uid-1".into(),
            namespace: "ns".into(),
            name: "p".into(),
            ..PodInfo::default()
        },
        allocated_gpus: gpus.iter().map(|g| g.to_string()).collect(),
        ..Request::default()
    }
}

#[test]
fn memory_follows_the_cpus_another_plugin_gave() {
    let t = host();
    let claimed = decision(
        &t,
        Policy::BestEffort,
        &request(&[]),
        &OthersCpus::Claimed(set("5-6")),
        MemNodes::CpuNodes,
    );
    assert_eq!(claimed.cpus, set("5-6"));
    assert!(claimed.exclusive, "a claim's CPUs are held");
    assert_eq!(claimed.mems.to_string(), "1");
    assert!(claimed.aligned);

    // Its GPU is on node 0, its CPUs on both: memory on both, aligned (the GPU's node is in).
    let spread = decision(
        &t,
        Policy::BestEffort,
        &request(&["0000:1b:00.0"]),
        &OthersCpus::Reported(set("3-4")),
        MemNodes::CpuNodes,
    );
    assert!(
        !spread.exclusive,
        "a reported cpuset is the other plugin's pool"
    );
    assert_eq!(spread.mems.to_string(), "0-1");
    assert!(spread.aligned);

    // CPUs on node 1 with a GPU on node 0: not aligned, and said so.
    let apart = decision(
        &t,
        Policy::BestEffort,
        &request(&["0000:1b:00.0"]),
        &OthersCpus::Claimed(set("4")),
        MemNodes::CpuNodes,
    );
    assert!(!apart.aligned);
    assert_eq!(apart.gpus, vec!["0000:1b:00.0".to_string()]);

    // CPUs not known yet: memory on the GPU's node, CPUs the whole host's, shared.
    let unknown = decision(
        &t,
        Policy::BestEffort,
        &request(&["0000:1b:00.0"]),
        &OthersCpus::Unknown,
        MemNodes::CpuNodes,
    );
    assert_eq!(unknown.mems.to_string(), "0");
    assert_eq!(unknown.cpus, set("0-7"));
    assert!(!unknown.exclusive);
}

#[test]
fn cpus_seen_after_creation_move_the_record_and_its_memory_nodes() {
    let t = host();
    // Created before the other plugin's cpuset showed: every CPU, memory on the GPU's node.
    let created = decision(
        &t,
        Policy::BestEffort,
        &request(&["0000:1b:00.0"]),
        &OthersCpus::Unknown,
        MemNodes::CpuNodes,
    );
    assert_eq!(created.mems.to_string(), "0");

    // PostStartContainer shows CPUs of node 1: memory there, not aligned with the GPU.
    let late = follow_cpus(&t, &created, set("5-6"), MemNodes::CpuNodes, false);
    assert_eq!(late.cpus, set("5-6"));
    assert_eq!(late.numa_nodes.to_string(), "1");
    assert_eq!(late.mems.to_string(), "1");
    assert!(!late.aligned, "the GPU is on node 0");
    assert_eq!(
        late.exclusive, created.exclusive,
        "held or shared as before"
    );
    assert_eq!(late.gpus, created.gpus, "devices never move");

    // Back on the GPU's node (the other plugin moved it): aligned again.
    let back = follow_cpus(&t, &late, set("1-2"), MemNodes::CpuNodes, false);
    assert_eq!(back.mems.to_string(), "0");
    assert!(back.aligned);

    // Spread over both nodes: memory on both.
    let spread = follow_cpus(&t, &late, set("3-4"), MemNodes::CpuNodes, false);
    assert_eq!(spread.mems.to_string(), "0-1");
    assert_eq!(spread.numa_nodes.to_string(), "0-1");
}

#[test]
fn memory_nodes_another_plugin_owns_are_kept_when_cpus_move() {
    let t = host();
    let created = decision(
        &t,
        Policy::BestEffort,
        &request(&[]),
        &OthersCpus::Reported(set("0-1")),
        MemNodes::CpuNodes,
    );
    let late = follow_cpus(&t, &created, set("6"), MemNodes::CpuNodes, true);
    assert_eq!(late.cpus, set("6"));
    assert_eq!(late.numa_nodes.to_string(), "1");
    assert_eq!(late.mems, created.mems, "mems are the other plugin's");
}

#[test]
fn the_mems_annotation_is_read_for_the_container() {
    let cfg = crate::placement::PlacementConfig::default();
    let mut ann = std::collections::BTreeMap::new();
    assert_eq!(mem_mode(&ann, "app", &cfg), MemNodes::CpuNodes);
    ann.insert(
        "mems.nri-align.io/container.app".to_string(),
        "with-memory-only".to_string(),
    );
    assert_eq!(mem_mode(&ann, "app", &cfg), MemNodes::WithMemoryOnly);
    assert_eq!(mem_mode(&ann, "other", &cfg), MemNodes::CpuNodes);
    ann.insert("mems.nri-align.io/pod".to_string(), "bogus".to_string());
    assert_eq!(
        mem_mode(&ann, "other", &cfg),
        MemNodes::CpuNodes,
        "unparsable: the default"
    );
}
