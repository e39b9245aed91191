use super::*;

fn rec(pod: &str, exclusive: bool, nodes: &str, applied: &str) -> Record {
    let mut r = Record {
        pod_sandbox_id: pod.into(),
        applied_cpus: applied.parse().expect("cpus"),
        ..Default::default()
    };
    r.assignment.exclusive = exclusive;
    r.assignment.numa_nodes = nodes.parse().expect("nodes");
    r
}

fn group<'a>(t: &'a Records, nodes: &str) -> Option<&'a SharedGroup> {
    t.group(&GroupKey::Nodes(nodes.parse().expect("nodes")))
}

#[test]
fn changes_are_tracked_and_indexes_follow_them() {
    let mut t = Records::new();
    t.insert("a".into(), rec("p1", false, "", "4-7"));
    t.insert("b".into(), rec("p1", true, "0", "0-1"));
    t.insert("c".into(), rec("p2", false, "", "4-7"));
    assert_eq!(t.take_dirty().len(), 3);
    assert!(t.take_dirty().is_empty());
    assert_eq!(t.pod_containers("p1"), vec!["a", "b"]);
    let g = group(&t, "").expect("group");
    assert_eq!(g.members().collect::<Vec<_>>(), vec!["a", "c"]);
    assert_eq!(g.aligned_to().map(ToString::to_string), Some("4-7".into()));

    // A member on other CPUs makes the group's cpuset unknown until marked again.
    t.insert("d".into(), rec("p2", false, "", "2-7"));
    assert_eq!(group(&t, "").expect("group").aligned_to(), None);
    assert_eq!(t.take_dirty(), BTreeSet::from(["d".to_string()]));
    let mut moved = Vec::new();
    let target: CpuSet = "2-7".parse().expect("cpus");
    let key = GroupKey::Nodes(NodeSet::new());
    t.move_group(&key, &target, None, |id| moved.push(id.to_string()));
    assert_eq!(moved, vec!["a", "c"], "only the members elsewhere move");
    assert!(
        t.take_dirty().is_empty(),
        "a whole group's move is one change"
    );
    assert_eq!(t.take_moved(), HashSet::from([key.clone()]));
    assert_eq!(t["a"].applied_cpus, target);
    assert_eq!(group(&t, "").expect("group").aligned_to(), Some(&target));
    t.move_group(&key, &target, None, |_| panic!("nothing to move"));
    assert!(t.take_moved().is_empty(), "an aligned group is no change");

    // A change through the guard moves the record between indexes and is persisted.
    {
        let mut r = t.get_mut("a").expect("a");
        r.assignment.exclusive = true;
        r.pod_sandbox_id = "p3".into();
    }
    assert_eq!(t.take_dirty(), BTreeSet::from(["a".to_string()]));
    assert_eq!(t.pod_containers("p1"), vec!["b"]);
    assert!(t.has_pod("p3"));
    assert_eq!(
        group(&t, "").expect("group").members().collect::<Vec<_>>(),
        vec!["c", "d"]
    );

    t.remove("b");
    t.remove("nope");
    assert!(!t.has_pod("p1"));
    assert_eq!(t.take_dirty(), BTreeSet::from(["b".to_string()]));
    t.remove("c");
    t.remove("d");
    assert!(group(&t, "").is_none(), "empty groups go");
}

#[test]
fn a_group_whose_new_member_is_elsewhere_persists_its_moves_one_by_one() {
    let mut t = Records::new();
    t.insert("a".into(), rec("p1", false, "1", "8-15"));
    t.insert("new".into(), rec("p2", false, "1", "8-11"));
    t.take_dirty();
    let key = GroupKey::Nodes("1".parse().expect("nodes"));
    let target: CpuSet = "8-12".parse().expect("cpus");
    let mut moved = Vec::new();
    t.move_group(&key, &target, Some("new"), |id| moved.push(id.to_string()));
    assert_eq!(moved, vec!["a"]);
    assert_eq!(
        t.take_dirty(),
        BTreeSet::from(["a".to_string(), "new".to_string()])
    );
    assert!(t.take_moved().is_empty());
    assert_eq!(group(&t, "1").expect("group").aligned_to(), None);
    // Exempt records are a group of their own, exclusive ones of none.
    let mut e = rec("p3", false, "", "0-1");
    e.exempt = true;
    t.insert("e".into(), e);
    assert_eq!(t["e"].group_key(), Some(GroupKey::Exempt));
    assert!(t.group(&GroupKey::Exempt).is_some());
    assert_eq!(rec("p4", true, "1", "9").group_key(), None);
}

#[test]
fn loaded_tables_start_clean() {
    let mut t = Records::new();
    t.insert("a".into(), rec("p1", false, "1", "8-9"));
    let json = serde_json::to_string(&t).expect("json");
    let mut back: Records = serde_json::from_str(&json).expect("parse");
    assert_eq!(back, t);
    assert!(back.take_dirty().is_empty());
    assert!(group(&back, "1").is_some());
}
