use super::*;

#[test]
fn extra_metrics_are_served_with_the_engine_ones() {
    let extra = Counter::<u64>::default();
    let m = Metrics::new_with(|r| r.register("extra", "A counter of another part", extra.clone()));
    extra.inc();
    m.set_free(&[NodeFreeSample {
        node: 3,
        rdma_nics: 2,
        ..Default::default()
    }]);
    let text = m.encode();
    assert!(text.contains("nri_align_extra_total 1"), "{text}");
    assert!(
        text.contains("nri_align_free_rdma_nics{numa_node=\"3\"} 2"),
        "{text}"
    );
}

#[test]
fn local_memory_series_are_the_last_samples_containers_only() {
    let m = Metrics::new();
    let labels = |pod: &str| ContainerLabels {
        namespace: "ml".into(),
        pod: pod.into(),
        container: "train".into(),
    };
    m.set_local_memory(&[(labels("a"), 0.95), (labels("b"), 0.25)]);
    let text = m.encode();
    let line = "nri_align_container_local_memory_ratio{namespace=\"ml\",pod=\"a\",container=\"train\"} 0.95";
    assert!(text.contains(line), "{text}");
    assert!(
        text.contains("pod=\"b\",container=\"train\"} 0.25"),
        "{text}"
    );
    // b is gone: its series goes with it.
    m.set_local_memory(&[(labels("a"), 0.5)]);
    let text = m.encode();
    assert!(
        text.contains("pod=\"a\",container=\"train\"} 0.5"),
        "{text}"
    );
    assert!(!text.contains("pod=\"b\""), "{text}");
}
