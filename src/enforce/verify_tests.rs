use super::*;
use crate::host::testing::{container_host as host, write};
use crate::placement::Assignment;

fn doc(id: &str) -> StateDoc {
    let mut d = StateDoc::default();
    d.containers.insert(
        id.into(),
        Record {
            assignment: Assignment {
                container_id: id.into(),
                cpus: "2-3".parse().expect("set"),
                exclusive: true,
                mems: "0".parse().expect("set"),
                ..Default::default()
            },
            pod_sandbox_id: String::new(),
            namespace: String::new(),
            cgroups_path: format!("/k8s.io/{id}"),
            applied_cpus: "2-3".parse().expect("set"),
            devices: vec!["/dev/nvidia1".into()],
            resources: Default::default(),
            ..Record::default()
        },
    );
    d
}

#[test]
fn matching_container_is_ok() {
    let t = tempfile::tempdir().expect("tmp");
    host(
        t.path(),
        "abc",
        "2-3",
        "2",
        &["/dev/nvidia1", "/dev/nvidiactl", "/dev/null"],
    );
    let r = verify(&doc("abc"), t.path());
    assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
    assert_eq!(r[0].pids, vec![4242]);
}

#[test]
fn widened_cpuset_and_extra_gpu_are_drift() {
    let t = tempfile::tempdir().expect("tmp");
    host(
        t.path(),
        "abc",
        "0-3",
        "0-3",
        &["/dev/nvidia0", "/dev/nvidia1"],
    );
    let r = verify(&doc("abc"), t.path());
    assert_eq!(r[0].verdict, Verdict::Drift);
    let all = r[0].problems.join("\n");
    assert!(
        all.contains("cgroup cpuset.cpus is 0-3, decided 2-3"),
        "{all}"
    );
    assert!(all.contains("pid 4242 Cpus_allowed_list is 0-3"), "{all}");
    assert!(
        all.contains("visible devices [/dev/nvidia0 /dev/nvidia1], decided [/dev/nvidia1]"),
        "{all}"
    );
}

/// cgroup v2 with the systemd driver: `kubepods-pod1.slice:RUNTIME:abc` is the scope
/// `PREFIX-abc.scope` in `kubepods.slice/kubepods-pod1.slice`, `cpuset.cpus` unset.
fn v2_systemd_host(root: &Path, scope: &str) {
    let dir = format!("sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/{scope}");
    write(
        root,
        "proc/self/mountinfo",
        "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
    );
    write(
        root,
        "proc/9/cgroup",
        &format!("0::/kubepods.slice/kubepods-pod1.slice/{scope}\n"),
    );
    write(
        root,
        "proc/9/status",
        "Cpus_allowed_list:\t2-3\nMems_allowed_list:\t0\n",
    );
    write(root, &format!("{dir}/cpuset.cpus"), "\n");
    write(root, &format!("{dir}/cpuset.cpus.effective"), "2-3\n");
    write(root, &format!("{dir}/cpuset.mems"), "0\n");
}

fn doc_at(id: &str, cgroups_path: &str) -> StateDoc {
    let mut d = doc(id);
    {
        let mut rec = d.containers.get_mut(id).expect("rec");
        rec.cgroups_path = cgroups_path.to_string();
        rec.devices.clear();
    }
    d
}

#[test]
fn systemd_scopes_on_cgroup_v2_and_absent_containers() {
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path();
    v2_systemd_host(root, "cri-containerd-abc.scope");
    let mut d = doc_at("abc", "kubepods-pod1.slice:cri-containerd:abc");
    d.containers
        .insert("gone".into(), doc("gone").containers["gone"].clone());
    let r = verify(&d, root);
    assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
    assert_eq!(r[0].pids, vec![9]);
    assert_eq!(r[1].verdict, Verdict::NotRunning);
    // A record without a cgroups path finds the scope by the id as a whole name.
    let r = verify(&doc_at("abc", ""), root);
    assert_eq!((r[0].verdict, r[0].pids.clone()), (Verdict::Ok, vec![9]));
}

