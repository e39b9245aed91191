use std::fs;

use super::*;

/// A tree with `files` (path, content) under its root.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tmp");
    for (path, text) in files {
        let p = t.path().join(path);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    }
    t
}

fn outside(t: &tempfile::TempDir, online: &str) -> (String, Vec<String>) {
    let fs = SysFs::new(t.path());
    let set = outside_cpuset(&fs, &online.parse().expect("online"));
    (set.to_string(), fs.warnings.into_inner())
}

#[test]
fn the_kubepods_cgroup_bounds_the_cpus_under_either_driver_and_version() {
    for (file, root) in [
        ("sys/fs/cgroup/kubepods.slice/cpuset.cpus.effective", ""),
        ("sys/fs/cgroup/kubepods/cpuset.cpus.effective", ""),
        ("sys/fs/cgroup/cpuset/kubepods/cpuset.cpus", ""),
        ("sys/fs/cgroup/cpuset/kubepods.slice/cpuset.cpus", ""),
        ("sys/fs/cgroup/kubepods.slice/cpuset.cpus.effective", "/"),
    ] {
        // This process's own cgroup says otherwise: kubepods wins.
        let mut files = vec![(file, "2-7\n"), ("proc/self/cpuset", "/system.slice/x")];
        if !root.is_empty() {
            files.push(("sys/fs/cgroup/system.slice/x/cpuset.cpus.effective", "0-7"));
        }
        let t = tree(&files);
        let (set, warnings) = outside(&t, "0-7");
        assert_eq!(set, "0-1", "{file}");
        assert!(warnings[0].contains("kubepods"), "{warnings:?}");
    }
}

#[test]
fn without_kubepods_the_own_cpuset_of_a_gathered_tree_is_read() {
    // hwloc-gather-topology's shape: cpuset v1 at /dev/cpuset, `noprefix` file names.
    let t = tree(&[
        ("proc/self/cpuset", "/prout\n"),
        (
            "proc/mounts",
            "cpuset /dev/cpuset cgroup rw,relatime,cpuset,noprefix 0 0\n",
        ),
        ("dev/cpuset/prout/cpus", "0,2,4-5\n"),
    ]);
    assert_eq!(outside(&t, "0-7").0, "1,3,6-7");
}

#[test]
fn nothing_is_left_out_without_a_usable_cpuset() {
    // No cgroup at all; the root cgroup; an empty (inheriting) file; garbage; a cpuset of
    // CPUs this host does not have online; a path that climbs out.
    let cases: [&[(&str, &str)]; 6] = [
        &[],
        &[
            ("proc/self/cpuset", "/"),
            ("sys/fs/cgroup/cpuset.cpus.effective", "0"),
        ],
        &[("sys/fs/cgroup/kubepods/cpuset.cpus", "")],
        &[("sys/fs/cgroup/kubepods/cpuset.cpus", "zz")],
        &[("sys/fs/cgroup/kubepods/cpuset.cpus", "8-9")],
        &[("proc/self/cpuset", "/../../etc"), ("etc/cpus", "0")],
    ];
    for files in cases {
        let t = tree(files);
        assert_eq!(outside(&t, "0-7").0, "", "{files:?}");
    }
}
