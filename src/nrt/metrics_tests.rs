use super::*;

#[test]
fn counters_are_exported_under_the_nri_align_nrt_prefix() {
    let m = NrtMetrics::default();
    let mut registry = Registry::with_prefix("nri_align");
    m.register(&mut registry);
    m.attempt();
    m.failure("unreachable");
    m.success("created");
    m.set_not_owned(Some("foreign"));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    assert!(
        text.contains("nri_align_nrt_publish_attempts_total 1"),
        "{text}"
    );
    assert!(
        text.contains("nri_align_nrt_publish_failures_total{reason=\"unreachable\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("nri_align_nrt_publishes_total{outcome=\"created\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("nri_align_nrt_not_owned{reason=\"foreign\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("nri_align_nrt_not_owned{reason=\"contested\"} 0"),
        "{text}"
    );
    assert_eq!(
        (m.attempts(), m.failures("unreachable"), m.conflicts()),
        (1, 1, 0)
    );
    m.set_not_owned(None);
    assert_eq!((m.not_owned("foreign"), m.not_owned("contested")), (0, 0));
}
