//! `leave_to_others` on the real allocator: a node where another NRI plugin (a DRA CPU
//! driver's) owns `cpuset.cpus`. nri-align never sets the field, in a creation or an update,
//! records the CPUs the container gets (a claim's as held), and aligns memory to them.

use super::kubernetes::{kctr, kpod, real};
use super::*;
use crate::config::{LeftField, LeftToOthers};
use crate::enforce::adjust::MemsUpdate;
use crate::enforce::testing::dra_cpu_claim;
use crate::placement::Allocator;

fn cpus_left() -> Config {
    Config {
        leave_to_others: LeftToOthers::of(&[LeftField::Cpus]),
        ..Config::default()
    }
}

fn create(e: &mut Engine<Allocator>, p: &PodView, c: &ContainerView) -> CreateOutcome {
    e.create_container(p, c).expect("admitted").expect("placed")
}

#[test]
fn a_claims_cpus_are_recorded_held_and_memory_follows_them_without_a_cpuset() {
    let mut e = real(cpus_left(), "");
    let p = kpod("dra", "claimer", &[]);
    let mut c = kctr(&p, "c-1", "app", 2000, Some(2000));
    dra_cpu_claim(&mut c, "0f1e-claim", "5-6");
    // What the other plugin (lower index) set before nri-align was asked.
    c.resources.cpuset_cpus = "5-6".into();
    let out = create(&mut e, &p, &c);
    assert_eq!(
        out.adjustment.cpuset_cpus.to_string(),
        "",
        "cpus are the other plugin's"
    );
    assert_eq!(
        out.adjustment.cpuset_mems.to_string(),
        "1",
        "memory on the claim's node"
    );
    assert!(out.updates.is_empty());
    let rec = &e.records().containers["c-1"];
    assert_eq!(rec.assignment.cpus.to_string(), "5-6");
    assert!(rec.assignment.exclusive);
    // Held: nri-align's shared pool (and so what it reports free) no longer has them.
    let pool = e.placer().shared_pool();
    assert!(pool.is_disjoint(&rec.assignment.cpus), "pool {pool}");

    // A shared container gets the other plugin's pool: recorded as it is, nothing sent, and
    // the first container's release moves nobody.
    let q = kpod("dra", "web", &[]);
    let mut d = kctr(&q, "d-1", "web", 500, None);
    d.resources.cpuset_cpus = "0-4,7".into();
    let out = create(&mut e, &q, &d);
    assert_eq!(out.adjustment.cpuset_cpus.to_string(), "");
    assert_eq!(out.adjustment.cpuset_mems.to_string(), "0-1");
    assert!(!e.records().containers["d-1"].assignment.exclusive);
    assert!(e.release_container("c-1").is_empty());
    assert!(e.container_started("d-1").is_none());
    assert!(e.current_cpuset("d-1").is_none());
}

#[test]
fn without_the_key_the_same_container_gets_a_cpuset_from_nri_align() {
    let mut e = real(Config::default(), "");
    let p = kpod("dra", "claimer", &[]);
    let mut c = kctr(&p, "c-1", "app", 2000, Some(2000));
    dra_cpu_claim(&mut c, "0f1e-claim", "5-6");
    let out = create(&mut e, &p, &c);
    assert!(!out.adjustment.cpuset_cpus.is_empty());
}

#[test]
fn an_update_follows_the_other_plugins_cpuset_and_sends_nothing() {
    let mut e = real(cpus_left(), "");
    let p = kpod("dra", "web", &[]);
    let mut c = kctr(&p, "c-1", "web", 500, None);
    c.resources.cpuset_cpus = "0-7".into();
    create(&mut e, &p, &c);
    let mut r = c.resources.clone();
    r.cpu_shares = Some(1024);
    r.cpuset_cpus = "2-3".into();
    let updates = e.update_container(&p, &c, &r).expect("update");
    assert!(updates.is_empty(), "{updates:?}");
    let rec = &e.records().containers["c-1"];
    assert_eq!(rec.assignment.cpus.to_string(), "2-3");
    // Memory nodes follow, with the response: cpuset.mems only.
    assert_eq!(rec.assignment.mems.to_string(), "0");
    assert_eq!(
        e.take_mems_updates(),
        vec![MemsUpdate {
            container_id: "c-1".into(),
            mems: "0".parse().expect("nodes"),
        }]
    );
}

