//! `/proc` under a root: which process is in which cgroup, which processes are a container's
//! (matched by its cgroup, component by component), which containers still have a process,
//! and a process's status fields.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::host::cgroup::{container_names, names_container, CgroupPathError, ContainerCgroup};

/// Largest `/proc/PID/cgroup` or `status` read.
const MAX_PROC_FILE: u64 = 256 << 10;

/// How a recorded container is found among the host's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerKey {
    /// By its cgroup, from the cgroups path the runtime gave (both drivers): a process is the
    /// container's when its cgroup is that one or below it, compared component by component.
    Cgroup(ContainerCgroup),
    /// Records without a cgroups path: by its id as a whole cgroup name (`ID`, `crio-ID`,
    /// `PREFIX-ID.scope`), never as a substring and never a monitor's (`crio-conmon-ID`).
    Id(String),
}

impl ContainerKey {
    /// The key of container `id` whose runtime-given cgroups path is `cgroups_path` (may be
    /// empty). A path that would leave the cgroup root is refused.
    pub fn new(id: &str, cgroups_path: &str) -> Result<Self, CgroupPathError> {
        if cgroups_path.is_empty() {
            return Ok(ContainerKey::Id(id.to_string()));
        }
        ContainerCgroup::parse(cgroups_path).map(ContainerKey::Cgroup)
    }

    /// Whether a process whose `/proc/PID/cgroup` is `cgroup_text` belongs to the container.
    pub fn matches(&self, cgroup_text: &str) -> bool {
        let Some(path) = cpuset_line(cgroup_text) else {
            return false;
        };
        match self {
            ContainerKey::Cgroup(cg) => cg.holds(path),
            ContainerKey::Id(id) => path.split('/').any(|c| names_container(c, id)),
        }
    }
}

/// The cgroup path of the hierarchy the cpuset controller is in, from `/proc/PID/cgroup`: the
/// v1 line listing `cpuset` (legacy and hybrid hosts), else the unified `0::` line.
pub fn cpuset_line(cgroup_text: &str) -> Option<&str> {
    let mut unified = None;
    for line in cgroup_text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(hid), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if ctrls.split(',').any(|c| c == "cpuset") {
            return Some(path);
        }
        if hid == "0" && ctrls.is_empty() {
            unified = Some(path);
        }
    }
    unified
}

/// The host's processes indexed by their cpuset cgroup, read once: the processes in or below
/// each cgroup, and those whose cgroup names a container id. A lookup then costs the length of
/// the container's path, so checking N containers against P processes is O(N + P x depth);
/// comparing every pair, as this once did, made a restart on a node with 5,000 containers
/// parse 25 million cgroup files' worth of text.
#[derive(Debug, Default)]
pub struct ProcIndex {
    /// pid -> its cgroup in the cpuset hierarchy, as `/proc/PID/cgroup` lists it.
    paths: HashMap<u32, String>,
    /// Each cgroup (components joined by `/`, `""` the root) -> the pids in or below it.
    under: HashMap<String, Vec<u32>>,
    /// Each container id a component of a process's cgroup names -> those pids.
    named: HashMap<String, Vec<u32>>,
}

impl ProcIndex {
    /// The processes of the host under `root`.
    pub fn read(root: &Path) -> Self {
        Self::new(cgroup_lines_by_pid(root))
    }

    /// The index of `procs` (`(pid, content of /proc/PID/cgroup)`); every list comes out in
    /// ascending pid order.
    pub fn new(mut procs: Vec<(u32, String)>) -> Self {
        procs.sort_by_key(|(pid, _)| *pid);
        let mut index = ProcIndex::default();
        for (pid, text) in procs {
            let Some(path) = cpuset_line(&text) else {
                continue;
            };
            let mut prefix = String::new();
            push_once(index.under.entry(String::new()).or_default(), pid);
            for c in path.split('/').filter(|c| !c.is_empty()) {
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(c);
                push_once(index.under.entry(prefix.clone()).or_default(), pid);
                for id in container_names(c) {
                    push_once(index.named.entry(id.to_string()).or_default(), pid);
                }
            }
            index.paths.insert(pid, path.to_string());
        }
        index
    }

