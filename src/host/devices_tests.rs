use super::*;

#[test]
fn host_devices_reads_real_char_nodes() {
    // /dev/null exists on every Linux host: char 1:3.
    let d = HostDevices::new("/")
        .lookup("/dev/null")
        .expect("/dev/null");
    assert_eq!((d.kind.as_str(), d.major, d.minor), ("c", 1, 3));
    assert!(HostDevices::new("/").lookup("/etc/hostname").is_none());
    assert!(HostDevices::new("/nonexistent-root")
        .lookup("/dev/null")
        .is_none());
}

#[test]
fn systemd_can_name_a_device_with_a_dev_char_link_or_a_sys_dev_char_entry() {
    let t = tempfile::tempdir().expect("tmp");
    let node = |minor| DeviceNode {
        path: format!("/dev/nvidia{minor}"),
        kind: "c".into(),
        major: 195,
        minor,
        file_mode: None,
        uid: None,
        gid: None,
    };
    std::fs::create_dir_all(t.path().join("dev/char")).expect("mkdir");
    std::fs::create_dir_all(t.path().join("sys/dev/char/195:1")).expect("mkdir");
    std::fs::write(t.path().join("dev/nvidia0"), "").expect("node stand-in");
    std::os::unix::fs::symlink("../nvidia0", t.path().join("dev/char/195:0")).expect("link");
    std::os::unix::fs::symlink("../nvidia9", t.path().join("dev/char/195:9")).expect("link");
    let host = HostDevices::new(t.path());
    assert!(host.systemd_can_name(&node(0)), "link");
    assert!(host.systemd_can_name(&node(1)), "/sys/dev/char entry");
    assert!(!host.systemd_can_name(&node(2)), "neither");
    assert!(!host.systemd_can_name(&node(9)), "dangling link");
}

/// A fake host root whose `/dev/nvidia0` is a null device (char 1:3).
fn root_with_gpu_stand_in() -> (tempfile::TempDir, DeviceNode) {
    let t = tempfile::tempdir().expect("tmp");
    crate::host::testing::char_node(t.path(), "dev/nvidia0", 1, 3);
    let node = HostDevices::new(t.path())
        .lookup("/dev/nvidia0")
        .expect("stand-in node");
    (t, node)
}

#[test]
fn the_dev_char_link_is_made_relative_and_then_names_the_device() {
    let (t, node) = root_with_gpu_stand_in();
    let host = HostDevices::new(t.path());
    assert!(!host.systemd_can_name(&node), "no link at start");
    // No /dev/char at all (no udev): made, with udev's mode.
    let link = host.create_systemd_link(&node).expect("link made");
    assert_eq!(link, t.path().join("dev/char/1:3"));
    assert_eq!(
        std::fs::read_link(&link).expect("a link"),
        PathBuf::from("../nvidia0")
    );
    let mode = std::fs::metadata(t.path().join("dev/char"))
        .expect("dir")
        .mode()
        & 0o777;
    assert_eq!(mode, 0o755);
    assert!(host.systemd_can_name(&node));
    // Made again (another container, another daemon): the same link is fine.
    assert_eq!(host.create_systemd_link(&node).expect("again"), link);
}

#[test]
fn no_link_is_made_to_the_wrong_node_outside_dev_or_over_something_else() {
    let (t, node) = root_with_gpu_stand_in();
    let host = HostDevices::new(t.path());
    let other = DeviceNode {
        minor: 4,
        ..node.clone()
    };
    assert!(matches!(
        host.create_systemd_link(&other),
        Err(LinkError::NotTheNode { .. })
    ));
    for path in [
        "/dev/../etc/nvidia0",
        "/etc/nvidia0",
        "/dev/",
        "/dev//nvidia0",
    ] {
        let n = DeviceNode {
            path: path.into(),
            ..node.clone()
        };
        assert!(
            matches!(host.create_systemd_link(&n), Err(LinkError::NotADevice(_))),
            "{path}"
        );
    }
    // A dangling link already at /dev/char/1:3 is left alone.
    std::fs::create_dir_all(t.path().join("dev/char")).expect("mkdir");
    std::os::unix::fs::symlink("../gone", t.path().join("dev/char/1:3")).expect("link");
    assert!(matches!(
        host.create_systemd_link(&node),
        Err(LinkError::Occupied(_))
    ));
    assert!(!host.systemd_can_name(&node));
}

