//! `/proc` under a root: which process is in which cgroup, which containers still have a
//! process, and a process's status fields.

use std::path::{Path, PathBuf};

/// Which of `ids` have a process in their cgroup on the host under `root`. `None` when none
/// has: then either all are gone or this process cannot see the host's processes (no host PID
/// namespace), and the caller must not conclude anything.
///
/// A container's id is a whole component of its cgroup path, or ends one after a `-` and
/// before an optional `.scope` (`cri-containerd-ID.scope`, `crio-ID.scope` under systemd), so
/// each process's path is cut into those candidates and looked up: linear in processes, where
/// searching every path for every id was quadratic at start-up on a full node.
pub fn live_containers<'a>(
    root: &Path,
    ids: impl IntoIterator<Item = &'a str>,
) -> Option<std::collections::HashSet<String>> {
    let wanted: std::collections::HashSet<&str> = ids.into_iter().collect();
    let mut live = std::collections::HashSet::new();
    for (_, text) in cgroup_lines_by_pid(root) {
        for line in text.lines() {
            // `hierarchy:controllers:path`; the path may itself hold colons.
            let path = line.splitn(3, ':').nth(2).unwrap_or(line);
            for seg in path.split('/') {
                let seg = seg.strip_suffix(".scope").unwrap_or(seg);
                let tail = seg.rsplit_once('-').map(|(_, t)| t);
                for cand in std::iter::once(seg).chain(tail) {
                    if let Some(id) = wanted.get(cand) {
                        live.insert((*id).to_string());
                    }
                }
            }
        }
    }
    (!live.is_empty()).then_some(live)
}

/// `(pid, content of /proc/PID/cgroup)` for every process.
pub fn cgroup_lines_by_pid(root: &Path) -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir(root.join("proc")) else {
        return Vec::new();
    };
    let mut out: Vec<(u32, String)> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter_map(|pid| {
            std::fs::read_to_string(root.join(format!("proc/{pid}/cgroup")))
                .ok()
                .map(|t| (pid, t))
        })
        .collect();
    out.sort();
    out
}

/// `/proc/PID/status` of `pid` under `root`, when readable.
pub fn status(root: &Path, pid: u32) -> Option<String> {
    std::fs::read_to_string(root.join(format!("proc/{pid}/status"))).ok()
}

/// The value of field `name` (with its colon, as `Cpus_allowed_list:`) in a status text.
pub fn status_field(status: &str, name: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
}

/// The `/dev` a process sees (its root's), under `root`.
pub fn dev_of(root: &Path, pid: u32) -> PathBuf {
    root.join(format!("proc/{pid}/root/dev"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    }

    /// A host with cgroup v1 cpuset at /sys/fs/cgroup/cpuset and one container process.
    fn host(root: &Path, id: &str, cg_cpus: &str, allowed: &str, devs: &[&str]) {
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

    #[test]
    fn live_containers_needs_at_least_one_visible() {
        let t = tempfile::tempdir().expect("tmp");
        host(t.path(), "abc", "2-3", "2", &[]);
        let live = live_containers(t.path(), ["abc", "gone"]).expect("abc is visible");
        assert!(live.contains("abc") && !live.contains("gone"));
        assert_eq!(live_containers(t.path(), ["gone"]), None);
        // Part of a longer id or path component is not a match.
        assert_eq!(live_containers(t.path(), ["ab", "k8s"]), None);
        write(
            t.path(),
            "proc/78/cgroup",
            "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-f00d.scope\n",
        );
        write(
            t.path(),
            "proc/79/cgroup",
            "0::/system.slice/crio-beef.scope\n",
        );
        let live = live_containers(t.path(), ["f00d", "beef", "pod1"]).expect("visible");
        let mut got: Vec<&String> = live.iter().collect();
        got.sort();
        assert_eq!(got, ["beef", "f00d"]);
    }

    #[test]
    fn status_fields_are_found_by_their_name() {
        let t = tempfile::tempdir().expect("tmp");
        host(t.path(), "abc", "2-3", "2", &[]);
        let s = status(t.path(), 4242).expect("status");
        assert_eq!(status_field(&s, "Cpus_allowed_list:").as_deref(), Some("2"));
        assert_eq!(status_field(&s, "Nope:"), None);
        assert_eq!(status(t.path(), 1), None);
    }
}
