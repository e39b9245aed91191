use std::collections::BTreeSet;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use super::*;

fn who(node: Option<&str>, group: Option<&str>) -> Identity {
    Identity {
        node: node.map(str::to_string),
        group: group.map(str::to_string),
    }
}

fn keys(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn pick(names: &[&str], w: &Identity) -> Result<Option<(Source, String)>, String> {
    let k = keys(names);
    choose(|n| k.contains(n), w)
}

#[test]
fn the_nodes_section_wins_then_its_groups_then_the_default() {
    let all = ["default", "group.gpu", "node.w1"];
    let some = |s: Source, k: &str| Ok(Some((s, k.to_string())));
    assert_eq!(
        pick(&all, &who(Some("w1"), Some("gpu"))),
        some(Source::Node, "node.w1")
    );
    assert_eq!(
        pick(&all, &who(Some("w2"), Some("gpu"))),
        some(Source::Group, "group.gpu")
    );
    assert_eq!(
        pick(&all, &who(Some("w2"), None)),
        some(Source::Default, "default")
    );
    assert_eq!(
        pick(&all, &who(None, None)),
        some(Source::Default, "default")
    );
    // Without a default, a node with nothing of its own runs on the built-in defaults.
    assert_eq!(pick(&["node.w1"], &who(Some("w2"), None)), Ok(None));
    assert_eq!(pick(&[], &who(Some("w2"), None)), Ok(None));
}

#[test]
fn a_node_in_a_group_without_a_section_does_not_take_the_default() {
    let err = pick(&["default", "group.gpu"], &who(Some("w1"), Some("cpu"))).expect_err("no group");
    assert!(
        err.contains("group cpu") && err.contains("no group.cpu section"),
        "{err}"
    );
    // Its own section still applies.
    assert_eq!(
        pick(&["default", "node.w1"], &who(Some("w1"), Some("cpu"))),
        Ok(Some((Source::Node, "node.w1".to_string())))
    );
}

#[test]
fn the_group_comes_from_the_label_and_bad_values_are_refused() {
    let w = Identity::from_labels(
        Some("w1".into()),
        [("kubernetes.io/hostname", "w1"), (GROUP_LABEL, "gpu-a100")],
    )
    .expect("ok");
    assert_eq!(w, who(Some("w1"), Some("gpu-a100")));
    let none = Identity::from_labels(Some("w1".into()), [(GROUP_LABEL, "")]).expect("ok");
    assert_eq!(none.group, None);
    for bad in ["../etc", "a/b", "-x", &"g".repeat(64)] {
        let err = Identity::from_labels(None, [(GROUP_LABEL, bad)]).expect_err(bad);
        assert!(err.contains("not a valid label value"), "{err}");
    }
}

#[test]
fn section_keys_are_the_three_kinds_with_plain_names() {
    for k in [
        "default",
        "group.gpu",
        "node.worker-7.example.com",
        "group.a_b",
    ] {
        assert!(is_section_key(k), "{k}");
    }
    for k in [
        "config.yaml",
        "group.",
        "node.",
        "node.a/b",
        "node.a\nb",
        "defaults",
        "..data",
    ] {
        assert!(!is_section_key(k), "{k:?}");
    }
}

/// A ConfigMap volume as the kubelet lays it out: the keys as links into `..data`.
fn volume(sections: &[(&str, &str)]) -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tmp");
    let gen = t.path().join("..2026_01_01_00_00_00.000000001");
    std::fs::create_dir(&gen).expect("mkdir");
    for (k, text) in sections {
        std::fs::write(gen.join(k), text).expect("write");
        std::fs::set_permissions(gen.join(k), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        symlink(format!("..data/{k}"), t.path().join(k)).expect("key link");
    }
    symlink("..2026_01_01_00_00_00.000000001", t.path().join("..data")).expect("..data");
    t
}

#[test]
fn a_mounted_configmap_directory_is_read_by_section() {
    let v = volume(&[
        ("default", "policy: none\n"),
        ("node.big", "policy: restricted\n"),
        ("config.yaml", "policy: single-numa-node\n"),
    ]);
    let (k, other) = list_dir(v.path()).expect("list");
    assert_eq!(k, keys(&["default", "node.big"]));
    assert_eq!(other, vec!["config.yaml".to_string()]);
    let big = select_in_dir(v.path(), &who(Some("big"), None))
        .expect("read")
        .expect("a section");
    assert_eq!((big.source, big.key.as_str()), (Source::Node, "node.big"));
    assert_eq!(big.bytes, b"policy: restricted\n");
    let small = select_in_dir(v.path(), &who(Some("small"), None))
        .expect("read")
        .expect("a section");
    assert_eq!(
        (small.source, small.bytes.as_slice()),
        (Source::Default, &b"policy: none\n"[..])
    );
    let err = select_in_dir(v.path(), &who(Some("small"), Some("gpu"))).expect_err("no group");
    assert!(err.to_string().contains("no group.gpu section"), "{err}");
}

#[test]
fn a_sections_missing_start_up_keys_come_from_the_default() {
    let v = volume(&[
        (
            "default",
            "policy: none\nmetrics_address: \"0.0.0.0:9464\"\nstate_dir: /var/lib/nri-align\n",
        ),
        // Written for placement alone: before, the pod lost its probes' port.
        ("group.gpu", "policy: single-numa-node\n"),
        // Its own value stays, even one that turns metrics off.
        ("node.quiet", "policy: restricted\nmetrics_address: \"\"\n"),
    ]);
    let gpu = select_in_dir(v.path(), &who(Some("w1"), Some("gpu")))
        .expect("read")
        .expect("a section");
    assert_eq!(gpu.inherited, vec!["metrics_address", "state_dir"]);
    let c = crate::config::Config::from_bytes(&gpu.bytes, &gpu.path).expect("valid");
    assert_eq!(c.placement.policy, crate::placement::Policy::SingleNumaNode);
    assert_eq!(
        c.metrics_address.map(|a| a.to_string()).as_deref(),
        Some("0.0.0.0:9464")
    );
    assert_eq!(
        c.state_dir.as_deref(),
        Some(Path::new("/var/lib/nri-align"))
    );
    let quiet = select_in_dir(v.path(), &who(Some("quiet"), None))
        .expect("read")
        .expect("a section");
    assert_eq!(quiet.inherited, vec!["state_dir"]);
    let c = crate::config::Config::from_bytes(&quiet.bytes, &quiet.path).expect("valid");
    assert_eq!(c.metrics_address, None);
    // The default section itself, and a broken default, lend nothing.
    let d = select_in_dir(v.path(), &who(Some("other"), None))
        .expect("read")
        .expect("a section");
    assert!(d.inherited.is_empty());
    let (same, taken) = inherit_startup_keys(b"policy: none\n", b"metrics_address: [\n");
    assert_eq!((same.as_slice(), taken.len()), (&b"policy: none\n"[..], 0));
}

#[test]
fn an_alias_bomb_in_the_default_section_lends_nothing() {
    let mut laughs = format!("metrics_address: &l0 [{}]\n", ["\"lol\""; 10].join(", "));
    for i in 1..=9 {
        let row = vec![format!("*l{}", i - 1); 10].join(", ");
        laughs.push_str(&format!("x{i}: &l{i} [{row}]\n"));
    }
    let (same, taken) = inherit_startup_keys(b"policy: none\n", laughs.as_bytes());
    assert_eq!((same.as_slice(), taken.len()), (&b"policy: none\n"[..], 0));
}
