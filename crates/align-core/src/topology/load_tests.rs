use super::*;

#[test]
fn a_shipped_name_a_capture_and_a_missing_file_each_load_or_say_why() {
    let desc = load(&Source::Description("dgx1-v100".into()), None).expect("shipped");
    assert_eq!(desc.gpus.len(), 8);
    let t = tempfile::tempdir().expect("tmp");
    let capture = t.path().join("topo.json");
    std::fs::write(&capture, serde_json::to_string(&desc).expect("json")).expect("write");
    let again = load(&Source::Description(capture.display().to_string()), None).expect("capture");
    assert_eq!(again, desc);
    let err = load(&Source::HwlocXml(t.path().join("none.xml")), None).expect_err("missing");
    assert!(err.to_string().starts_with("importing hwloc XML "), "{err}");
    let err = load(&Source::Description("no-such-host".into()), None).expect_err("unknown");
    assert_eq!(err.to_string(), "loading host description no-such-host");
}