    /// The pids that belong to the container `key`, ascending.
    pub fn pids_of(&self, key: &ContainerKey) -> &[u32] {
        let found = match key {
            ContainerKey::Cgroup(cg) => self.under.get(&cg.components().join("/")),
            ContainerKey::Id(id) if !id.is_empty() && !id.contains('/') => self.named.get(id),
            ContainerKey::Id(_) => None,
        };
        found.map_or(&[], Vec::as_slice)
    }

    /// The cgroup of `pid` in the cpuset hierarchy.
    pub fn cgroup_of(&self, pid: u32) -> Option<&str> {
        self.paths.get(&pid).map(String::as_str)
    }
}

/// Appends `pid` unless it is already last (one process may name an id in two components).
fn push_once(pids: &mut Vec<u32>, pid: u32) {
    if pids.last() != Some(&pid) {
        pids.push(pid);
    }
}

/// Which of `containers` (id, runtime-given cgroups path) have a process in their cgroup on
/// the host under `root`. `None` when none has: then either all are gone or this process
/// cannot see the host's processes (no host PID namespace), and the caller must not conclude
/// anything. A container whose cgroups path is refused counts as live (never released on a
/// guess).
pub fn live_containers<'a>(
    root: &Path,
    containers: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<HashSet<String>> {
    let containers: Vec<(&str, &str)> = containers.into_iter().collect();
    if containers.is_empty() {
        // Nothing to look for: reading every process's cgroup (a quarter of a second with
        // 10,000 processes) would only delay the first registration.
        return None;
    }
    let procs = ProcIndex::read(root);
    let mut live = HashSet::new();
    let mut refused = Vec::new();
    for (id, path) in containers {
        match ContainerKey::new(id, path) {
            Ok(key) if !procs.pids_of(&key).is_empty() => {
                live.insert(id.to_string());
            }
            Ok(_) => {}
            Err(_) => refused.push(id.to_string()),
        }
    }
    if live.is_empty() {
        return None;
    }
    live.extend(refused);
    Some(live)
}

/// `(pid, content of /proc/PID/cgroup)` for every process.
pub fn cgroup_lines_by_pid(root: &Path) -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir(root.join("proc")) else {
        return Vec::new();
    };
    let mut out: Vec<(u32, String)> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter_map(|pid| read_bounded(&root.join(format!("proc/{pid}/cgroup"))).map(|t| (pid, t)))
        .collect();
    out.sort();
    out
}

/// `/proc/PID/status` of `pid` under `root`, when readable.
pub fn status(root: &Path, pid: u32) -> Option<String> {
    read_bounded(&root.join(format!("proc/{pid}/status")))
}