#[test]
fn crio_conmon_beside_the_container_is_not_the_container() {
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path();
    v2_systemd_host(root, "crio-abc.scope");
    // conmon, in its own scope next to the container's, on every CPU.
    write(
        root,
        "proc/8/cgroup",
        "0::/kubepods.slice/kubepods-pod1.slice/crio-conmon-abc.scope\n",
    );
    write(
        root,
        "proc/8/status",
        "Cpus_allowed_list:\t0-7\nMems_allowed_list:\t0-1\n",
    );
    for path in ["kubepods-pod1.slice:crio:abc", ""] {
        let r = verify(&doc_at("abc", path), root);
        assert_eq!(r[0].pids, vec![9], "{path:?}");
        assert_eq!(r[0].verdict, Verdict::Ok, "{path:?}: {:?}", r[0].problems);
    }
}

#[test]
fn a_short_id_matches_no_unrelated_process() {
    // Id `a` once matched 80 unrelated processes as substrings of their paths.
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path();
    write(
        root,
        "proc/self/mountinfo",
        "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
    );
    for pid in 100..180 {
        write(
            root,
            &format!("proc/{pid}/cgroup"),
            &format!("0::/system.slice/app-{pid}.scope\n"),
        );
    }
    std::fs::create_dir_all(root.join("sys/fs/cgroup")).expect("mount point");
    // Without a cgroups path there is nowhere else to look: not an all-clear.
    for (path, verdict) in [("", Verdict::Unknown), ("/k8s.io/a", Verdict::NotRunning)] {
        let r = verify(&doc_at("a", path), root);
        assert!(r[0].pids.is_empty(), "{path:?}: {:?}", r[0].pids);
        assert_eq!(r[0].verdict, verdict, "{path:?}");
    }
}

/// The DaemonSet's view: the host's cgroup hierarchy mounted, its own PID namespace. The
/// kernel lists the container's processes as `0` in `cgroup.procs`.
fn pidns_host(root: &Path, procs: &str, cpus: &str) {
    let dir = "sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope";
    write(
        root,
        "proc/self/mountinfo",
        "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
    );
    write(root, "proc/1/cgroup", "0::/\n");
    write(root, &format!("{dir}/cgroup.procs"), procs);
    write(root, &format!("{dir}/cpuset.cpus"), &format!("{cpus}\n"));
    write(root, &format!("{dir}/cpuset.mems"), "0\n");
}

#[test]
fn processes_of_another_pid_namespace_are_found_through_the_cgroup() {
    let path = "kubepods-pod1.slice:cri-containerd:abc";
    let t = tempfile::tempdir().expect("tmp");
    pidns_host(t.path(), "0\n0\n", "2-3");
    let r = verify(&doc_at("abc", path), t.path());
    assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
    assert!(r[0].pids.is_empty());
    assert!(
        r[0].unchecked[0].starts_with("2 process(es) in its cgroup, none visible"),
        "{:?}",
        r[0].unchecked
    );

    let t = tempfile::tempdir().expect("tmp");
    pidns_host(t.path(), "0\n", "0-3");
    let r = verify(&doc_at("abc", path), t.path());
    assert_eq!(r[0].verdict, Verdict::Drift);
    assert!(
        r[0].problems[0].contains("cgroup cpuset.cpus is 0-3, decided 2-3"),
        "{:?}",
        r[0].problems
    );

    // An empty cgroup: created or stopped, really not running.
    let t = tempfile::tempdir().expect("tmp");
    pidns_host(t.path(), "", "2-3");
    let r = verify(&doc_at("abc", path), t.path());
    assert_eq!(r[0].verdict, Verdict::NotRunning);
}

