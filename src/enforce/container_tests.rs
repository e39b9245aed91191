use super::*;

#[test]
fn env_var_takes_the_last_exact_key() {
    let c = ContainerView {
        env: vec![
            "NVIDIA_VISIBLE_DEVICES=all".into(),
            "NVIDIA_VISIBLE_DEVICES_X=1".into(),
            "NVIDIA_VISIBLE_DEVICES=GPU-1".into(),
        ],
        ..Default::default()
    };
    assert_eq!(c.env_var("NVIDIA_VISIBLE_DEVICES"), Some("GPU-1"));
    assert_eq!(c.env_var("NVIDIA"), None);
}

#[test]
fn a_runtime_list_is_read_once_and_held_to_the_host_as_a_fresh_parse_would_be() {
    for (text, limit) in [
        ("1,3-4\n", 8),
        ("", 8),
        ("  ", 8),
        ("0-8", 8),
        ("0-7", 8),
        ("zero", 8),
        ("4-2", 8),
        ("0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0", 8),
        ("0-8191", 8192),
    ] {
        let ids = RuntimeIds::new(text);
        assert_eq!(
            ids.below(limit).cloned(),
            IdSet::parse_list_below(text, limit),
            "{text:?} below {limit}"
        );
        assert_eq!(ids.text(), text);
    }
    // No kernel names an id past its limit: refused whatever the host.
    assert!(RuntimeIds::new("8192").below(u32::MAX).is_err());
    assert!(RuntimeIds::new(" ").is_unset() && !RuntimeIds::new("0").is_unset());
    // The view travels as the runtime's text, unchanged.
    let view = ResourcesView {
        cpuset_cpus: "0-3,7".into(),
        ..Default::default()
    };
    let json = serde_json::to_string(&view).expect("serialises");
    assert!(json.contains(r#""cpuset_cpus":"0-3,7""#), "{json}");
    let back: ResourcesView = serde_json::from_str(&json).expect("deserialises");
    assert_eq!(back, view);
}

#[test]
fn the_nodes_facts_join_the_runtimes_view_once_and_replace_what_it_had() {
    let view = ContainerView {
        id: "c1".into(),
        env: vec!["A=1".into()],
        kubelet_claims: vec![KubeletClaimDevice::default()],
        ..Default::default()
    };
    let node = NodeFacts {
        kubelet_devices: Some(vec![KubeletDevices {
            resource: "nvidia.com/gpu".into(),
            ids: vec!["GPU-1".into()],
        }]),
        ..Default::default()
    };
    let joined = view.clone().with_node(node.clone());
    assert_eq!(joined.kubelet_devices, node.kubelet_devices);
    assert!(joined.kubelet_claims.is_empty(), "replaced, not merged");
    // What the runtime sent is kept as it was.
    assert_eq!((joined.id.as_str(), &joined.env), ("c1", &view.env));
}
