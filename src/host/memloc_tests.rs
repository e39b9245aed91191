use super::*;
use crate::host::testing::write;

/// cgroup v1 as a 6.x kernel writes it (this host's, two nodes added): the hierarchical lines
/// follow the local ones.
const V1: &str = "\
total=6559 N0=6000 N1=559
file=1626 N0=1626 N1=0
anon=0 N0=0 N1=0
unevictable=4933 N0=4374 N1=559
hierarchical_total=5535196 N0=5000000 N1=535196
hierarchical_file=5185966 N0=5185966 N1=0
hierarchical_anon=344297 N0=344297 N1=0
hierarchical_unevictable=4933 N0=4933 N1=0
";

/// cgroup v2 (Documentation/admin-guide/cgroup-v2.rst, memory.numa_stat): bytes per node.
const V2: &str = "\
anon N0=1048576 N1=0 N2=67108864 N3=0
file N0=4096 N1=0 N2=8192 N3=0
kernel_stack N0=16384 N1=0 N2=0 N3=0
pagetables N0=4096 N1=0 N2=0 N3=0
shmem N0=0 N1=0 N2=8192 N3=0
file_mapped N0=4096 N1=0 N2=0 N3=0
anon_thp N0=0 N1=0 N2=2097152 N3=0
inactive_anon N0=1048576 N1=0 N2=0 N3=0
active_anon N0=0 N1=0 N2=67108864 N3=0
unevictable N0=0 N1=0 N2=0 N3=0
slab_reclaimable N0=0 N1=0 N2=0 N3=0
";

/// numa_maps (Documentation/filesystems/proc.rst and this host's): a file mapping, the heap
/// bound to node 1, an interleaved anonymous mapping, a huge-page mapping, the stack.
const MAPS: &str = "\
5637b565c000 default file=/usr/bin/cat mapped=2 N0=2 kernelpagesize_kB=4
5637b5666000 bind:1 heap anon=3 dirty=3 active=0 N1=3 kernelpagesize_kB=4
7f0000000000 interleave:0-1 anon=4 dirty=4 N0=2 N1=2 kernelpagesize_kB=4
7f1000000000 default file=/dev/hugepages/x huge dirty=1 N1=1 kernelpagesize_kB=2048
7f2000000000 weighted interleave:0-1 anon=2 dirty=2 N0=1 N1=1 kernelpagesize_kB=4
7ffd00000000 default stack anon=1 dirty=1 N0=1 kernelpagesize_kB=4
7ffd00100000 default
";

#[test]
fn v1_prefers_the_hierarchical_total_and_counts_pages() {
    let m = parse_numa_stat_v1(V1, 4096).expect("v1");
    assert_eq!(m.bytes[&0], 5_000_000 * 4096);
    assert_eq!(m.bytes[&1], 535_196 * 4096);
    // An older kernel has no hierarchical lines: the cgroup's own total.
    let old: String = V1.lines().take(4).map(|l| format!("{l}\n")).collect();
    let m = parse_numa_stat_v1(&old, 4096).expect("v1 old");
    assert_eq!((m.bytes[&0], m.bytes[&1]), (6000 * 4096, 559 * 4096));
    assert!(parse_numa_stat_v1("file=1 N0=1\n", 4096).is_err());
    assert!(parse_numa_stat_v1("total=1 N0=x\n", 4096).is_err());
}

#[test]
fn v2_sums_anon_and_file_bytes() {
    let m = parse_numa_stat_v2(V2).expect("v2");
    assert_eq!(m.bytes[&0], 1_048_576 + 4096);
    assert_eq!(m.bytes[&2], 67_108_864 + 8192);
    assert_eq!(m.total(), 1_048_576 + 4096 + 67_108_864 + 8192);
    assert_eq!(m.on(&"2".parse().expect("set")), 67_108_864 + 8192);
    assert!(parse_numa_stat_v2("kernel_stack N0=1\n").is_err());
    assert!(parse_numa_stat_v2("anon N0=-1\n").is_err());
}