#[test]
fn two_containers_of_a_pod_sharing_one_cpu_claim_are_both_admitted() {
    let mut e = real(cpus_left(), "");
    let p = kpod("dra", "pair", &[]);
    let mut a = kctr(&p, "a-1", "a", 1000, Some(1000));
    dra_cpu_claim(&mut a, "shared-claim", "2-3");
    let mut b = kctr(&p, "b-1", "b", 1000, Some(1000));
    dra_cpu_claim(&mut b, "shared-claim", "2-3");
    create(&mut e, &p, &a);
    let out = create(&mut e, &p, &b);
    assert_eq!(out.adjustment.cpuset_mems.to_string(), "0");
    assert_eq!(
        e.records().containers["b-1"].assignment.cpus.to_string(),
        "2-3"
    );
}

#[test]
fn a_restarted_container_is_recorded_on_the_cpus_it_gets_now() {
    let mut e = real(cpus_left(), "");
    let p = kpod("dra", "claimer", &[]);
    let mut c = kctr(&p, "c-1", "app", 2000, Some(2000));
    dra_cpu_claim(&mut c, "claim", "1-2");
    create(&mut e, &p, &c);
    e.container_stopped("c-1");
    let again = ContainerView {
        id: "c-2".into(),
        ..c.clone()
    };
    create(&mut e, &p, &again);
    assert!(
        !e.records().containers.contains_key("c-1"),
        "predecessor released"
    );
    let rec = &e.records().containers["c-2"];
    assert_eq!(rec.assignment.cpus.to_string(), "1-2");
    assert!(
        rec.assignment.exclusive,
        "held again, not shared with its predecessor"
    );
}

#[test]
fn mems_and_devices_left_are_never_set() {
    let config = Config {
        leave_to_others: LeftToOthers::of(&[LeftField::Mems, LeftField::Devices]),
        ..Config::default()
    };
    let mut e = real(config, "");
    let p = kpod("ml", "train", &[]);
    let mut c = kctr(&p, "c-1", "cuda", 1000, Some(1000));
    c.env = vec!["NVIDIA_VISIBLE_DEVICES=GPU-1aaa".into()];
    c.kubelet_devices = Some(vec![crate::enforce::container::KubeletDevices {
        resource: "nvidia.com/gpu".into(),
        ids: vec!["GPU-1aaa".into()],
    }]);
    let out = create(&mut e, &p, &c);
    // CPUs are still nri-align's, aligned to the GPU's node.
    assert_eq!(
        out.adjustment.cpuset_cpus.to_string(),
        e.records().containers["c-1"].assignment.cpus.to_string()
    );
    assert!(e.records().containers["c-1"]
        .assignment
        .cpus
        .is_subset(&"4-7".parse().expect("list")));
    assert_eq!(out.adjustment.cpuset_mems.to_string(), "");
    assert!(out.adjustment.add_devices.is_empty());
    assert!(out.adjustment.device_rules.is_empty());
    assert!(!out.adjustment.env.contains_key("NVIDIA_VISIBLE_DEVICES"));
}

#[test]
fn synchronize_follows_what_the_other_plugin_moved_and_sends_nothing() {
    let mut e = real(cpus_left(), "");
    let p = kpod("dra", "web", &[]);
    let mut c = kctr(&p, "c-1", "web", 500, None);
    c.resources.cpuset_cpus = "0-7".into();
    create(&mut e, &p, &c);
    // The other plugin moved its pool on its own; the runtime reports it at a reconnection.
    let mut running = c.clone();
    running.state = crate::enforce::container::ContainerState::Running;
    running.resources.cpuset_cpus = "0-5".into();
    let updates = e.synchronize(std::slice::from_ref(&p), &[running.clone()]);
    assert!(updates.is_empty(), "{updates:?}");
    assert_eq!(
        e.records().containers["c-1"].assignment.cpus.to_string(),
        "0-5"
    );
    // Still on both nodes: the memory nodes stay, nothing to send.
    assert!(e.take_mems_updates().is_empty());
    // Moved onto node 1 alone: its memory follows with the Synchronize response.
    running.resources.cpuset_cpus = "4-5".into();
    e.synchronize(std::slice::from_ref(&p), &[running]);
    assert_eq!(
        e.take_mems_updates(),
        vec![MemsUpdate {
            container_id: "c-1".into(),
            mems: "1".parse().expect("nodes"),
        }]
    );
}

