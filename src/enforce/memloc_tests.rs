use super::*;
use crate::host::testing::write;

fn rec(mems: &str, cpus: &str) -> Record {
    let mut r = Record::default();
    r.assignment.mems = mems.parse().expect("mems");
    r.applied_cpus = cpus.parse().expect("cpus");
    r
}

fn mem(per_node: &[(u32, u64)]) -> NodeMemory {
    let mut m = NodeMemory::default();
    for (n, b) in per_node {
        m.add(*n, *b);
    }
    m
}

#[test]
fn the_share_on_its_nodes_rounds_down_and_is_whole_when_nothing_is_resident() {
    let nodes: NodeSet = "2".parse().expect("set");
    let l = MemoryLocality::of(&mem(&[(0, 1), (2, 9)]), MemorySource::CgroupV2, &nodes);
    assert_eq!((l.resident_bytes, l.local_bytes), (10, 9));
    assert_eq!(l.local_percent, 90);
    assert!((l.local_ratio() - 0.9).abs() < 1e-9);
    let l = MemoryLocality::of(&mem(&[(0, 2), (2, 1)]), MemorySource::CgroupV2, &nodes);
    assert_eq!(l.local_percent, 33);
    assert!((l.local_ratio() - 1.0 / 3.0).abs() < 1e-9);
    let l = MemoryLocality::of(&NodeMemory::default(), MemorySource::NumaMaps, &nodes);
    assert_eq!(l.local_percent, 100);
    assert!((l.local_ratio() - 1.0).abs() < 1e-9);
    // A record without memory nodes has no share to report.
    let found = FoundMemory {
        memory: mem(&[(0, 1)]),
        source: MemorySource::CgroupV1,
        notes: Vec::new(),
    };
    assert!(locality(&rec("", "0"), found).is_none());
}

#[test]
fn flagged_only_above_the_threshold_with_the_causes_the_host_shows() {
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path();
    let nodes: NodeSet = "1".parse().expect("set");
    let half = MemoryLocality::of(&mem(&[(0, 50), (1, 50)]), MemorySource::CgroupV2, &nodes);
    let r = rec("1", "2-3");
    // Exactly the threshold off its nodes is not "mostly".
    assert!(remote_flag(root, &half, &r, &[], 50).is_none());
    assert!(remote_flag(root, &half, &r, &[], 49).is_some());
    let off = MemoryLocality::of(&mem(&[(0, 80), (1, 20)]), MemorySource::CgroupV2, &nodes);
    let flag = remote_flag(root, &off, &r, &[], 50).expect("flag");
    assert_eq!((flag.remote_percent, flag.threshold_percent), (80, 50));
    assert!(flag.reasons.is_empty(), "{:?}", flag.reasons);
    // Now the host shows why: an interleave policy, a container found running, node 1 full.
    write(
        root,
        "proc/5/numa_maps",
        "7f0000000000 interleave:0-1 anon=512 N0=256 N1=256 kernelpagesize_kB=4\n",
    );
    write(
        root,
        "sys/devices/system/node/node1/meminfo",
        "Node 1 MemTotal:       8388608 kB\nNode 1 MemFree:           1024 kB\n",
    );
    let mut r = r;
    r.found_running = true;
    r.memory_nodes_moved = true;
    let why = remote_flag(root, &off, &r, &[5], 50)
        .expect("flag")
        .reasons
        .join("\n");
    assert!(
        why.contains("interleave memory policy is set: 2.0 MiB"),
        "{why}"
    );
    assert!(why.contains("recorded running"), "{why}");
    assert!(
        why.contains("its memory nodes were moved after it started"),
        "{why}"
    );
    assert!(
        why.contains("node 1 is out of memory (1.0 MiB free of 8192.0 MiB)"),
        "{why}"
    );
}

