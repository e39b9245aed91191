use super::*;
use crate::host::testing::{container_host as host, write};

#[test]
fn live_containers_needs_at_least_one_visible() {
    let t = tempfile::tempdir().expect("tmp");
    host(t.path(), "abc", "2-3", "2", &[]);
    let live =
        live_containers(t.path(), [("abc", "/k8s.io/abc"), ("gone", "")]).expect("abc is visible");
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

#[test]
fn the_task_memory_policy_is_the_first_numa_maps_line_policy() {
    let t = tempfile::tempdir().expect("tmp");
    for (pid, line, want) in [
        (
            1,
            "55d1c0a00000 default file=/bin/sleep mapped=2 N0=2 kernelpagesize_kB=4",
            "default",
        ),
        (
            2,
            "55d1c0a00000 bind:0-1 file=/bin/sleep mapped=2 N0=2",
            "bind:0-1",
        ),
        (
            3,
            "55d1c0a00000 interleave:0,2 anon=1 dirty=1 N2=1",
            "interleave:0,2",
        ),
        (
            4,
            "55d1c0a00000 prefer (many):1 heap anon=3",
            "prefer (many):1",
        ),
        (
            5,
            "55d1c0a00000 weighted interleave:0-3 stack anon=1",
            "weighted interleave:0-3",
        ),
        (6, "55d1c0a00000 bind=static:0", "bind=static:0"),
    ] {
        write(
            t.path(),
            &format!("proc/{pid}/numa_maps"),
            &format!("{line}\n7f00 default\n"),
        );
        assert_eq!(
            task_mempolicy(t.path(), pid).as_deref(),
            Some(want),
            "{line}"
        );
    }
    assert_eq!(task_mempolicy(t.path(), 99), None);
    // This process, on the host: a policy is always printed.
    assert!(task_mempolicy(std::path::Path::new("/"), std::process::id()).is_some());
}