#[test]
fn cpus_seen_only_at_post_start_move_the_memory_nodes_once() {
    let mut e = real(cpus_left(), "");
    let p = kpod("dra", "late", &[]);
    // The other plugin comes after nri-align: CreateContainer shows no cpuset.
    let c = kctr(&p, "c-1", "app", 500, None);
    let out = create(&mut e, &p, &c);
    assert_eq!(
        out.adjustment.cpuset_mems.to_string(),
        "",
        "no devices, CPUs unknown"
    );
    assert!(e.moved_mems("c-1").is_none());
    // PostStartContainer shows what it set.
    let mut started = c.clone();
    started.state = crate::enforce::container::ContainerState::Running;
    started.resources.cpuset_cpus = "5-6".into();
    assert!(
        e.adopt_started(&p, &started).is_empty(),
        "no cpuset is sent"
    );
    let rec = &e.records().containers["c-1"];
    assert_eq!(rec.assignment.cpus.to_string(), "5-6");
    assert_eq!(rec.assignment.mems.to_string(), "1");
    assert_eq!(
        e.moved_mems("c-1").map(|m| m.to_string()).as_deref(),
        Some("1")
    );
    let sent = e.take_mems_updates();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].mems.to_string(), "1");
    assert!(e.take_mems_updates().is_empty(), "sent once");
    assert!(e.moved_mems("c-1").is_none());
    // The same cpuset seen again (a later Synchronize) moves nothing.
    e.adopt_started(&p, &started);
    assert!(e.take_mems_updates().is_empty());
    // A removed container's move is never sent.
    started.resources.cpuset_cpus = "1".into();
    e.adopt_started(&p, &started);
    e.release_container("c-1");
    assert!(e.take_mems_updates().is_empty());
}

#[test]
fn with_mems_left_too_late_cpus_send_no_memory_nodes() {
    let config = Config {
        leave_to_others: LeftToOthers::of(&[LeftField::Cpus, LeftField::Mems]),
        ..Config::default()
    };
    let mut e = real(config, "");
    let p = kpod("dra", "late", &[]);
    let c = kctr(&p, "c-1", "app", 500, None);
    create(&mut e, &p, &c);
    let mut started = c.clone();
    started.state = crate::enforce::container::ContainerState::Running;
    started.resources.cpuset_cpus = "5-6".into();
    e.adopt_started(&p, &started);
    assert_eq!(
        e.records().containers["c-1"].assignment.cpus.to_string(),
        "5-6"
    );
    assert!(e.moved_mems("c-1").is_none());
    assert!(e.take_mems_updates().is_empty());
}

fn mems_left() -> Config {
    Config {
        leave_to_others: LeftToOthers::of(&[LeftField::Mems]),
        ..Config::default()
    }
}

