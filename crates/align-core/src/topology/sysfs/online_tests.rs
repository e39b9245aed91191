use super::*;

fn tree(cpus: Option<&str>, has_memory: Option<&str>, online: Option<&str>) -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tmp");
    let cpu = t.path().join("sys/devices/system/cpu");
    let node = t.path().join("sys/devices/system/node");
    std::fs::create_dir_all(&cpu).expect("cpu dir");
    std::fs::create_dir_all(&node).expect("node dir");
    if let Some(c) = cpus {
        std::fs::write(cpu.join("online"), c).expect("online");
    }
    if let Some(m) = has_memory {
        std::fs::write(node.join("has_memory"), m).expect("has_memory");
    }
    if let Some(o) = online {
        std::fs::write(node.join("online"), o).expect("node online");
    }
    t
}

#[test]
fn reads_cpus_and_memory_nodes() {
    let t = tree(Some("0-3,6\n"), Some("0-1\n"), Some("0-2\n"));
    let o = read_online(t.path()).expect("read");
    assert_eq!(o.cpus.to_string(), "0-3,6");
    assert_eq!(o.mem_nodes.expect("nodes").to_string(), "0-1");
}

#[test]
fn without_has_memory_the_online_nodes_count() {
    let t = tree(Some("0-1\0\0"), None, Some("0,2\n"));
    let o = read_online(t.path()).expect("read");
    assert_eq!(o.cpus.to_string(), "0-1");
    assert_eq!(o.mem_nodes.expect("nodes").to_string(), "0,2");
}

#[test]
fn a_host_without_node_directory_follows_cpus_only() {
    let t = tempfile::tempdir().expect("tmp");
    let cpu = t.path().join("sys/devices/system/cpu");
    std::fs::create_dir_all(&cpu).expect("dir");
    std::fs::write(cpu.join("online"), "0-7\n").expect("online");
    let o = read_online(t.path()).expect("read");
    assert_eq!(o.cpus.len(), 8);
    assert_eq!(o.mem_nodes, None);
}

#[test]
fn each_failure_has_its_kind() {
    let missing = tree(None, Some("0"), None);
    let e = read_online(missing.path()).expect_err("missing");
    assert_eq!(e.kind(), "missing");
    assert!(e.to_string().ends_with("cpu/online is missing"), "{e}");

    for half in ["0-", "0-3,", "0-3,5-", "x"] {
        let t = tree(Some(half), Some("0"), None);
        let e = read_online(t.path()).expect_err(half);
        assert_eq!(e.kind(), "malformed", "{half}: {e}");
    }
    let empty = tree(Some("\n"), Some("0"), None);
    assert_eq!(
        read_online(empty.path()).expect_err("empty").kind(),
        "empty"
    );

    let bad_nodes = tree(Some("0-3"), Some("0-"), None);
    let e = read_online(bad_nodes.path()).expect_err("nodes");
    assert_eq!(e.kind(), "malformed");
    assert!(e.to_string().contains("has_memory"), "{e}");

    let no_nodes = tree(Some("0-3"), None, None);
    assert_eq!(
        read_online(no_nodes.path()).expect_err("nodes").kind(),
        "missing"
    );

    let beyond = tree(Some("0-99999"), Some("0"), None);
    assert_eq!(
        read_online(beyond.path()).expect_err("ids").kind(),
        "malformed"
    );
}

#[test]
fn a_directory_in_place_of_the_file_is_unreadable() {
    let t = tree(None, Some("0"), None);
    std::fs::create_dir(t.path().join("sys/devices/system/cpu/online")).expect("dir");
    let e = read_online(t.path()).expect_err("dir");
    assert_eq!(e.kind(), "unreadable", "{e}");
}

/// `f` on a thread: its result, or a failure if it has not returned within five seconds (a
/// read that waits on a FIFO never would).
fn promptly<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(5))
        .expect("the read blocked on a FIFO")
}

#[test]
fn a_fifo_in_place_of_online_is_refused_without_waiting() {
    let t = tree(None, Some("0"), None);
    let fifo = t.path().join("sys/devices/system/cpu/online");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
    let root = t.path().to_path_buf();
    let e = promptly(move || read_online(&root)).expect_err("a FIFO");
    assert_eq!(e.kind(), "unreadable", "{e}");
    assert!(e.to_string().contains("FIFO"), "{e}");
    // The same for the attributes the topology reader reads (`read_str`).
    let cpu0 = t.path().join("sys/devices/system/cpu/cpu0");
    std::fs::create_dir_all(&cpu0).expect("mkdir");
    let online = cpu0.join("online");
    nix::unistd::mkfifo(&online, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
    assert_eq!(promptly(move || super::super::read_str(&online)), None);
}
