use super::*;

fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn container_beats_pod_beats_node_default() {
    let cfg = PlacementConfig::default();
    let a = ann(&[
        ("policy.nri-align.io/pod", "restricted"),
        ("policy.nri-align.io/container.main", "single-numa-node"),
        ("cpus.nri-align.io/pod", "shared"),
        ("other.example.com/x", "whatever"),
    ]);
    let main = effective(&a, "main", &cfg).expect("valid");
    assert_eq!(main.policy, Policy::SingleNumaNode);
    assert_eq!(main.cpus, CpuPreference::Shared);
    let side = effective(&a, "side", &cfg).expect("valid");
    assert_eq!(side.policy, Policy::Restricted);
    let none = effective(&BTreeMap::new(), "x", &cfg).expect("valid");
    assert_eq!(none.policy, cfg.policy);
    assert_eq!(none.scope, cfg.scope);
}

#[test]
fn unknown_keys_and_values_name_the_choices() {
    let cfg = PlacementConfig::default();
    let err = effective(&ann(&[("policy.nri-align.io/pod", "strict")]), "c", &cfg)
        .expect_err("bad value");
    assert_eq!(
        err.to_string(),
        "invalid annotation policy.nri-align.io/pod=\"strict\": expected one of: none \
             best-effort restricted single-numa-node"
    );
    let err =
        effective(&ann(&[("colour.nri-align.io/pod", "red")]), "c", &cfg).expect_err("bad key");
    assert!(
        err.to_string().contains("unknown setting \"colour\""),
        "{err}"
    );
    // A bad value for another container is still an error: typos must not hide.
    let err = effective(
        &ann(&[("cpus.nri-align.io/container.other", "lots")]),
        "c",
        &cfg,
    )
    .expect_err("bad value elsewhere");
    assert!(err.to_string().contains("exclusive"), "{err}");
    let err = effective(
        &ann(&[("scope.nri-align.io/container.c", "pod")]),
        "c",
        &cfg,
    )
    .expect_err("scope per container");
    assert!(err.to_string().contains("whole pod"), "{err}");
    let err = effective(
        &ann(&[("policy.nri-align.io/containers", "none")]),
        "c",
        &cfg,
    )
    .expect_err("bad target");
    assert!(err.to_string().contains("container.<name>"), "{err}");
    // A forgotten target is still our key, and an error.
    for key in ["policy.nri-align.io", "nri-align.io"] {
        let err = effective(&ann(&[(key, "none")]), "c", &cfg).expect_err("no target");
        assert!(err.to_string().contains(".nri-align.io/pod"), "{err}");
    }
    // Other domains that merely end alike are not ours.
    assert!(effective(&ann(&[("policy.xnri-align.io", "x")]), "c", &cfg).is_ok());
}

#[test]
fn a_megabyte_annotation_is_refused_without_being_echoed() {
    let cfg = PlacementConfig::default();
    let big = "x".repeat(1 << 20);
    let err =
        effective(&ann(&[("policy.nri-align.io/pod", &big)]), "c", &cfg).expect_err("huge value");
    let msg = err.to_string();
    assert!(msg.len() < 400, "{} bytes: {}", msg.len(), &msg[..200]);
    assert!(
        msg.contains("(1048576 bytes)") && msg.contains("the value is 1048576 bytes"),
        "{msg}"
    );
    // A huge key in our domain (a container name nobody can have) and a huge unknown
    // setting name are cut the same way.
    let key = format!("policy.nri-align.io/container.{big}");
    let msg = effective(&ann(&[(&key, "none")]), "c", &cfg)
        .expect_err("huge key")
        .to_string();
    assert!(
        msg.len() < 400 && msg.contains("Kubernetes allows at most 317"),
        "{msg}"
    );
    let key = format!("{}.nri-align.io/pod", "k".repeat(200));
    let msg = effective(&ann(&[(&key, "none")]), "c", &cfg)
        .expect_err("unknown setting")
        .to_string();
    assert!(msg.len() < 400 && msg.contains("(200 bytes)"), "{msg}");
    // Foreign keys are not ours to judge, whatever their size.
    assert!(effective(&ann(&[("example.com/blob", &big)]), "c", &cfg).is_ok());
}

#[test]
fn device_annotations_need_the_admin() {
    let a = ann(&[("gpus.nri-align.io/container.c", "2")]);
    let err = effective(&a, "c", &PlacementConfig::default()).expect_err("disabled");
    assert!(
        err.to_string().contains("disabled device annotations"),
        "{err}"
    );
    let cfg = PlacementConfig {
        allow_device_annotations: true,
        ..PlacementConfig::default()
    };
    assert_eq!(effective(&a, "c", &cfg).expect("allowed").gpus, Some(2));
    let err = effective(&ann(&[("nics.nri-align.io/pod", "-1")]), "c", &cfg).expect_err("negative");
    assert!(err.to_string().contains("device count"), "{err}");
}

#[test]
fn mempolicy_comes_from_the_node_then_the_pod_then_the_container() {
    use crate::placement::policy::MemPolicy;
    let cfg = PlacementConfig {
        mempolicy: MemPolicy::Bind,
        ..PlacementConfig::default()
    };
    let a = ann(&[
        ("mempolicy.nri-align.io/pod", "interleave"),
        ("mempolicy.nri-align.io/container.main", "preferred-many"),
    ]);
    assert_eq!(
        effective(&a, "main", &cfg).expect("valid").mempolicy,
        MemPolicy::PreferredMany
    );
    assert_eq!(
        effective(&a, "side", &cfg).expect("valid").mempolicy,
        MemPolicy::Interleave
    );
    assert_eq!(
        effective(&BTreeMap::new(), "x", &cfg)
            .expect("valid")
            .mempolicy,
        MemPolicy::Bind
    );
    let err = effective(&ann(&[("mempolicy.nri-align.io/pod", "spread")]), "c", &cfg)
        .expect_err("bad value");
    assert_eq!(
        err.to_string(),
        "invalid annotation mempolicy.nri-align.io/pod=\"spread\": expected one of: none bind \
         interleave preferred-many weighted-interleave"
    );
}