#[test]
fn memory_nodes_another_plugin_set_place_the_cpus_there() {
    let mut e = real(mems_left(), "");
    // Exclusive: its CPUs are taken on node 1, where the memory driver put its memory.
    let p = kpod("dra", "mem", &[]);
    let mut c = kctr(&p, "c-1", "app", 2000, Some(2000));
    c.resources.cpuset_mems = "1".into();
    let out = create(&mut e, &p, &c);
    assert_eq!(
        out.adjustment.cpuset_mems.to_string(),
        "",
        "mems are the other plugin's"
    );
    let rec = &e.records().containers["c-1"];
    assert_eq!(
        out.adjustment.cpuset_cpus.to_string(),
        rec.assignment.cpus.to_string()
    );
    assert_eq!(rec.assignment.cpus.len(), 2);
    assert!(
        rec.assignment.cpus.is_subset(&"4-7".parse().expect("list")),
        "{}",
        rec.assignment.cpus
    );
    assert_eq!(rec.assignment.numa_nodes.to_string(), "1");
    assert!(rec.assignment.exclusive);

    // Shared: the shared CPUs of node 0, where its memory is.
    let q = kpod("dra", "web", &[]);
    let mut d = kctr(&q, "d-1", "web", 500, None);
    d.resources.cpuset_mems = "0".into();
    let out = create(&mut e, &q, &d);
    assert_eq!(out.adjustment.cpuset_mems.to_string(), "");
    let cpus: CpuSet = out.adjustment.cpuset_cpus.clone();
    assert!(!cpus.is_empty());
    assert!(cpus.is_subset(&"0-3".parse().expect("list")), "{cpus}");
}

#[test]
fn without_memory_nodes_set_or_with_a_bad_list_the_container_is_placed_as_usual() {
    let mut e = real(mems_left(), "");
    let p = kpod("dra", "plain", &[]);
    let c = kctr(&p, "c-1", "app", 1000, Some(1000));
    let out = create(&mut e, &p, &c);
    assert!(!out.adjustment.cpuset_cpus.is_empty());
    assert_eq!(out.adjustment.cpuset_mems.to_string(), "");
    let mut d = kctr(&p, "d-1", "other", 1000, Some(1000));
    d.resources.cpuset_mems = "zero".into();
    let out = create(&mut e, &p, &d);
    assert!(
        !out.adjustment.cpuset_cpus.is_empty(),
        "placed, not refused"
    );
}

#[test]
fn memory_nodes_seen_only_at_post_start_move_the_cpus_there() {
    let mut e = real(mems_left(), "");
    let p = kpod("dra", "late-mem", &[]);
    // The memory plugin comes after nri-align: CreateContainer shows no memory nodes.
    let c = kctr(&p, "c-1", "app", 2000, Some(2000));
    create(&mut e, &p, &c);
    let before = e.records().containers["c-1"].assignment.clone();
    assert_eq!(
        before.numa_nodes.to_string(),
        "0",
        "placed by nri-align alone"
    );
    // PostStartContainer shows the memory plugin's node 1: the CPUs move there.
    let mut started = c.clone();
    started.state = crate::enforce::container::ContainerState::Running;
    started.resources.cpuset_mems = "1".into();
    let ups = e.adopt_started(&p, &started);
    let rec = &e.records().containers["c-1"];
    assert_eq!(rec.assignment.numa_nodes.to_string(), "1");
    assert_eq!(rec.assignment.cpus.len(), 2);
    assert!(rec.assignment.cpus.is_subset(&"4-7".parse().expect("list")));
    assert!(rec.assignment.exclusive);
    assert!(
        ups.iter()
            .any(|u| u.container_id == "c-1" && u.cpus == rec.assignment.cpus),
        "{ups:?}"
    );
    // Its old CPUs are free again: nri-align's pool has them.
    assert!(before.cpus.is_subset(&e.placer().shared_pool()));
    // Seen again: already there, nothing moves.
    assert!(e.adopt_started(&p, &started).is_empty());
}

