use super::*;

#[test]
fn world_and_group_writable_files_and_missing_paths_are_refused() {
    let t = tempfile::tempdir().expect("tmp");
    let f = t.path().join("c.yaml");
    std::fs::write(&f, "").expect("write");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert!(refuse_untrusted(&f).is_ok());
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o646)).expect("chmod");
    let err = refuse_untrusted(&f).expect_err("refused").to_string();
    assert!(err.contains("world-writable"), "{err}");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o664)).expect("chmod");
    let err = refuse_untrusted(&f).expect_err("refused").to_string();
    assert!(err.contains("group-writable (mode 0664)"), "{err}");
    let missing = refuse_untrusted(&t.path().join("nope")).expect_err("missing");
    assert!(missing.to_string().starts_with("stat "), "{missing}");
}

#[test]
fn a_file_of_another_user_is_refused() {
    let euid = nix::unistd::geteuid().as_raw();
    let other = if euid == 4242 { 4243 } else { 4242 };
    let err = check_metadata(Path::new("/x"), 0o600, other).expect_err("refused");
    assert!(
        err.to_string().contains(&format!("owned by uid {other}")),
        "{err}"
    );
    assert!(check_metadata(Path::new("/x"), 0o600, euid).is_ok());
    assert!(
        check_metadata(Path::new("/x"), 0o600, 0).is_ok(),
        "root is trusted"
    );
}

#[test]
fn a_chowned_file_is_refused_when_running_as_root() {
    if !nix::unistd::geteuid().is_root() {
        test_support::skip::skip(
            "a_chowned_file_is_refused_when_running_as_root",
            "needs root to chown",
        );
        return;
    }
    let t = tempfile::tempdir().expect("tmp");
    let f = t.path().join("c.yaml");
    std::fs::write(&f, "").expect("write");
    std::os::unix::fs::chown(&f, Some(4242), None).expect("chown");
    let err = refuse_untrusted(&f).expect_err("refused").to_string();
    assert!(err.contains("owned by uid 4242"), "{err}");
}