#[test]
fn an_empty_v1_cgroup_seen_from_another_pid_namespace_is_unknown() {
    let path = "/kubepods/pod1/abc";
    let dir = "sys/fs/cgroup/cpuset/kubepods/pod1/abc";
    for (nspid, verdict) in [
        ("NSpid:\t4321\t7\n", Verdict::Unknown),
        ("NSpid:\t7\n", Verdict::NotRunning),
    ] {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path();
        write(
            root,
            "proc/self/mountinfo",
            "30 25 0:26 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n",
        );
        write(
            root,
            "proc/self/status",
            &format!("Name:\tnri-align\n{nspid}"),
        );
        write(root, &format!("{dir}/cgroup.procs"), "");
        write(root, &format!("{dir}/cpuset.cpus"), "2-3\n");
        let r = verify(&doc_at("abc", path), root);
        assert_eq!(r[0].verdict, verdict, "{nspid:?}: {:?}", r[0].unchecked);
        if verdict == Verdict::Unknown {
            assert!(
                r[0].unchecked[0].contains("hostPID"),
                "{:?}",
                r[0].unchecked
            );
        }
    }
}

#[test]
fn without_a_cgroup_mount_a_container_is_unknown_not_absent() {
    let t = tempfile::tempdir().expect("tmp");
    write(t.path(), "proc/self/mountinfo", "");
    let r = verify(&doc("abc"), t.path());
    assert_eq!(r[0].verdict, Verdict::Unknown);
    assert!(
        r[0].unchecked[0].contains("no cgroup hierarchy mounted"),
        "{:?}",
        r[0].unchecked
    );
}

#[test]
fn a_recorded_path_that_leaves_the_cgroup_root_is_reported_not_followed() {
    let t = tempfile::tempdir().expect("tmp");
    host(t.path(), "abc", "2-3", "2", &[]);
    let r = verify(&doc_at("abc", "/../../../../tmp/x"), t.path());
    assert_eq!(r[0].verdict, Verdict::Drift);
    assert!(r[0].problems[0].contains("`..`"), "{:?}", r[0].problems);
}

#[test]
fn a_held_cpu_gone_offline_is_named_and_is_not_drift() {
    let t = tempfile::tempdir().expect("tmp");
    // CPU 3 went offline: the kernel took it out of the effective cpuset and affinity.
    host(t.path(), "abc", "2", "2", &["/dev/nvidia1"]);
    write(t.path(), "sys/devices/system/cpu/online", "0-2,4-7\n");
    let r = verify(&doc("abc"), t.path());
    assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
    assert_eq!(r[0].offline_cpus, "3");
    // All online again, the same cgroup is drift: a CPU it holds is missing.
    write(t.path(), "sys/devices/system/cpu/online", "0-7\n");
    let r = verify(&doc("abc"), t.path());
    assert_eq!(r[0].verdict, Verdict::Drift);
    assert_eq!(r[0].offline_cpus, "");
}

/// A cgroup v1 host (cpuset and memory hierarchies) with container `abc` given node 1 and
/// CPUs 2-3, whose memory cgroup holds `numa_stat`.
fn memory_host(root: &Path, numa_stat: &str) -> StateDoc {
    host(root, "abc", "2-3", "2-3", &[]);
    write(
        root,
        "proc/self/mountinfo",
        "30 25 0:26 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n\
         31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
    );
    write(root, "sys/fs/cgroup/cpuset/k8s.io/abc/cpuset.mems", "1\n");
    write(
        root,
        "proc/4242/status",
        "Cpus_allowed_list:\t2-3\nMems_allowed_list:\t1\n",
    );
    write(
        root,
        "sys/fs/cgroup/memory/k8s.io/abc/memory.numa_stat",
        numa_stat,
    );
    let mut d = doc_at("abc", "/k8s.io/abc");
    if let Some(mut r) = d.containers.get_mut("abc") {
        r.assignment.mems = "1".parse().expect("set");
    }
    d
}

#[test]
fn memory_on_its_nodes_is_reported_and_not_flagged() {
    let t = tempfile::tempdir().expect("tmp");
    // 64 MiB on node 1, 1 MiB on node 0, in 4 KiB pages.
    let d = memory_host(
        t.path(),
        "total=16640 N0=256 N1=16384\nfile=0 N0=0 N1=0\nanon=16640 N0=256 N1=16384\n",
    );
    let r = verify_with(&d, t.path(), VerifyOptions::default());
    assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
    let m = r[0].memory.as_ref().expect("memory");
    let page = crate::host::memloc::page_size();
    assert_eq!(m.bytes_per_node[&1], 16384 * page);
    assert!(m.local_percent >= 90, "{m:?}");
    assert!(r[0].remote_memory.is_none());
    let json = serde_json::to_value(&r[0]).expect("json");
    assert_eq!(json["memory"]["source"], "cgroup-v1");
    assert_eq!(json["memory"]["nodes"], "1");
}