#[test]
fn threads_are_counted_inside_and_outside_the_cpuset() {
    let t = tempfile::tempdir().expect("tmp");
    let stat = |cpu: u32| {
        let mut f: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
        f[36] = cpu.to_string();
        format!("1 (app) {}\n", f.join(" "))
    };
    write(t.path(), "proc/5/task/5/stat", &stat(2));
    write(t.path(), "proc/5/task/6/stat", &stat(3));
    write(t.path(), "proc/5/task/7/stat", &stat(9));
    let got = threads(t.path(), &[5], &rec("0", "2-3"));
    assert_eq!(got.len(), 1);
    let p = &got[0];
    assert_eq!((p.against.as_str(), p.inside, p.outside), ("cpuset", 2, 1));
    assert_eq!(p.outside_cpus.to_string(), "9");
    // No thread readable (another PID namespace): nothing to say.
    assert!(threads(t.path(), &[77], &rec("0", "2-3")).is_empty());
}

#[test]
fn numa_maps_stand_in_where_the_cgroup_has_no_numa_stat() {
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path();
    write(
        root,
        "proc/self/mountinfo",
        "31 25 0:29 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
    );
    std::fs::create_dir_all(root.join("sys/fs/cgroup/k8s.io/abc")).expect("cgroup");
    write(
        root,
        "proc/5/numa_maps",
        "00400000 default file=/app mapped=256 N2=256 kernelpagesize_kB=4\n",
    );
    let mounts = CgroupMounts::read(root);
    let key = ContainerKey::new("abc", "/k8s.io/abc").expect("key");
    let f = memory_of(root, &mounts, &key, &[5], 4096)
        .expect("read")
        .expect("found");
    assert_eq!(
        (f.source, f.memory.bytes[&2]),
        (MemorySource::NumaMaps, 1 << 20)
    );
    // With the cgroup file, the cgroup's numbers.
    write(
        root,
        "sys/fs/cgroup/k8s.io/abc/memory.numa_stat",
        "anon N0=0 N2=4096\nfile N0=0 N2=0\n",
    );
    let f = memory_of(root, &mounts, &key, &[5], 4096)
        .expect("read")
        .expect("found");
    assert_eq!((f.source, f.memory.total()), (MemorySource::CgroupV2, 4096));
    // Neither: nothing found, no error.
    let none = ContainerKey::new("gone", "/k8s.io/gone").expect("key");
    assert!(memory_of(root, &mounts, &none, &[], 4096)
        .expect("read")
        .is_none());
}

#[test]
fn the_daemon_samples_running_records_with_memory_nodes() {
    let t = tempfile::tempdir().expect("tmp");
    let root = t.path();
    write(
        root,
        "proc/self/mountinfo",
        "31 25 0:29 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
    );
    write(
        root,
        "sys/fs/cgroup/k8s.io/abc/memory.numa_stat",
        "anon N0=1048576 N2=3145728\nfile N0=0 N2=0\n",
    );
    let mut records = Records::new();
    let mut r = rec("2", "4-5");
    r.assignment.pod_name = "ml/trainer-0".into();
    r.assignment.container_name = "train".into();
    r.cgroups_path = "/k8s.io/abc".into();
    records.insert("abc".into(), r.clone());
    // Stopped, or without memory nodes: no series.
    let mut stopped = r.clone();
    stopped.stopped = true;
    records.insert("stopped".into(), stopped);
    records.insert("nomems".into(), rec("", "0"));
    // Gone from the host: left out of the sample.
    let mut gone = r.clone();
    gone.cgroups_path = "/k8s.io/gone".into();
    records.insert("gone".into(), gone);
    let targets = sample_targets(&records);
    assert_eq!(targets.len(), 2, "{targets:?}");
    let got = sample(root, &targets);
    assert_eq!(got.len(), 1, "{got:?}");
    let (labels, ratio) = &got[0];
    assert_eq!(
        (
            labels.namespace.as_str(),
            labels.pod.as_str(),
            labels.container.as_str()
        ),
        ("ml", "trainer-0", "train")
    );
    assert!((ratio - 0.75).abs() < 1e-9, "{ratio}");
}
