use super::*;

const HYBRID: &str = "\
25 1 0:23 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755\n\
26 25 0:24 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
27 25 0:25 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n\
30 25 0:28 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n";

#[test]
fn hybrid_hosts_use_the_v1_cpuset_mount_and_unified_ones_the_v2_mount() {
    let m = CgroupMounts::parse(Path::new("/r"), HYBRID);
    let c = m.cpuset().expect("cpuset");
    assert_eq!(
        (c.point.as_path(), c.v2),
        (Path::new("/r/sys/fs/cgroup/cpuset"), false)
    );
    let v2 = CgroupMounts::parse(
        Path::new("/"),
        "26 1 0:24 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
    );
    let c = v2.cpuset().expect("v2");
    assert_eq!(
        (c.point.as_path(), c.v2),
        (Path::new("/sys/fs/cgroup"), true)
    );
    assert!(CgroupMounts::parse(Path::new("/"), "garbage\n")
        .cpuset()
        .is_none());
}

#[test]
fn a_bind_mounted_sub_cgroup_shows_only_what_is_below_its_root() {
    let m = CgroupMounts::parse(
        Path::new("/"),
        "30 25 0:28 /kubepods /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n",
    );
    let c = m.cpuset().expect("cpuset");
    let comps = |s: &str| -> Vec<String> { s.split('/').map(String::from).collect() };
    let inside = comps("kubepods/pod1/abc");
    assert_eq!(
        c.below_root(&inside),
        Some(&inside[1..]),
        "the mount's root is stripped"
    );
    assert_eq!(c.below_root(&comps("other/abc")), None);
}

#[test]
fn octal_escapes_in_mount_points_are_decoded() {
    assert_eq!(unescape(r"/a\040b\134c"), r"/a b\c");
    assert_eq!(unescape(r"/a\04"), r"/a\04");
    assert_eq!(unescape("/plain"), "/plain");
}

#[test]
fn a_cgroup_directory_reached_through_a_symlink_out_of_the_mount_is_refused() {
    let t = tempfile::tempdir().expect("tmp");
    let point = t.path().join("sys/fs/cgroup");
    std::fs::create_dir_all(point.join("real")).expect("mkdir");
    std::fs::create_dir_all(t.path().join("elsewhere")).expect("mkdir");
    std::os::unix::fs::symlink(t.path().join("elsewhere"), point.join("link")).expect("symlink");
    let m = Mount {
        root: "/".into(),
        point,
        v2: true,
    };
    assert!(m.dir_of(&["real".to_string()]).expect("ok").is_some());
    assert!(m.dir_of(&["absent".to_string()]).expect("ok").is_none());
    let e = m.dir_of(&["link".to_string()]).expect_err("escapes");
    assert!(e.to_string().contains("outside the cgroup mount"), "{e}");
}

#[test]
fn the_memory_hierarchy_is_v1s_memory_mount_else_the_unified_one() {
    let text = format!("{HYBRID}31 25 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
    let m = CgroupMounts::parse(Path::new("/r"), &text);
    let mem = m.memory().expect("memory");
    assert_eq!(
        (mem.point.as_path(), mem.v2),
        (Path::new("/r/sys/fs/cgroup/memory"), false)
    );
    // Without one (hybrid hosts' cgroup2 holds no controller, but it is all there is).
    let m = CgroupMounts::parse(Path::new("/r"), HYBRID);
    assert!(m.memory().is_some_and(|mem| mem.v2));
    // cpuset and memory co-mounted: one mount serves both.
    let m = CgroupMounts::parse(
        Path::new("/"),
        "30 25 0:28 / /sys/fs/cgroup/cpuset,memory rw - cgroup cgroup rw,cpuset,memory\n",
    );
    assert_eq!(m.memory(), m.cpuset());
    assert!(m.memory().is_some());
}