#[test]
fn memory_mostly_off_its_nodes_is_flagged_without_changing_the_verdict() {
    let t = tempfile::tempdir().expect("tmp");
    let mut d = memory_host(
        t.path(),
        "total=1000 N0=700 N1=300\nfile=0 N0=0 N1=0\nanon=1000 N0=700 N1=300\n",
    );
    if let Some(mut r) = d.containers.get_mut("abc") {
        r.found_running = true;
    }
    let r = verify_with(&d, t.path(), VerifyOptions::default());
    assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
    let flag = r[0].remote_memory.as_ref().expect("flagged");
    assert_eq!(flag.remote_percent, 70);
    assert!(
        flag.reasons.iter().any(|w| w.contains("recorded running")),
        "{flag:?}"
    );
    // A higher threshold lets it pass.
    let r = verify_with(
        &d,
        t.path(),
        VerifyOptions {
            remote_memory_threshold: 80,
        },
    );
    assert!(r[0].remote_memory.is_none());
}

#[test]
fn an_unreadable_numa_stat_is_named_and_the_rest_is_checked() {
    let t = tempfile::tempdir().expect("tmp");
    let d = memory_host(t.path(), "total=12 N0=x\n");
    let r = verify(&d, t.path());
    assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
    assert!(r[0].memory.is_none());
    let unchecked = r[0].unchecked.join("\n");
    assert!(
        unchecked.contains("where its memory lives: ") && unchecked.contains("bad entry \"N0=x\""),
        "{unchecked}"
    );
}

#[test]
fn the_device_map_is_reported_and_a_stale_one_is_drift() {
    use crate::placement::device_map::{DeviceMap, GpuShare};
    let t = tempfile::tempdir().expect("tmp");
    host(
        t.path(),
        "abc",
        "2-3",
        "2",
        &["/dev/nvidia1", "/dev/nvidiactl", "/dev/null"],
    );
    let mut d = doc("abc");
    let share = |cpus: &str| GpuShare {
        ordinal: 0,
        pci_bus_id: "0000:1b:00.0".into(),
        cpus: cpus.parse().expect("set"),
        mems: "0".parse().expect("set"),
    };
    d.containers
        .get_mut("abc")
        .expect("abc")
        .assignment
        .device_map = DeviceMap {
        gpus: vec![share("2-3")],
        nics: Vec::new(),
    };
    let r = verify(&d, t.path());
    assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
    assert_eq!(r[0].device_map.gpu_cpus(), "0:2-3");
    // The CPUs moved after creation (one replaced); the env's map still names the old one.
    d.containers
        .get_mut("abc")
        .expect("abc")
        .assignment
        .device_map
        .gpus = vec![share("1-2")];
    let r = verify(&d, t.path());
    let all = r[0].problems.join("\n");
    assert!(all.contains("NRI_ALIGN_GPU_CPUS names CPUs 1"), "{all}");
}

#[test]
fn a_pod_budget_is_no_container_to_check() {
    let t = tempfile::tempdir().expect("tmp");
    host(
        t.path(),
        "abc",
        "2-3",
        "2",
        &["/dev/nvidia1", "/dev/nvidiactl", "/dev/null"],
    );
    let mut d = doc("abc");
    d.containers.insert(
        "pod-budget:sb".into(),
        Record {
            assignment: Assignment {
                container_id: "pod-budget:sb".into(),
                cpus: "4-5".parse().expect("set"),
                exclusive: true,
                ..Default::default()
            },
            pod_sandbox_id: "sb".into(),
            pod_budget: Some(vec![2, 3, 4, 5]),
            ..Record::default()
        },
    );
    let r = verify(&d, t.path());
    assert_eq!(r.len(), 1, "only the container is checked: {r:?}");
    assert_eq!(r[0].verdict, Verdict::Ok, "{:?}", r[0].problems);
}
