//! The memory policy through the real engine: sent to a runtime whose NRI carries it, left
//! out (never failing the creation) and marked on the record where it does not, counted both
//! ways; a bad annotation value refuses the container naming the valid ones.

use super::kubernetes::{events, kctr, kpod, real};
use super::*;
use crate::placement::{MemPolicy, MemoryPolicy};

fn interleaving() -> Config {
    let mut cfg = Config::default();
    cfg.placement.mempolicy = MemPolicy::Interleave;
    cfg
}

#[test]
fn a_runtime_that_carries_it_gets_the_policy_over_the_containers_memory_nodes() {
    let mut e = real(interleaving(), "");
    e.set_runtime_mempolicy("containerd v2.3.2 (NRI 0.12.2)", true);
    let p = kpod("ns", "p", &[]);
    let out = e
        .create_container(&p, &kctr(&p, "c1", "app", 2000, Some(2000)))
        .expect("placed")
        .expect("not exempt");
    let mems: crate::topology::NodeSet = out.adjustment.cpuset_mems.parse().expect("mems");
    assert_eq!(
        out.adjustment.memory_policy,
        Some(MemoryPolicy {
            mode: MemPolicy::Interleave,
            nodes: mems,
        })
    );
    assert!(!e.records().containers["c1"].mempolicy_left_out);
    assert!(
        events(&e).contains("nri_align_mempolicy_total{outcome=\"sent\"} 1"),
        "{}",
        events(&e)
    );
}

#[test]
fn an_older_runtime_creates_the_container_without_it_and_the_record_says_so() {
    let mut e = real(interleaving(), "");
    e.set_runtime_mempolicy("containerd 2.1.9 (NRI 0.8.0, inferred)", false);
    let p = kpod("ns", "p", &[]);
    for id in ["c1", "c2"] {
        let out = e
            .create_container(&p, &kctr(&p, id, id, 1000, Some(1000)))
            .expect("placed")
            .expect("not exempt");
        assert_eq!(out.adjustment.memory_policy, None);
        let rec = &e.records().containers[id];
        assert!(rec.mempolicy_left_out, "{id}");
        assert!(
            rec.assignment.mempolicy.is_some(),
            "{id}: the decision keeps it"
        );
    }
    assert!(
        events(&e).contains("nri_align_mempolicy_total{outcome=\"unsupported\"} 2"),
        "{}",
        events(&e)
    );
    // `none` (the default) sends nothing and counts nothing.
    let mut e = real(Config::default(), "");
    e.set_runtime_mempolicy("containerd v2.3.2 (NRI 0.12.2)", true);
    let out = e
        .create_container(&p, &kctr(&p, "c3", "app", 1000, Some(1000)))
        .expect("placed")
        .expect("not exempt");
    assert_eq!(out.adjustment.memory_policy, None);
    assert!(!events(&e).contains("nri_align_mempolicy_total"));
}

#[test]
fn a_bad_mempolicy_annotation_refuses_the_container_naming_the_valid_ones() {
    let mut e = real(Config::default(), "");
    let p = kpod("ns", "p", &[("mempolicy.nri-align.io/pod", "nearest")]);
    let err = e
        .create_container(&p, &kctr(&p, "c1", "app", 1000, Some(1000)))
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("expected one of: none bind interleave preferred-many weighted-interleave"),
        "{err}"
    );
}