#[test]
fn memory_nodes_an_update_shows_move_the_cpus_and_a_resize_keeps_them_there() {
    let mut e = real(mems_left(), "");
    let p = kpod("dra", "update-mem", &[]);
    let c = kctr(&p, "c-1", "app", 2000, Some(2000));
    create(&mut e, &p, &c);
    let before = e.records().containers["c-1"].assignment.clone();
    assert_eq!(before.numa_nodes.to_string(), "0");
    // UpdateContainer with the request unchanged and the memory plugin's node 1: the CPUs
    // move there, their update returned for the response, no memory nodes sent.
    let mut moved = c.resources.clone();
    moved.cpuset_mems = "1".into();
    let ups = e.update_container(&p, &c, &moved).expect("update");
    let rec = e.records().containers["c-1"].clone();
    assert_eq!(rec.assignment.numa_nodes.to_string(), "1");
    assert!(rec.assignment.exclusive);
    assert!(
        !before.mems.is_empty() && rec.memory_nodes_moved,
        "the record says its memory nodes moved after it started (verify names it)"
    );
    assert!(rec.assignment.cpus.is_subset(&"4-7".parse().expect("list")));
    assert_eq!(
        ups.iter()
            .filter(|u| u.container_id == "c-1")
            .map(|u| u.cpus.clone())
            .collect::<Vec<_>>(),
        vec![rec.assignment.cpus.clone()],
        "{ups:?}"
    );
    assert!(e.take_mems_updates().is_empty(), "mems are never set");
    assert!(before.cpus.is_subset(&e.placer().shared_pool()));
    // The same update again: already there, nothing moves.
    assert!(e
        .update_container(&p, &c, &moved)
        .expect("update")
        .is_empty());
    // A resize that sends no memory nodes (cpuset.mems left as it was): re-placed on the
    // memory plugin's node, not back where nri-align alone would put it.
    let mut bigger = c.resources.clone();
    bigger.cpu_shares = Some(3 * 1024);
    bigger.cpu_quota = Some(300_000);
    e.update_container(&p, &c, &bigger).expect("resize");
    let rec = &e.records().containers["c-1"];
    assert_eq!(rec.assignment.cpus.len(), 3, "{:?}", rec.assignment);
    assert_eq!(rec.assignment.numa_nodes.to_string(), "1");
}

#[test]
fn memory_nodes_synchronize_lists_move_the_cpus_once_with_its_response() {
    let mut e = real(mems_left(), "");
    let p = kpod("dra", "sync-mem", &[]);
    let c = kctr(&p, "c-1", "app", 2000, Some(2000));
    let out = create(&mut e, &p, &c);
    // Running where nri-align put it, with the memory plugin's node 1 since its start.
    let mut listed = c.clone();
    listed.state = crate::enforce::container::ContainerState::Running;
    listed.resources.cpuset_cpus = out.adjustment.cpuset_cpus.to_string().into();
    listed.resources.cpuset_mems = "1".into();
    let ups = e.synchronize(std::slice::from_ref(&p), std::slice::from_ref(&listed));
    let rec = e.records().containers["c-1"].clone();
    assert_eq!(rec.assignment.numa_nodes.to_string(), "1");
    assert!(rec.assignment.cpus.is_subset(&"4-7".parse().expect("list")));
    let own: Vec<_> = ups.iter().filter(|u| u.container_id == "c-1").collect();
    assert_eq!(own.len(), 1, "sent once, at its new CPUs: {ups:?}");
    assert_eq!(own[0].cpus, rec.assignment.cpus);
    assert!(e.take_mems_updates().is_empty());
    // Listed again where it now runs: nothing to send.
    listed.resources.cpuset_cpus = rec.assignment.cpus.to_string().into();
    let again = e.synchronize(std::slice::from_ref(&p), &[listed]);
    assert!(!again.iter().any(|u| u.container_id == "c-1"), "{again:?}");
}

#[test]
fn a_pods_own_dra_cpuset_env_changes_no_accounting() {
    let mut e = real(cpus_left(), "");
    let free_before = e.placer().shared_pool();
    // The pod spec's own entry, naming every CPU: no claim gave it.
    let p = kpod("dra", "liar", &[]);
    let mut c = kctr(&p, "c-1", "app", 1000, Some(1000));
    c.env = vec!["DRA_CPUSET_anything=0-7".into()];
    c.resources.cpuset_cpus = "0-7".into();
    create(&mut e, &p, &c);
    let rec = &e.records().containers["c-1"];
    assert!(
        !rec.assignment.exclusive,
        "recorded shared, not as a claim's holder"
    );
    assert_eq!(e.placer().shared_pool(), free_before);
    // The same entry the claim's CDI device gives is the claim's.
    let q = kpod("dra", "claimer", &[]);
    let mut d = kctr(&q, "d-1", "app", 1000, Some(1000));
    dra_cpu_claim(&mut d, "real", "6");
    create(&mut e, &q, &d);
    assert!(e.records().containers["d-1"].assignment.exclusive);
}
