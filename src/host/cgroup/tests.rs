//! The cgroup layer on trees in a temporary directory: v1 (this host's layout), v2 with the
//! systemd driver's slices and scopes, and runtime paths that try to leave the cgroup root.

use std::fs;
use std::path::Path;

use super::*;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs::write(p, text).expect("write");
}

fn set(s: &str) -> IdSet {
    s.parse().expect("set")
}

/// cgroup v1 with cpuset at /sys/fs/cgroup/cpuset and cgroup2 at /sys/fs/cgroup/unified (this
/// host's hybrid layout), one container `/k8s.io/abc` on CPUs `cpus`.
fn v1_host(root: &Path, cpus: &str) {
    write(
        root,
        "proc/self/mountinfo",
        "26 25 0:24 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
         30 25 0:26 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset\n",
    );
    write(
        root,
        "sys/fs/cgroup/cpuset/k8s.io/abc/cpuset.cpus",
        &format!("{cpus}\n"),
    );
    write(root, "sys/fs/cgroup/cpuset/k8s.io/abc/cpuset.mems", "0\n");
}

/// cgroup v2 with systemd slices: the scope of `cri-containerd-abc` in a Burstable pod slice,
/// CRI-O's conmon scope beside it, `cpuset.cpus` unset (empty) as v2 leaves it.
const SCOPE: &str = "sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/\
                     kubepods-burstable-pod1_2.slice/cri-containerd-abc.scope";
const SYSTEMD_PATH: &str = "kubepods-burstable-pod1_2.slice:cri-containerd:abc";

fn v2_systemd_host(root: &Path) {
    write(
        root,
        "proc/self/mountinfo",
        "26 1 0:24 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
    );
    write(root, &format!("{SCOPE}/cpuset.cpus"), "\n");
    write(root, &format!("{SCOPE}/cpuset.cpus.effective"), "0-7\n");
    write(root, &format!("{SCOPE}/cpuset.mems"), "\n");
    write(root, &format!("{SCOPE}/cpuset.mems.effective"), "0-1\n");
}

#[test]
fn a_lost_cpuset_is_repaired_in_the_v1_cgroup_and_a_matching_one_left_alone() {
    let t = tempfile::tempdir().expect("tmp");
    v1_host(t.path(), "0-3");
    let file = t.path().join("sys/fs/cgroup/cpuset/k8s.io/abc/cpuset.cpus");
    let had = repair_cpuset_under(t.path(), "/k8s.io/abc", &set("2-3")).expect("repair");
    assert_eq!(had, Some(set("0-3")));
    assert_eq!(fs::read_to_string(&file).expect("read"), "2-3");
    assert_eq!(
        repair_cpuset_under(t.path(), "/k8s.io/abc", &set("2-3")).expect("again"),
        None
    );
    // Not there: nothing to do, nothing created.
    assert_eq!(
        repair_cpuset_under(t.path(), "/k8s.io/gone", &set("2-3")).expect("gone"),
        None
    );
    assert!(!t.path().join("sys/fs/cgroup/cpuset/k8s.io/gone").exists());
}

#[test]
fn the_repair_finds_a_systemd_scope_from_its_slice_prefix_name_path() {
    let t = tempfile::tempdir().expect("tmp");
    v2_systemd_host(t.path());
    let had = repair_cpuset_under(t.path(), SYSTEMD_PATH, &set("2-3")).expect("repair");
    assert_eq!(
        had,
        Some(set("0-7")),
        "unset cpuset.cpus reads as its effective value"
    );
    assert_eq!(
        fs::read_to_string(t.path().join(SCOPE).join("cpuset.cpus")).expect("read"),
        "2-3"
    );
    let cg = ContainerCgroup::parse(SYSTEMD_PATH).expect("parse");
    let state = CgroupMounts::read(t.path())
        .read_cpuset(&cg)
        .expect("read")
        .expect("exists");
    assert_eq!((state.cpus, state.mems), (Ok(set("2-3")), Ok(set("0-1"))));
}

#[test]
fn runtime_paths_that_leave_the_cgroup_root_are_refused_and_nothing_is_written() {
    // Followed blindly, `/../../../../tmp/x` would write cpuset.cpus into /tmp/x.
    let t = tempfile::tempdir().expect("tmp");
    v1_host(t.path(), "0-3");
    write(t.path(), "tmp/x/cpuset.cpus", "0-3\n");
    for path in [
        "/../../../../tmp/x",
        "/k8s.io/../../../../tmp/x",
        "kubepods.slice:cri-containerd:../../../../../tmp/x",
        "../../../../tmp/x.slice:p:id",
    ] {
        let e = repair_cpuset_under(t.path(), path, &set("1")).expect_err(path);
        assert!(matches!(e, CgroupError::Path(_)), "{path}: {e}");
    }
    assert_eq!(
        fs::read_to_string(t.path().join("tmp/x/cpuset.cpus")).expect("read"),
        "0-3\n"
    );
}

