use super::*;

#[test]
fn parses_runtime_version_strings() {
    assert_eq!(SemVer::parse("v1.7.24"), Some(SemVer::new(1, 7, 24)));
    assert_eq!(
        SemVer::parse("1.7.24~ds1-6+b2"),
        Some(SemVer::new(1, 7, 24))
    );
    assert_eq!(SemVer::parse("2.1.4-rc.1"), Some(SemVer::new(2, 1, 4)));
    assert_eq!(
        SemVer::parse("v0.9.1-0.20250219030224-e597e7849f24"),
        Some(SemVer::new(0, 9, 1))
    );
    assert_eq!(SemVer::parse("1.7"), Some(SemVer::new(1, 7, 0)));
    assert_eq!(SemVer::parse("unknown"), None);
    assert_eq!(SemVer::parse(""), None);
}

#[test]
fn infers_nri_from_upstream_table() {
    let v = |r, s| infer_nri_version(r, s).map(|v| v.to_string());
    assert_eq!(v("containerd", "v1.7.24").as_deref(), Some("v0.6.1"));
    assert_eq!(v("containerd", "1.7.24~ds1-6").as_deref(), Some("v0.6.1"));
    assert_eq!(v("containerd", "v1.7.26").as_deref(), Some("v0.8.0"));
    assert_eq!(v("containerd", "v2.1.4").as_deref(), Some("v0.8.0"));
    assert_eq!(v("containerd", "v2.2.0").as_deref(), Some("v0.10.0"));
    assert_eq!(v("containerd", "v2.2.1").as_deref(), Some("v0.11.0"));
    assert_eq!(v("cri-o", "1.31.3").as_deref(), Some("v0.6.1"));
    assert_eq!(v("cri-o", "1.34.0").as_deref(), Some("v0.10.0"));
    assert_eq!(v("podman", "5.0.0"), None);
    assert_eq!(v("containerd", "garbage"), None);
}

#[test]
fn old_runtimes_never_get_events_above_remove_container() {
    let old = supported_events(infer_nri_version("containerd", "1.7.24"));
    assert!(old.contains(Event::REMOVE_CONTAINER));
    assert!(!old.contains(Event::UPDATE_POD_SANDBOX));
    assert!(!old.contains(Event::VALIDATE_CONTAINER_ADJUSTMENT));
    assert_eq!(old, supported_events(None));
    let new = supported_events(Some(SemVer::new(0, 12, 0)));
    assert!(new.contains(Event::POST_UPDATE_POD_SANDBOX));
}

#[test]
fn reported_version_wins_over_inference() {
    let req = ConfigureRequest {
        runtime_name: "containerd".into(),
        runtime_version: "v2.1.0".into(),
        NRI_version: "v0.12.1".into(),
        request_timeout: 2000,
        ..Default::default()
    };
    let info = RuntimeInfo::from_configure(&req);
    assert_eq!(info.nri_version, Some(SemVer::new(0, 12, 1)));
    assert_eq!(info.nri_version_source, NriVersionSource::Reported);
    assert!(info.nri_at_least(NRI_PER_EVENT_RPCS));
    assert_eq!(info.request_timeout, Duration::from_secs(2));
    assert_eq!(info.to_string(), "containerd v2.1.0 (NRI v0.12.1)");
}