#[test]
fn an_unwritable_dev_char_is_an_io_error() {
    let (t, node) = root_with_gpu_stand_in();
    // A file where the directory should be fails for root too (a read-only /dev needs a
    // mount, which a unit test cannot make; the kernel's answer takes the same path).
    std::fs::write(t.path().join("dev/char"), "").expect("file");
    let err = HostDevices::new(t.path())
        .create_systemd_link(&node)
        .expect_err("cannot link");
    assert!(matches!(err, LinkError::Io { .. }), "{err}");
}

#[test]
fn only_numbered_gpu_and_uverbs_nodes_are_named() {
    assert_eq!(nvidia_minor("/dev/nvidia3"), Some(3));
    assert_eq!(nvidia_minor("/dev/nvidiactl"), None);
    assert_eq!(nvidia_minor("/dev/nvidia"), None);
    assert_eq!(uverbs_name("/dev/infiniband/uverbs1"), Some("uverbs1"));
    assert_eq!(uverbs_name("/dev/infiniband/rdma_cm"), None);
}

/// Under a host root, links are the host's: an absolute target is the host's path, and a link
/// out of its `/dev` (to the daemon's `/dev/null`, up with `..`, to `/etc`) leads nowhere.
#[test]
fn lookups_never_follow_a_link_out_of_the_hosts_dev() {
    let t = tempfile::tempdir().expect("tmp");
    let dev = t.path().join("dev");
    std::fs::create_dir_all(dev.join("dri")).expect("mkdir");
    std::os::unix::fs::symlink("/dev/null", dev.join("nvidia0")).expect("link");
    std::os::unix::fs::symlink("../../../../../dev/null", dev.join("nvidia1")).expect("link");
    std::os::unix::fs::symlink("/etc", dev.join("infiniband")).expect("link");
    let host = HostDevices::new(t.path());
    for path in ["/dev/nvidia0", "/dev/nvidia1", "/dev/infiniband/uverbs0"] {
        assert_eq!(host.lookup(path), None, "{path}");
    }
    // Links within the host's `/dev` are followed, absolute ones taken under the root.
    crate::host::testing::char_node(t.path(), "dev/null", 1, 3);
    std::os::unix::fs::symlink("../renderD128", dev.join("dri/by-path")).expect("link");
    crate::host::testing::char_node(t.path(), "dev/renderD128", 226, 128);
    let n = host.lookup("/dev/nvidia0").expect("the host's /dev/null");
    assert_eq!((n.major, n.minor), (1, 3));
    let r = host.lookup("/dev/dri/by-path").expect("within /dev");
    assert_eq!(
        (r.major, r.minor, r.path.as_str()),
        (226, 128, "/dev/dri/by-path")
    );
}

/// A host `/dev/char` that is a link is neither written through nor believed.
#[test]
fn a_dev_char_that_is_a_link_is_not_followed() {
    let (t, node) = root_with_gpu_stand_in();
    let elsewhere = tempfile::tempdir().expect("tmp");
    std::os::unix::fs::symlink("../nvidia0", elsewhere.path().join("1:3")).expect("link");
    std::os::unix::fs::symlink(elsewhere.path(), t.path().join("dev/char")).expect("link");
    let host = HostDevices::new(t.path());
    assert!(!host.systemd_can_name(&node));
    let err = host.create_systemd_link(&node).expect_err("through a link");
    assert!(matches!(err, LinkError::LinkedDir(_)), "{err}");
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).expect("dir").count(),
        1,
        "nothing written there"
    );
}
