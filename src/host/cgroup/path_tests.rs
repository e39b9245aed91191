use super::*;

fn rel(p: &str) -> String {
    ContainerCgroup::parse(p)
        .map(|c| c.relative().display().to_string())
        .unwrap_or_else(|e| format!("error: {e}"))
}

#[test]
fn systemd_paths_map_to_the_scope_in_nested_slices() {
    assert_eq!(
        rel("kubepods-burstable-pod12_34.slice:cri-containerd:abc"),
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice/\
             cri-containerd-abc.scope"
    );
    assert_eq!(
        rel("kubepods-pod12.slice:crio:abc"),
        "kubepods.slice/kubepods-pod12.slice/crio-abc.scope"
    );
    // runc's defaults: an empty slice is system.slice; a name ending in .slice is the unit.
    assert_eq!(
        rel(":cri-containerd:abc"),
        "system.slice/cri-containerd-abc.scope"
    );
    assert_eq!(rel("-.slice:p:abc"), "p-abc.scope");
    assert_eq!(rel("a.slice:p:x.slice"), "a.slice/x.slice");
    let c = ContainerCgroup::parse("a-b.slice:crio:1").expect("parse");
    assert_eq!(c.driver(), CgroupDriver::Systemd);
    assert_eq!(c.proc_path(), "/a.slice/a-b.slice/crio-1.scope");
}

#[test]
fn cgroupfs_paths_are_normalised_below_the_root() {
    assert_eq!(rel("/k8s.io/abc"), "k8s.io/abc");
    assert_eq!(rel("k8s.io//./abc/"), "k8s.io/abc");
    let c = ContainerCgroup::parse("/k8s.io/abc").expect("parse");
    assert_eq!(c.driver(), CgroupDriver::Cgroupfs);
}

#[test]
fn paths_that_would_leave_the_root_or_are_malformed_are_refused() {
    for bad in [
        "/../../../../tmp/x",
        "/k8s.io/../../etc",
        "..",
        "",
        "/",
        "  ",
        "/a\0b",
        "kubepods-x.slice:cri-containerd:../../../tmp/x",
        "kubepods-x.slice:../..:id",
        "kubepods-x.slice:p:..",
        "kubepods-x.slice:p:",
        "../x.slice:p:id",
        "kubepods--x.slice:p:id",
        "-kubepods.slice:p:id",
        "notaslice:p:id",
        "a:b",
        "a.slice:b:c:d",
    ] {
        assert!(ContainerCgroup::parse(bad).is_err(), "{bad:?} accepted");
    }
    let long = format!("/{}", "a/".repeat(3000));
    assert_eq!(
        ContainerCgroup::parse(&long),
        Err(CgroupPathError::TooLong { len: long.len() })
    );
    let e = ContainerCgroup::parse("/../../../../tmp/x").expect_err("refused");
    assert!(e.to_string().contains("`..`"), "{e}");
}

#[test]
fn holds_compares_whole_components() {
    let c = ContainerCgroup::parse("/k8s.io/a").expect("parse");
    assert!(c.holds("/k8s.io/a"));
    assert!(c.holds("/k8s.io/a/sub"));
    assert!(!c.holds("/k8s.io/ab"));
    assert!(!c.holds("/k8s.io"));
    assert!(!c.holds("/other/k8s.io/a"));
    let s = ContainerCgroup::parse("k-p.slice:crio:a").expect("parse");
    assert!(s.holds("/k.slice/k-p.slice/crio-a.scope"));
    assert!(!s.holds("/k.slice/k-p.slice/crio-conmon-a.scope"));
}

#[test]
fn container_ids_match_whole_names_and_never_a_monitor() {
    assert!(names_container("abc", "abc"));
    assert!(names_container("crio-abc", "abc"));
    assert!(names_container("cri-containerd-abc.scope", "abc"));
    assert!(names_container("crio-abc.scope", "abc"));
    assert!(!names_container("crio-conmon-abc.scope", "abc"));
    assert!(!names_container("crio-conmon-abc", "abc"));
    assert!(!names_container("abcd", "abc"));
    assert!(!names_container("xabc", "abc"));
    assert!(!names_container("kubepods.slice", "a"));
    assert!(!names_container("a", ""));
}
