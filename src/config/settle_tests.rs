use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;
use crate::placement::Policy;
use crate::topology::testing::TopologyBuilder;

/// A 4-CPU host without GPUs.
fn small() -> Topology {
    TopologyBuilder::new().build()
}

fn section(key: &str, text: &str) -> Selected {
    let source = if key == "default" {
        Source::Default
    } else {
        Source::Node
    };
    Selected::new(
        source,
        key.into(),
        Path::new("/cfg").join(key),
        text.as_bytes().to_vec(),
        None,
    )
}

fn state_dir() -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tmp");
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    t
}

#[test]
fn a_usable_section_is_in_force_and_kept_as_the_last_good() {
    let topo = small();
    let state = state_dir();
    let sel = section("default", "policy: restricted\n");
    let s = settle(Ok(Some(sel.clone())), &topo, state.path());
    assert_eq!((s.source, s.degraded.as_deref()), (Source::Default, None));
    assert_eq!(s.config.placement.policy, Policy::Restricted);
    let kept = keep_last_good(state.path(), &sel).expect("kept");
    let mode = std::fs::metadata(&kept).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let back = last_good(state.path(), &topo)
        .expect("readable")
        .expect("kept");
    assert_eq!(back.placement.policy, Policy::Restricted);
    // No section for this node: the built-in defaults, and nothing wrong with that.
    let none = settle(Ok(None), &topo, state.path());
    assert_eq!((none.source, none.degraded), (Source::Builtin, None));
}

#[test]
fn a_section_this_host_cannot_take_falls_back_to_the_last_good_then_the_defaults() {
    let topo = small();
    let online = topo.online_cpus();
    let state = state_dir();
    // CPUs the host does not have.
    let too_big = section("node.small", "reserved_cpus: \"0-63\"\npolicy: none\n");
    let s = settle(Ok(Some(too_big.clone())), &topo, state.path());
    assert_eq!(s.source, Source::Builtin);
    assert_eq!(s.config, Config::default());
    let why = s.degraded.expect("degraded");
    assert!(
        why.starts_with("node.small: reserved_cpus 0-63 includes CPUs that are not online")
            && why.ends_with("running on the built-in defaults"),
        "{why} (online {online})"
    );

    // With a last good configuration kept, that one runs instead.
    keep_last_good(state.path(), &section("default", "policy: restricted\n")).expect("kept");
    let s = settle(Ok(Some(too_big)), &topo, state.path());
    assert_eq!(s.source, Source::LastGood);
    assert_eq!(s.config.placement.policy, Policy::Restricted);
    assert!(s
        .degraded
        .expect("degraded")
        .ends_with("running on the last good configuration"));

    // A GPU mode a GPU-less host cannot meet, and a section that does not parse.
    let remap = settle(
        Ok(Some(section("default", "gpu_mode: remap\n"))),
        &topo,
        state.path(),
    );
    assert!(
        remap
            .degraded
            .as_deref()
            .is_some_and(|d| d.contains("gpu_mode remap needs GPUs")),
        "{remap:?}"
    );
    let typo = settle(
        Ok(Some(section("default", "polcy: none\n"))),
        &topo,
        state.path(),
    );
    assert!(
        typo.degraded
            .as_deref()
            .is_some_and(|d| d.contains("unknown field `polcy`")),
        "{typo:?}"
    );
    assert_eq!(typo.source, Source::LastGood);
}

#[test]
fn a_last_good_this_host_cannot_take_is_not_used_either() {
    let topo = small();
    let state = state_dir();
    keep_last_good(
        state.path(),
        &section("default", "reserved_cpus: \"0-63\"\n"),
    )
    .expect("kept");
    assert!(last_good(state.path(), &topo).is_err());
    let s = settle(
        Err(ConfigError::Invalid {
            origin: "/cfg".into(),
            message: "no group.gpu section".into(),
        }),
        &topo,
        state.path(),
    );
    assert_eq!(s.source, Source::Builtin);
    let why = s.degraded.expect("degraded");
    assert!(
        why.contains("no group.gpu section")
            && why.contains("last good configuration is not usable"),
        "{why}"
    );
}

/// Nested aliases (the "billion laughs"): 10^9 strings from under a KiB of text.
fn laughs() -> String {
    let mut text = format!("policy: &l0 [{}]\n", ["\"lol\""; 10].join(", "));
    for i in 1..=9 {
        let row = vec![format!("*l{}", i - 1); 10].join(", ");
        text.push_str(&format!("x{i}: &l{i} [{row}]\n"));
    }
    text
}

#[test]
fn a_section_of_aliases_is_refused_unexpanded_and_the_last_good_runs() {
    let topo = small();
    let state = state_dir();
    keep_last_good(state.path(), &section("default", "policy: restricted\n")).expect("kept");
    let bomb = section("node.n1", &laughs());
    let s = settle(Ok(Some(bomb)), &topo, state.path());
    assert_eq!(s.source, Source::LastGood);
    assert_eq!(s.config.placement.policy, Policy::Restricted);
    let why = s.degraded.expect("degraded");
    assert!(
        why.contains("/cfg/node.n1") && why.contains("YAML aliases"),
        "{why}"
    );
    assert!(!why.contains('\n'), "one line: {why}");
}
