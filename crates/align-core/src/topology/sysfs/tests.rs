use super::*;

#[test]
fn masks_parse_in_kernel_format() {
    assert_eq!(parse_mask("3").map(|s| s.to_string()), Some("0-1".into()));
    assert_eq!(
        parse_mask("00000001,00000000,0000000f").map(|s| s.to_string()),
        Some("0-3,64".into())
    );
    assert!(parse_mask("zz").is_none());
    // A bit past MAX_ID: garbage, not a 512 MiB set.
    let huge = format!("1{}", "0".repeat((MAX_ID / 4) as usize));
    assert!(parse_mask(&huge).is_none());
}

#[test]
fn files_lose_trailing_nul_padding_and_huge_files_are_not_read() {
    let t = tempfile::tempdir().expect("tmp");
    let f = t.path().join("cpulist");
    fs::write(&f, b"0-3\n\0\0\0\0").expect("write");
    assert_eq!(read_str(&f).as_deref(), Some("0-3"));
    assert_eq!(read_list(&f).map(|s| s.to_string()), Some("0-3".into()));
    fs::write(&f, vec![b'1'; MAX_FILE as usize + 1]).expect("write");
    assert_eq!(read_str(&f), None);
}

#[test]
fn numbered_entries_skip_ids_no_machine_has() {
    let t = tempfile::tempdir().expect("tmp");
    for d in [
        "cpu0",
        "cpu2",
        "cpu4294967295",
        "cpu1048576",
        "cpu+1",
        "cpufreq",
    ] {
        fs::create_dir(t.path().join(d)).expect("mkdir");
    }
    let ids: Vec<u32> = numbered_entries(t.path(), "cpu")
        .expect("read")
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, vec![0, 2]);
}
