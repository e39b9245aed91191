//! The CFS quota of exclusive containers (`quota.rs`): none at creation, kept none across the
//! kubelet's updates, the kubelet's back when the container turns shared, after a restart and
//! when `exclusive_cpu_quota` changes to `keep`.

use super::*;
use crate::config::ExclusiveCpuQuota;
use crate::enforce::engine::quota::{PodQuotaWrite, QuotaUpdate, NO_QUOTA};
use crate::host::cgroup::PodQuota;

fn keep() -> Config {
    Config {
        exclusive_cpu_quota: ExclusiveCpuQuota::Keep,
        ..Config::default()
    }
}

/// The container as the runtime reports it after nri-align's answers: its cpuset and quota.
fn as_running(e: &Engine<FakePlacer>, c: &ContainerView, quota: Option<i64>) -> ContainerView {
    let mut c = c.clone();
    c.resources.cpuset_cpus = e.records().containers[&c.id]
        .applied_cpus
        .to_string()
        .into();
    c.resources.cpu_quota = quota;
    c
}

fn quota(id: &str, quota: i64) -> QuotaUpdate {
    QuotaUpdate {
        container_id: id.into(),
        quota,
    }
}

/// `cores` Guaranteed CPUs as the kubelet resizes to: shares and quota.
fn resized(cores: i64) -> ResourcesView {
    ResourcesView {
        cpu_shares: Some(cores as u64 * 1024),
        cpu_quota: Some(cores * 100_000),
        cpu_period: Some(100_000),
        ..Default::default()
    }
}

#[test]
fn an_exclusive_container_is_created_without_a_quota_a_shared_one_with_the_kubelets() {
    let mut e = engine(None, Config::default());
    let x = e
        .create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(x.adjustment.cpu_quota, Some(NO_QUOTA));
    // Burstable with a limit: shared, and its quota is the kubelet's.
    let mut s = ctr("s1", "a", 0, &[]);
    s.resources.cpu_quota = Some(150_000);
    let s = e.create_container(&pod("a"), &s).expect("ok").expect("adj");
    assert_eq!(s.adjustment.cpu_quota, None);
    let r = &e.records().containers;
    assert_eq!(
        (r["x1"].kubelet_cpu_quota, r["s1"].kubelet_cpu_quota),
        (Some(200_000), Some(150_000)),
        "the kubelet's quotas are remembered"
    );
    assert!(e.take_quota_updates().is_empty());
}

#[test]
fn keep_leaves_the_kubelets_quota_on_exclusive_cpus() {
    let mut e = engine(None, keep());
    let x = e
        .create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(x.adjustment.cpu_quota, None);
    e.update_container(&pod("a"), &ctr("x1", "a", 2, &[]), &resized(3))
        .expect("resize");
    assert!(e.take_quota_updates().is_empty());
}