fn read_bounded(path: &Path) -> Option<String> {
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_PROC_FILE)
        .read_to_end(&mut buf)
        .ok()?;
    String::from_utf8(buf).ok()
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
    use crate::host::testing::{container_host as host, write};

    #[test]
    fn live_containers_needs_at_least_one_visible() {
        let t = tempfile::tempdir().expect("tmp");
        host(t.path(), "abc", "2-3", "2", &[]);
        let live = live_containers(t.path(), [("abc", "/k8s.io/abc"), ("gone", "")])
            .expect("abc is visible");
        assert!(live.contains("abc") && !live.contains("gone"));
        assert_eq!(live_containers(t.path(), [("gone", "/k8s.io/gone")]), None);
        // An id is a whole cgroup name, never a substring of another path.
        assert_eq!(live_containers(t.path(), [("a", ""), ("b", "")]), None);
        // Systemd scopes name the id after the runtime's prefix; a pod slice is no container.
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
        let live =
            live_containers(t.path(), [("f00d", ""), ("beef", ""), ("pod1", "")]).expect("visible");
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

    /// The pairwise definition the index must agree with: every process checked with
    /// [`ContainerKey::matches`].
    fn pids_of(procs: &[(u32, String)], key: &ContainerKey) -> Vec<u32> {
        let mut pids: Vec<u32> = procs
            .iter()
            .filter(|(_, cg)| key.matches(cg))
            .map(|(pid, _)| *pid)
            .collect();
        pids.sort();
        pids
    }

    /// Both ways of finding a container's processes, which must agree.
    fn both(procs: &[(u32, String)], key: &ContainerKey) -> Vec<u32> {
        let pairwise = pids_of(procs, key);
        assert_eq!(
            ProcIndex::new(procs.to_vec()).pids_of(key),
            pairwise.as_slice(),
            "{key:?}"
        );
        pairwise
    }

    proptest::proptest! {
        /// The index finds exactly the processes the pairwise check finds, for cgroup paths
        /// built from the shapes runtimes make (ids, `crio-`, scopes, monitors, slices), on
        /// v1 and v2 lines, and for keys by path (either driver) and by id.
        #[test]
        fn the_index_agrees_with_the_pairwise_check(
            procs in proptest::collection::vec(
                (proptest::collection::vec(0usize..COMPONENTS.len(), 0..5), proptest::bool::ANY),
                0..24,
            ),
            keys in proptest::collection::vec(
                (proptest::collection::vec(0usize..COMPONENTS.len(), 0..4), 0usize..IDS.len()),
                1..8,
            ),
        ) {
            let procs: Vec<(u32, String)> = procs
                .iter()
                .enumerate()
                .map(|(pid, (path, v1))| {
                    let path: Vec<&str> = path.iter().map(|i| COMPONENTS[*i]).collect();
                    let path = path.join("/");
                    let text = if *v1 {
                        format!("7:pids:/x\n5:cpuset:/{path}\n0::/y\n")
                    } else {
                        format!("0::/{path}\n")
                    };
                    (pid as u32 * 7 % 31, text)
                })
                .collect();
            for (path, id) in &keys {
                let path: Vec<&str> = path.iter().map(|i| COMPONENTS[*i]).collect();
                if let Ok(key) = ContainerKey::new(IDS[*id], &path.join("/")) {
                    both(&procs, &key);
                }
                both(&procs, &ContainerKey::new(IDS[*id], "").expect("id key"));
            }
        }
    }

    const IDS: [&str; 6] = ["abc", "a", "conmon-abc", "f00d", "abc.scope", ""];
    const COMPONENTS: [&str; 12] = [
        "kubepods.slice",
        "kubepods-pod1.slice",
        "abc",
        "crio-abc",
        "crio-abc.scope",
        "crio-conmon-abc.scope",
        "cri-containerd-f00d.scope",
        "f00d",
        "k8s.io",
        "a",
        "abcd.service",
        "",
    ];

    #[test]
    fn a_containers_processes_are_its_cgroups_and_never_its_monitors() {
        // CRI-O under systemd: the container in crio-ID.scope, conmon in crio-conmon-ID.scope
        // beside it, and an unrelated unit whose name contains the id.
        let procs: Vec<(u32, String)> = [
            (
                10,
                "0::/kubepods.slice/kubepods-pod1.slice/crio-abc.scope\n",
            ),
            (
                11,
                "0::/kubepods.slice/kubepods-pod1.slice/crio-conmon-abc.scope\n",
            ),
            (12, "0::/system.slice/abcd.service\n"),
            (
                13,
                "0::/kubepods.slice/kubepods-pod1.slice/crio-abc.scope/sub\n",
            ),
        ]
        .into_iter()
        .map(|(p, t)| (p, t.to_string()))
        .collect();
        let by_path = ContainerKey::new("abc", "kubepods-pod1.slice:crio:abc").expect("key");
        assert_eq!(both(&procs, &by_path), vec![10, 13]);
        let by_id = ContainerKey::new("abc", "").expect("key");
        assert_eq!(both(&procs, &by_id), vec![10, 13]);
        // Matched as a substring, id `a` would claim every process whose cgroup path has an `a`.
        assert!(both(&procs, &ContainerKey::new("a", "").expect("key")).is_empty());
        assert!(ContainerKey::new("x", "/../../tmp/x").is_err());
    }

    #[test]
    fn the_cpuset_hierarchy_line_is_v1_cpuset_on_hybrid_hosts_and_unified_on_v2() {
        let hybrid = "12:pids:/a\n5:cpuset:/k8s.io/abc\n0::/other\n";
        assert_eq!(cpuset_line(hybrid), Some("/k8s.io/abc"));
        assert_eq!(
            cpuset_line("0::/k.slice/x.scope\n"),
            Some("/k.slice/x.scope")
        );
        assert_eq!(cpuset_line("1:name=systemd:/x\n"), None);
    }
}
