//! A fake host tree for the unit tests that read /proc and the cgroup filesystem under a root:
//! cgroup v1's cpuset controller at /sys/fs/cgroup/cpuset, one container process (pid 4242) in
//! it and one process elsewhere (pid 77). Test code only (`#[cfg(test)]`).

use std::fs;
use std::path::Path;

/// Writes `text` at `root/rel`, making the directories above it.
pub(crate) fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs::write(p, text).expect("write");
}

/// A host with cgroup v1 cpuset at /sys/fs/cgroup/cpuset and one process of container `id`:
/// its cgroup's `cpuset.cpus` is `cg_cpus`, the process's `Cpus_allowed_list` is `allowed`,
/// and each of `devs` (`/dev/nvidia0`) exists in its `/dev`.
pub(crate) fn container_host(root: &Path, id: &str, cg_cpus: &str, allowed: &str, devs: &[&str]) {
    write(
        root,
        "proc/self/mountinfo",
        "30 25 0:26 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset\n",
    );
    write(
        root,
        "proc/4242/cgroup",
        &format!("5:cpuset:/k8s.io/{id}\n1:name=systemd:/k8s.io/{id}\n"),
    );
    write(
        root,
        "proc/4242/status",
        &format!("Name:\tsleep\nCpus_allowed_list:\t{allowed}\nMems_allowed_list:\t0\n"),
    );
    write(
        root,
        &format!("sys/fs/cgroup/cpuset/k8s.io/{id}/cpuset.cpus"),
        &format!("{cg_cpus}\n"),
    );
    write(
        root,
        &format!("sys/fs/cgroup/cpuset/k8s.io/{id}/cpuset.mems"),
        "0\n",
    );
    fs::create_dir_all(root.join("proc/4242/root/dev")).expect("dev");
    for d in devs {
        write(root, &format!("proc/4242/root{d}"), "");
    }
    write(root, "proc/77/cgroup", "5:cpuset:/other\n");
}

/// A character device node `major:minor` at `root/rel` (a fake host's `/dev/nvidia0` that is
/// the real null device). mknod needs CAP_MKNOD, as the daemon suite's GPU roots do: a link to
/// the daemon's own `/dev/null` would not do, since a host's `/dev` is never left.
pub(crate) fn char_node(root: &Path, rel: &str, major: u64, minor: u64) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    nix::sys::stat::mknod(
        &p,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(major, minor),
    )
    .unwrap_or_else(|e| panic!("mknod {rel} (needs CAP_MKNOD): {e}"));
}
