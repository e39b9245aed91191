use super::*;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;

#[test]
fn a_second_writer_is_refused_and_a_reader_is_not() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = t.path().join("state");
    let first = OwnedDir::open_exclusive(&dir).expect("first");
    let mode = std::fs::metadata(&dir).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let err = OwnedDir::open_exclusive(&dir).expect_err("locked");
    assert!(matches!(err, FileError::Locked(_)), "{err}");
    assert!(err.to_string().contains("another nri-align"), "{err}");
    assert!(OwnedDir::open_read_only(&dir).is_ok());
    drop(first);
    assert!(OwnedDir::open_exclusive(&dir).is_ok(), "free again");
}

#[test]
fn symlinks_and_fifos_are_never_opened() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = OwnedDir::open_exclusive(t.path()).expect("dir");
    let victim = t.path().join("victim");
    std::fs::write(&victim, "keep").expect("write");
    std::os::unix::fs::symlink(&victim, t.path().join("log")).expect("symlink");
    let err = dir.open_append("log").expect_err("symlink");
    assert!(err.to_string().contains("a symlink"), "{err}");
    assert!(dir.read("log").is_err());
    nix::unistd::mkfifo(&t.path().join("fifo"), Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let err = dir.read("fifo").expect_err("fifo");
    assert!(err.to_string().contains("a FIFO"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "keep");
}

#[test]
fn temp_files_get_fresh_unguessable_names() {
    let t = tempfile::tempdir().expect("tmp");
    let dir = OwnedDir::open_exclusive(t.path()).expect("dir");
    let (mut a, na) = dir.create_temp(".state").expect("a");
    let (_, nb) = dir.create_temp(".state").expect("b");
    assert_ne!(na, nb);
    assert!(na.starts_with(".state.") && na.ends_with(".tmp"), "{na}");
    a.write_all(b"x").expect("write");
    let mode = std::fs::metadata(t.path().join(&na))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    dir.rename(&na, "final").expect("rename");
    assert_eq!(dir.read("final").expect("read"), Some(b"x".to_vec()));
    dir.remove(&nb).expect("rm");
    dir.remove("absent").expect("absent is fine");
}

#[test]
fn group_writable_dirs_are_refused() {
    let t = tempfile::tempdir().expect("tmp");
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o770)).expect("chmod");
    let err = OwnedDir::open_exclusive(t.path()).expect_err("refused");
    assert!(err.to_string().contains("group-writable"), "{err}");
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let err = OwnedDir::open_read_only(t.path()).expect_err("refused");
    assert!(err.to_string().contains("world-writable"), "{err}");
}
