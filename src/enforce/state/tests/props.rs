//! The log against the live table: whatever sequence of records, removals, stops and whole
//! group moves the engine makes, replaying the log gives the table it had (each follower on
//! its group's last cpuset, each pinned record on its own), and a group moved whole costs a
//! line or two, not one per member.

use proptest::prelude::*;

use super::super::*;
use crate::topology::NodeSet;

const CPUSETS: [&str; 4] = ["0-15", "0-3,8-15", "4-7", "0,2,4-15"];
const NODES: [&str; 3] = ["", "0", "1"];

/// A shared, exempt or exclusive record on `CPUSETS[cpus]`.
fn record(kind: u8, nodes: usize, cpus: usize) -> Record {
    let mut r = Record {
        applied_cpus: CPUSETS[cpus].parse().expect("cpus"),
        pod_sandbox_id: format!("pod{nodes}"),
        ..Record::default()
    };
    r.assignment.numa_nodes = NODES[nodes].parse().expect("nodes");
    r.assignment.cpus = r.applied_cpus.clone();
    match kind {
        0 => r.assignment.exclusive = true,
        1 => r.exempt = true,
        _ => {}
    }
    r
}

fn key(k: usize) -> GroupKey {
    match NODES.get(k) {
        Some(n) => GroupKey::Nodes(n.parse().expect("nodes")),
        None => GroupKey::Exempt,
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u8, u8, usize, usize),
    Remove(u8),
    Stop(u8),
    Move(usize, usize, Option<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..10u8, 0..5u8, 0..NODES.len(), 0..CPUSETS.len())
            .prop_map(|(id, kind, n, c)| Op::Insert(id, kind, n, c)),
        1 => (0..10u8).prop_map(Op::Remove),
        1 => (0..10u8).prop_map(Op::Stop),
        3 => (0..=NODES.len(), 0..CPUSETS.len(), proptest::option::of(0..10u8))
            .prop_map(|(k, c, e)| Op::Move(k, c, e)),
    ]
}

fn apply(t: &mut Records, op: &Op) {
    match op {
        Op::Insert(id, kind, n, c) => {
            t.insert(format!("c{id}"), record(*kind, *n, *c));
        }
        Op::Remove(id) => {
            t.remove(&format!("c{id}"));
        }
        Op::Stop(id) => {
            if let Some(mut r) = t.get_mut(&format!("c{id}")) {
                r.stopped = true;
            }
        }
        Op::Move(k, c, except) => {
            let target: CpuSet = CPUSETS[*c].parse().expect("cpus");
            let except = except.map(|e| format!("c{e}"));
            t.move_group(&key(*k), &target, except.as_deref(), |_| {});
        }
    }
}

fn replayed(dir: &std::path::Path) -> Records {
    let mut reader = StateStore::open_read_only(dir).expect("open");
    match reader.load() {
        Loaded::Doc(d) => d.containers,
        other => panic!("expected records, got {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn replaying_the_log_gives_the_live_table(
        ops in proptest::collection::vec((op(), any::<bool>()), 1..60),
    ) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut store = StateStore::open(dir.path()).expect("open");
        let mut t = Records::new();
        for (op, write) in &ops {
            apply(&mut t, op);
            if *write {
                store.write(&mut t).expect("write");
                prop_assert_eq!(&replayed(dir.path()), &t, "after {:?}", op);
            }
        }
        store.write(&mut t).expect("write");
        prop_assert_eq!(&replayed(dir.path()), &t);
        // A restarted writer goes on from what it read.
        drop(store);
        let mut store = StateStore::open(dir.path()).expect("reopen");
        let mut back = match store.load() {
            Loaded::Doc(d) => d.containers,
            other => panic!("expected records, got {other:?}"),
        };
        for (op, _) in ops.iter().take(8) {
            apply(&mut back, op);
            apply(&mut t, op);
        }
        store.write(&mut back).expect("write");
        prop_assert_eq!(&replayed(dir.path()), &t);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// `move_group` finds a big group's members by walking the table, a small one's by
    /// look-ups: either way the same records move, in the same order, with the same changes
    /// noted for the log.
    #[test]
    fn walking_the_table_moves_a_group_as_look_ups_do(
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut t = Records::new();
        for op in &ops {
            let Op::Move(k, c, except) = op else {
                apply(&mut t, op);
                continue;
            };
            let target: CpuSet = CPUSETS[*c].parse().expect("cpus");
            let except = except.map(|e| format!("c{e}"));
            let by = |walk: bool| {
                let mut table = t.clone();
                let mut ids = Vec::new();
                let note = |id: &str| ids.push(id.to_string());
                table.move_group_by(&key(*k), &target, except.as_deref(), note, walk);
                let changes = (table.take_dirty(), table.take_moved());
                (table, ids, changes)
            };
            let (walked, walked_ids, walked_changes) = by(true);
            let (looked, looked_ids, looked_changes) = by(false);
            prop_assert_eq!(&walked, &looked);
            let aligned =
                |t: &Records| t.group(&key(*k)).and_then(|g| g.aligned_to().cloned());
            prop_assert_eq!(aligned(&walked), aligned(&looked));
            prop_assert_eq!(walked_ids, looked_ids);
            prop_assert_eq!(walked_changes, looked_changes);
            t.move_group(&key(*k), &target, except.as_deref(), |_| {});
            prop_assert_eq!(&t, &walked);
        }
    }
}

#[test]
fn moving_a_thousand_shared_containers_is_one_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut store = StateStore::open(dir.path()).expect("open");
    let mut t = Records::new();
    for i in 0..1000 {
        t.insert(format!("s{i:04}"), record(2, 0, 0));
    }
    store.write(&mut t).expect("write");
    // The first write is a compaction: the group's line, every member a follower of it.
    let whole = GroupKey::Nodes(NodeSet::new());
    let mut moved = 0;
    t.move_group(&whole, &CPUSETS[1].parse().expect("cpus"), None, |_| {
        moved += 1
    });
    store.write(&mut t).expect("write");
    assert_eq!(moved, 1000);
    let before = store.lines();
    let size = std::fs::metadata(store.path()).expect("stat").len();
    // From then on: an exclusive admission shrinks the pool, every member moves, one line.
    t.insert("x".into(), record(0, 1, 2));
    t.move_group(&whole, &CPUSETS[3].parse().expect("cpus"), None, |_| {
        moved += 1
    });
    store.write(&mut t).expect("write");
    assert_eq!(moved, 2000);
    assert_eq!(
        store.lines(),
        before + 2,
        "the exclusive record and the group line"
    );
    let grown = std::fs::metadata(store.path()).expect("stat").len() - size;
    assert!(grown < 1024, "{grown} bytes for a move of 1,000 containers");
    assert_eq!(replayed(dir.path()), t);
    // A new shared container on the group's pool is a follower: its line has no cpuset.
    t.insert("s-new".into(), t["s0000"].clone());
    store.write(&mut t).expect("write");
    let text = std::fs::read_to_string(store.path()).expect("read");
    let last = text.lines().last().expect("line");
    assert!(
        last.contains(r#""follows":true"#) && !last.contains("applied_cpus"),
        "{last}"
    );
    assert_eq!(replayed(dir.path()), t);
}
