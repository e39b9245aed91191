//! What the runtime's CRI lists, taken in where no Synchronize comes (`Engine::adopt_listed`):
//! only ever adds records, never releases one.

use super::*;

#[test]
fn a_lost_state_learns_the_running_containers_without_releasing_any() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = StateStore::open(dir.path()).expect("s");
    std::fs::write(store.path(), "not a state log").expect("write");
    let cfg = Config::parse("exempt_namespaces: [kube-system]", "t").expect("cfg");
    let mut e = engine(Some(store), cfg);
    assert!(matches!(e.start(), StartState::Corrupt(_)));
    // Created after the start, before the listing is taken in: not in the listing.
    e.create_container(&pod("a"), &ctr("new", "a", 2, &[]))
        .expect("ok")
        .expect("adj");
    let mut held = ctr("x1", "a", 2, &[]);
    held.resources.cpuset_cpus = "6-7".into();
    let mut shared = ctr("s1", "a", 0, &[]);
    shared.resources.cpuset_cpus = "0-7".into();
    let mut exempt = ctr("k1", "kube-system", 0, &[]);
    exempt.pod_sandbox_id = "sb-kube-system".into();
    let mut orphan = ctr("o1", "gone", 1, &[]);
    orphan.resources.cpuset_cpus = "5".into();
    let mut ended = ctr("e1", "a", 1, &[]);
    ended.state = ContainerState::Stopped;
    ended.resources.cpuset_cpus = "4".into();
    let (adopted, ups) = e.adopt_listed(
        &[pod("a"), pod("kube-system")],
        &[held, shared, exempt, orphan, ended],
    );
    assert_eq!(adopted, 4, "x1, s1, k1 and o1 (its pod was not listed)");
    let recs = &e.records().containers;
    assert!(
        recs.contains_key("new"),
        "a record the listing misses stays"
    );
    assert!(recs["x1"].assignment.exclusive);
    assert!(recs["o1"].assignment.exclusive);
    assert!(recs["k1"].exempt && !recs["k1"].assignment.exclusive);
    assert!(
        !recs.contains_key("e1"),
        "an exited container holds nothing"
    );
    let pool: CpuSet = "2-4".parse().expect("set");
    assert_eq!(
        ups,
        ["k1", "s1"]
            .map(|id| CpusetUpdate {
                container_id: id.into(),
                cpus: pool.clone()
            })
            .to_vec(),
        "the shared and the exempt container leave the exclusive CPUs"
    );
    // What the listing says is held is never handed out again.
    let next = e
        .create_container(&pod("a"), &ctr("x2", "a", 2, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(next.adjustment.cpuset_cpus.to_string(), "2-3");
    // Taking the same listing in again changes nothing.
    assert_eq!(e.adopt_listed(&[pod("a")], &[]), (0, Vec::new()));
    assert!(
        matches!(StateStore::open_read_only(dir.path()).expect("s").load(), Loaded::Doc(d) if d.containers.len() == 6)
    );
}

#[test]
fn an_exempt_container_keeps_following_the_pool_after_synchronize() {
    let cfg = Config::parse("exempt_namespaces: [kube-system]", "t").expect("cfg");
    let mut e = engine(None, cfg);
    let mut k1 = ctr("k1", "kube-system", 0, &[]);
    k1.pod_sandbox_id = "sb-kube-system".into();
    e.create_container(&pod("kube-system"), &k1).expect("ok");
    let mut running_k1 = k1.clone();
    running_k1.resources.cpuset_cpus = e.records().containers["k1"].applied_cpus.to_string().into();
    // nri-align restarted: the runtime lists k1, running where nri-align put it.
    e.synchronize(&[pod("a"), pod("kube-system")], &[running_k1]);
    assert!(
        e.records().containers["k1"].exempt,
        "its record is kept: {:?}",
        e.records().containers.keys().collect::<Vec<_>>()
    );
    let x = e
        .create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(x.adjustment.cpuset_cpus.to_string(), "0-1");
    assert_eq!(
        x.updates,
        vec![CpusetUpdate {
            container_id: "k1".into(),
            cpus: "2-7".parse().expect("set")
        }],
        "the exempt container leaves the exclusive CPUs"
    );
}

#[test]
fn an_unrecorded_exempt_container_is_recorded_and_follows_the_pool() {
    let cfg = Config::parse("exempt_namespaces: [kube-system]", "t").expect("cfg");
    let mut e = engine(None, cfg);
    // Created before nri-align ran: on every CPU, with no record.
    let mut k2 = ctr("k2", "kube-system", 0, &[]);
    k2.pod_sandbox_id = "sb-kube-system".into();
    k2.resources.cpuset_cpus = "0-7".into();
    let ups = e.synchronize(&[pod("a"), pod("kube-system")], &[k2]);
    assert!(ups.is_empty(), "the pool is every CPU: {ups:?}");
    let rec = &e.records().containers["k2"];
    assert!(rec.exempt && !rec.assignment.exclusive, "{rec:?}");
    let x = e
        .create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(
        x.adjustment.cpuset_cpus.to_string(),
        "0-1",
        "k2 holds nothing"
    );
    assert_eq!(
        x.updates,
        vec![CpusetUpdate {
            container_id: "k2".into(),
            cpus: "2-7".parse().expect("set")
        }]
    );
}