#[test]
fn a_symlinked_cgroup_directory_and_an_empty_cpuset_are_never_written() {
    let t = tempfile::tempdir().expect("tmp");
    v1_host(t.path(), "0-3");
    write(t.path(), "tmp/x/cpuset.cpus", "0-3\n");
    std::os::unix::fs::symlink(
        t.path().join("tmp/x"),
        t.path().join("sys/fs/cgroup/cpuset/k8s.io/evil"),
    )
    .expect("symlink");
    let e = repair_cpuset_under(t.path(), "/k8s.io/evil", &set("1")).expect_err("escapes");
    assert!(e.to_string().contains("outside the cgroup mount"), "{e}");
    assert_eq!(
        fs::read_to_string(t.path().join("tmp/x/cpuset.cpus")).expect("read"),
        "0-3\n"
    );
    let e = repair_cpuset_under(t.path(), "/k8s.io/abc", &IdSet::new()).expect_err("empty");
    assert!(matches!(e, CgroupError::EmptyCpuset { .. }), "{e}");
}

#[test]
fn a_cgroup_without_the_file_is_not_given_one() {
    let t = tempfile::tempdir().expect("tmp");
    v1_host(t.path(), "0-3");
    fs::create_dir_all(t.path().join("sys/fs/cgroup/cpuset/k8s.io/bare")).expect("mkdir");
    let r = repair_cpuset_under(t.path(), "/k8s.io/bare", &set("1"));
    assert!(r.is_err(), "{r:?}");
    assert!(!t
        .path()
        .join("sys/fs/cgroup/cpuset/k8s.io/bare/cpuset.cpus")
        .exists());
}

/// cgroup v1 with `cpu,cpuacct` mounted, a Guaranteed pod `pod1-2` (cgroupfs driver) whose
/// quota the kubelet set to 2 CPUs, and its container `abc`.
fn v1_cpu_host(root: &Path) {
    write(
        root,
        "proc/self/mountinfo",
        "26 25 0:24 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
         31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n",
    );
    let pod = "sys/fs/cgroup/cpu,cpuacct/kubepods/pod1-2";
    write(root, &format!("{pod}/cpu.cfs_quota_us"), "200000\n");
    write(root, &format!("{pod}/abc/cpu.cfs_quota_us"), "-1\n");
}

#[test]
fn a_pods_v1_quota_is_lifted_and_put_back_only_over_none() {
    let t = tempfile::tempdir().expect("tmp");
    v1_cpu_host(t.path());
    let file = t
        .path()
        .join("sys/fs/cgroup/cpu,cpuacct/kubepods/pod1-2/cpu.cfs_quota_us");
    let path = "/kubepods/pod1-2/abc";
    let lift = set_pod_quota_under(t.path(), path, "1-2", PodQuota::Lift).expect("lift");
    assert_eq!(lift, Some(200_000));
    assert_eq!(fs::read_to_string(&file).expect("read").trim(), "-1");
    assert_eq!(
        set_pod_quota_under(t.path(), path, "1-2", PodQuota::Lift).expect("again"),
        None
    );
    let back = set_pod_quota_under(t.path(), path, "1-2", PodQuota::PutBack(200_000));
    assert_eq!(back.expect("put back"), Some(-1));
    assert_eq!(fs::read_to_string(&file).expect("read").trim(), "200000");
    // Never over a quota the kubelet wrote.
    let over = set_pod_quota_under(t.path(), path, "1-2", PodQuota::PutBack(300_000));
    assert_eq!(over.expect("left"), None);
    assert_eq!(fs::read_to_string(&file).expect("read").trim(), "200000");
}

#[test]
fn a_pods_v2_quota_is_lifted_in_its_systemd_slice() {
    let t = tempfile::tempdir().expect("tmp");
    v2_systemd_host(t.path());
    let slice = "sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/\
                 kubepods-burstable-pod1_2.slice";
    write(t.path(), &format!("{slice}/cpu.max"), "250000 100000\n");
    let lift = set_pod_quota_under(t.path(), SYSTEMD_PATH, "1-2", PodQuota::Lift).expect("lift");
    assert_eq!(lift, Some(250_000));
    let max = fs::read_to_string(t.path().join(format!("{slice}/cpu.max"))).expect("read");
    assert!(max.starts_with("max"), "{max}");
}

#[test]
fn a_parent_that_is_not_the_pods_cgroup_is_never_written() {
    let t = tempfile::tempdir().expect("tmp");
    v1_cpu_host(t.path());
    write(
        t.path(),
        "sys/fs/cgroup/cpu,cpuacct/k8s.io/cpu.cfs_quota_us",
        "100000\n",
    );
    // Another pod's UID, and a container directly under a runtime's group.
    let other = set_pod_quota_under(t.path(), "/kubepods/pod1-2/abc", "9-9", PodQuota::Lift);
    assert_eq!(other.expect("not the pod"), None);
    let flat = set_pod_quota_under(t.path(), "/k8s.io/abc", "1-2", PodQuota::Lift);
    assert_eq!(flat.expect("no pod cgroup"), None);
    let q = fs::read_to_string(
        t.path()
            .join("sys/fs/cgroup/cpu,cpuacct/k8s.io/cpu.cfs_quota_us"),
    );
    assert_eq!(q.expect("read").trim(), "100000");
}