#[test]
fn numa_maps_counts_each_mapping_in_its_page_size_and_sees_interleave() {
    let m = parse_numa_maps(MAPS);
    assert_eq!(m.memory.bytes[&0], (2 + 2 + 1 + 1) * 4096);
    assert_eq!(m.memory.bytes[&1], (3 + 2 + 1) * 4096 + 2048 * 1024);
    assert_eq!(m.interleaved, (4 + 2) * 4096);
    assert!(!m.truncated);
}

#[test]
fn stat_processor_is_field_39_after_the_command_name() {
    // A command name with spaces and a parenthesis; field 39 is 5.
    let mut fields: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
    fields[0] = "S".into();
    fields[36] = "5".into();
    let text = format!("4242 (a b) c) {}\n", fields.join(" "));
    assert_eq!(parse_stat_processor(&text), Some(5));
    assert_eq!(parse_stat_processor("4242 (x) S 1 2"), None);
}

#[test]
fn node_meminfo_reads_total_and_free() {
    let text = "Node 0 MemTotal:       24683772 kB\nNode 0 MemFree:         1302704 kB\n";
    assert_eq!(
        parse_node_meminfo(text),
        Some((24_683_772 * 1024, 1_302_704 * 1024))
    );
    assert_eq!(parse_node_meminfo("Node 0 MemTotal: 1 kB\n"), None);
}

#[test]
fn reads_are_bounded_whole_lines_of_regular_files() {
    let t = tempfile::tempdir().expect("tmp");
    write(t.path(), "f", "aaaa\nbbbb\ncccc\n");
    assert_eq!(
        read_bounded(&t.path().join("f"), 12).expect("read"),
        ("aaaa\nbbbb\n".to_string(), true)
    );
    assert!(!read_bounded(&t.path().join("f"), 100).expect("read").1);
    assert!(matches!(
        read_bounded(t.path(), 100),
        Err(MemlocError::NotAFile(_))
    ));
    // A missing cgroup file is no error: the caller falls back to numa_maps.
    assert!(read_cgroup_numa_stat(t.path(), true, 4096)
        .expect("missing")
        .is_none());
}

#[test]
fn thread_cpus_reads_every_task_of_each_pid() {
    let t = tempfile::tempdir().expect("tmp");
    let stat = |cpu: u32| {
        let mut f: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
        f[36] = cpu.to_string();
        format!("1 (sleep) {}\n", f.join(" "))
    };
    write(t.path(), "proc/7/task/7/stat", &stat(2));
    write(t.path(), "proc/7/task/8/stat", &stat(3));
    write(t.path(), "proc/9/task/9/stat", &stat(0));
    let mut cpus = thread_cpus(t.path(), &[7, 9, 11]);
    cpus.sort();
    assert_eq!(cpus, vec![0, 2, 3]);
}

/// The real thing on this host: this process's own memory, by its memory cgroup where the
/// host has one and by its numa_maps always, all on the nodes the host has; its threads ran
/// on CPUs it may use.
#[test]
fn this_process_on_this_host() {
    let root = Path::new("/");
    let pid = std::process::id();
    let maps = read_numa_maps(root, pid).expect("own numa_maps");
    assert!(maps.memory.total() > 0, "{maps:?}");
    let online = crate::topology::read_online(root).expect("online");
    let nodes = online
        .mem_nodes
        .unwrap_or_else(|| "0".parse().expect("set"));
    assert!(
        maps.memory.bytes.keys().all(|n| nodes.contains(*n)),
        "{maps:?} outside {nodes}"
    );
    let cpus = thread_cpus(root, &[pid]);
    assert!(!cpus.is_empty());
    assert!(cpus.iter().all(|c| online.cpus.contains(*c)), "{cpus:?}");
    // The memory cgroup of this process, v1 or v2, when the host mounts one.
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").expect("cgroup");
    let (v2, rel) = match cgroup
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|x| x.1))
    {
        Some(rel) => (false, format!("sys/fs/cgroup/memory{rel}")),
        None => match cgroup.lines().find_map(|l| l.strip_prefix("0::")) {
            Some(rel) => (true, format!("sys/fs/cgroup{rel}")),
            None => return,
        },
    };
    if let Ok(Some(mem)) = read_cgroup_numa_stat(&root.join(rel), v2, page_size()) {
        assert!(mem.total() > 0);
        assert_eq!(mem.on(&nodes), mem.total());
    }
}