#[test]
fn an_exempt_container_keeps_its_quota() {
    let config = Config {
        exempt_namespaces: vec!["kube-system".into()],
        ..Config::default()
    };
    let mut e = engine(None, config);
    let out = e
        .create_container(&pod("kube-system"), &ctr("k", "kube-system", 2, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(out.adjustment.cpu_quota, None);
}

#[test]
fn a_resize_of_an_exclusive_container_keeps_it_without_a_quota() {
    let mut e = engine(None, Config::default());
    let c = ctr("x1", "a", 2, &[]);
    e.create_container(&pod("a"), &c).expect("ok");
    let now = as_running(&e, &c, Some(NO_QUOTA));
    // The kubelet's update carries its quota (300000): -1 must go with the answer.
    e.update_container(&pod("a"), &now, &resized(3))
        .expect("resize");
    assert_eq!(e.take_quota_updates(), vec![quota("x1", NO_QUOTA)]);
    assert_eq!(
        e.records().containers["x1"].kubelet_cpu_quota,
        Some(300_000)
    );
    // The same resources again (no new decision): the quota still goes with the answer.
    let now = as_running(&e, &c, Some(NO_QUOTA));
    e.update_container(&pod("a"), &now, &resized(3))
        .expect("same");
    assert_eq!(e.take_quota_updates(), vec![quota("x1", NO_QUOTA)]);
}

#[test]
fn a_resize_from_exclusive_to_shared_gives_the_kubelets_quota_back() {
    let mut e = engine(None, Config::default());
    let c = ctr("x1", "a", 2, &[]);
    e.create_container(&pod("a"), &c).expect("ok");
    let now = as_running(&e, &c, Some(NO_QUOTA));
    // 1.5 CPUs, limit 2: Burstable, shared.
    let shared = ResourcesView {
        cpu_shares: Some(1536),
        cpu_quota: Some(200_000),
        cpu_period: Some(100_000),
        ..Default::default()
    };
    e.update_container(&pod("a"), &now, &shared)
        .expect("resize");
    assert!(!e.records().containers["x1"].assignment.exclusive);
    assert_eq!(e.take_quota_updates(), vec![quota("x1", 200_000)]);
    // A shared container already running with the kubelet's quota gets nothing more.
    let now = as_running(&e, &c, Some(200_000));
    e.update_container(&pod("a"), &now, &shared).expect("same");
    assert!(e.take_quota_updates().is_empty());
}

#[test]
fn a_restart_restores_the_quota_each_container_should_run_with() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = || Some(StateStore::open(dir.path()).expect("store"));
    let mut first = engine(store(), Config::default());
    let x1 = ctr("x1", "a", 2, &[]);
    let x2 = ctr("x2", "a", 2, &[]);
    first.create_container(&pod("a"), &x1).expect("ok");
    first.create_container(&pod("a"), &x2).expect("ok");
    // x1 runs as answered; x2's answer was lost (the runtime restarted before applying it).
    let live = vec![
        as_running(&first, &x1, Some(NO_QUOTA)),
        as_running(&first, &x2, Some(200_000)),
    ];
    drop(first);

    let mut second = engine(store(), Config::default());
    second.start();
    second.synchronize(&[pod("a")], &live);
    assert_eq!(second.take_quota_updates(), vec![quota("x2", NO_QUOTA)]);
    drop(second);

    // Restarted with `keep`: the kubelet's quota comes back from the record, since the
    // runtime's spec no longer has it.
    let mut third = engine(store(), keep());
    third.start();
    third.synchronize(&[pod("a")], &live);
    assert_eq!(third.take_quota_updates(), vec![quota("x1", 200_000)]);
}

#[test]
fn a_record_from_before_the_quota_was_remembered_learns_it_from_what_runs() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = || Some(StateStore::open(dir.path()).expect("store"));
    let mut first = engine(store(), keep());
    let x1 = ctr("x1", "a", 2, &[]);
    first.create_container(&pod("a"), &x1).expect("ok");
    let live = vec![as_running(&first, &x1, Some(200_000))];
    // As an earlier version wrote it.
    if let Some(mut r) = first.doc.containers.get_mut("x1") {
        r.kubelet_cpu_quota = None;
    }
    first.persist();
    drop(first);

    let mut second = engine(store(), Config::default());
    second.start();
    second.synchronize(&[pod("a")], &live);
    assert_eq!(second.take_quota_updates(), vec![quota("x1", NO_QUOTA)]);
    assert_eq!(
        second.records().containers["x1"].kubelet_cpu_quota,
        Some(200_000)
    );
}

#[test]
fn a_reload_to_keep_gives_exclusive_containers_the_kubelets_quota_back() {
    let mut e = engine(None, Config::default());
    e.create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok");
    e.create_container(&pod("a"), &ctr("s1", "a", 0, &[]))
        .expect("ok");
    e.reload(keep()).expect("reload");
    assert_eq!(e.take_quota_updates(), vec![quota("x1", 200_000)]);
    e.reload(Config::default()).expect("reload");
    assert_eq!(e.take_quota_updates(), vec![quota("x1", NO_QUOTA)]);
}

#[test]
fn another_plugins_cpus_keep_their_quota() {
    let config = Config::parse("leave_to_others: [cpus]\n", "test").expect("parses");
    let mut e = engine(None, config);
    let mut c = ctr("x1", "a", 2, &[]);
    c.resources.cpuset_cpus = "2-3".into();
    let out = e.create_container(&pod("a"), &c).expect("ok").expect("adj");
    assert_eq!(out.adjustment.cpu_quota, None);
    e.update_container(&pod("a"), &c, &resized(3))
        .expect("resize");
    assert!(e.take_quota_updates().is_empty());
}

