use super::*;
use std::os::unix::fs::PermissionsExt;

fn file(dir: &Path, name: &str, text: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    p
}

#[test]
fn regular_files_are_read_and_everything_else_is_refused_at_once() {
    let t = tempfile::tempdir().expect("tmp");
    let ok = file(t.path(), "c.yaml", b"policy: none\n");
    assert_eq!(read_config_file(&ok).expect("read"), b"policy: none\n");
    // Through a symlink, as a mounted ConfigMap's key is.
    std::os::unix::fs::symlink(&ok, t.path().join("link.yaml")).expect("link");
    assert!(read_config_file(&t.path().join("link.yaml")).is_ok());

    // A FIFO with no writer: refused without waiting for one.
    let fifo = t.path().join("fifo.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let err = read_config_file(&fifo).expect_err("a FIFO is refused");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot read config {}: it is a FIFO, not a regular file",
            fifo.display()
        )
    );
    let err = read_config_file(t.path()).expect_err("a directory is refused");
    assert!(err.to_string().contains("a directory"), "{err}");
    let err = read_config_file(Path::new("/dev/zero")).expect_err("a device is refused");
    assert!(err.to_string().contains("a character device"), "{err}");

    let big = file(
        t.path(),
        "big.yaml",
        &vec![b'#'; usize::try_from(MAX_CONFIG_BYTES).expect("size") + 1],
    );
    let err = read_config_file(&big).expect_err("too large");
    assert!(
        err.to_string().contains("larger than 1048576 bytes"),
        "{err}"
    );
}

/// Stands in for a read that hangs in the kernel (a dead NFS server): blocks in open()
/// of the FIFO `hang.fifo` next to the path until a writer opens it.
fn hanging_read(path: &Path) -> Result<Vec<u8>, ConfigError> {
    let fifo = path.with_file_name("hang.fifo");
    let _ = std::fs::File::open(fifo);
    read_config_file(path)
}

#[tokio::test]
async fn a_hung_read_times_out_without_blocking_a_worker_and_is_not_started_twice() {
    let t = tempfile::tempdir().expect("tmp");
    let fifo = t.path().join("hang.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let path = file(t.path(), "c.yaml", b"policy: none\n");
    let mut reader = FileReader::new(Duration::from_millis(200));
    reader.read = hanging_read;
    // A current-thread runtime: had the read blocked this thread, the timeout could
    // never fire.
    match reader.read(&path).await {
        Err(ConfigError::ReadTimeout { after, .. }) => {
            assert_eq!(after, Duration::from_millis(200))
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    // While that thread still hangs, a second read is refused at once.
    let err = reader.read(&path).await.expect_err("busy");
    assert!(
        err.to_string()
            .contains("an earlier read has not returned for"),
        "{err}"
    );
    // The kernel returns (a writer opens the FIFO): the reader works again.
    let _writer = std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .expect("writer");
    let mut bytes = None;
    for _ in 0..100 {
        match reader.read(&path).await {
            Ok(b) => {
                bytes = Some(b);
                break;
            }
            Err(ConfigError::ReadHung { .. }) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(bytes.as_deref(), Some(&b"policy: none\n"[..]));
}

#[test]
fn an_offline_lint_reads_a_file_of_any_mode_the_daemon_refuses() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().expect("tmp");
    let p = t.path().join("draft.yaml");
    std::fs::write(&p, "policy: none\n").expect("write");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    assert!(read_config_file(&p).is_err(), "the daemon refuses it");
    assert_eq!(
        read_config_file_to_lint(&p).expect("the lint reads it"),
        b"policy: none\n"
    );
    // Still only regular files: a FIFO is refused at once.
    let fifo = t.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
    assert!(read_config_file_to_lint(&fifo).is_err());
}
