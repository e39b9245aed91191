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