#[test]
fn a_shared_container_without_a_limit_is_created_as_the_kubelet_asked() {
    let mut e = engine(None, Config::default());
    let mut s = ctr("s1", "a", 0, &[]);
    s.resources.cpu_quota = Some(NO_QUOTA);
    let out = e.create_container(&pod("a"), &s).expect("ok").expect("adj");
    assert_eq!(out.adjustment.cpu_quota, None);
}

/// Container `id` of pod `a` with `cores` Guaranteed CPUs, in its pod's cgroup.
fn in_pod(id: &str, cores: i64) -> ContainerView {
    let mut c = ctr(id, "a", cores, &[]);
    c.cgroups_path = format!("/kubepods/poduid-a/{id}");
    c
}

fn pod_write(want: PodQuota) -> Vec<PodQuotaWrite> {
    vec![PodQuotaWrite {
        pod_uid: "uid-a".into(),
        cgroups_path: "/kubepods/poduid-a/x1".into(),
        want,
    }]
}

#[test]
fn a_pod_with_an_exclusive_container_has_its_quota_lifted_as_the_kubelet_does() {
    let mut e = engine(None, Config::default());
    e.create_container(&pod("a"), &in_pod("x1", 2)).expect("ok");
    assert_eq!(e.take_pod_quota_writes(), pod_write(PodQuota::Lift));
    // A shared sibling changes nothing: any exclusive container lifts the pod's quota.
    let mut s = in_pod("s1", 0);
    s.resources.cpu_quota = Some(50_000);
    e.create_container(&pod("a"), &s).expect("ok");
    assert!(e.take_pod_quota_writes().is_empty());
}

#[test]
fn a_pod_without_exclusive_cpus_or_under_keep_is_left_alone() {
    let mut e = engine(None, Config::default());
    e.create_container(&pod("a"), &in_pod("s1", 0)).expect("ok");
    assert!(e.take_pod_quota_writes().is_empty());
    let mut e = engine(None, keep());
    e.create_container(&pod("a"), &in_pod("x1", 2)).expect("ok");
    assert!(e.take_pod_quota_writes().is_empty());
}

#[test]
fn the_pods_quota_comes_back_when_its_last_exclusive_container_turns_shared() {
    let mut e = engine(None, Config::default());
    let c = in_pod("x1", 2);
    e.create_container(&pod("a"), &c).expect("ok");
    e.take_pod_quota_writes();
    let shared = ResourcesView {
        cpu_shares: Some(1536),
        cpu_quota: Some(200_000),
        cpu_period: Some(100_000),
        ..Default::default()
    };
    let now = as_running(&e, &c, Some(NO_QUOTA));
    e.update_container(&pod("a"), &now, &shared)
        .expect("resize");
    // The sum of its containers' quotas (the runtime passed no pod resources).
    assert_eq!(
        e.take_pod_quota_writes(),
        pod_write(PodQuota::PutBack(200_000))
    );
    // With the pod's resources, the kubelet's own sum.
    let mut e = engine(None, Config::default());
    let mut p = pod("a");
    p.resources = Some(ResourcesView {
        cpu_quota: Some(250_000),
        ..Default::default()
    });
    e.create_container(&p, &c).expect("ok");
    e.take_pod_quota_writes();
    let now = as_running(&e, &c, Some(NO_QUOTA));
    e.update_container(&p, &now, &shared).expect("resize");
    assert_eq!(
        e.take_pod_quota_writes(),
        pod_write(PodQuota::PutBack(250_000))
    );
}

#[test]
fn a_restart_lifts_the_pods_quota_again_or_under_keep_puts_it_back() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = || Some(StateStore::open(dir.path()).expect("store"));
    let mut first = engine(store(), Config::default());
    let x1 = in_pod("x1", 2);
    first.create_container(&pod("a"), &x1).expect("ok");
    let live = vec![as_running(&first, &x1, Some(NO_QUOTA))];
    drop(first);
    let mut second = engine(store(), Config::default());
    second.start();
    second.synchronize(&[pod("a")], &live);
    assert_eq!(second.take_pod_quota_writes(), pod_write(PodQuota::Lift));
    drop(second);
    let mut third = engine(store(), keep());
    third.start();
    third.synchronize(&[pod("a")], &live);
    assert_eq!(
        third.take_pod_quota_writes(),
        pod_write(PodQuota::PutBack(200_000))
    );
}
