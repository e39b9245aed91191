//! Engine tests over an in-memory placer: events in, adjustments, pool updates and state out.
use super::*;
use crate::enforce::container::ContainerState;
use crate::enforce::inputs::tests::node;
use crate::enforce::state::Loaded;
use crate::enforce::testing::{AllDevices, FakePlacer};
use crate::placement::Policy;
use crate::topology::CpuSet;

fn engine(store: Option<StateStore>, config: Config) -> Engine<FakePlacer> {
    let mut p = FakePlacer::new();
    p.set_config(config.placement.clone());
    Engine::new(
        p,
        config,
        store,
        Some(Arc::new(Metrics::new())),
        Box::new(AllDevices),
    )
}

fn pod(ns: &str) -> PodView {
    PodView {
        id: format!("sb-{ns}"),
        uid: format!("uid-{ns}"),
        name: "p".into(),
        namespace: ns.into(),
        ..Default::default()
    }
}

/// A container asking for `cores` Guaranteed CPUs (0: shared), with `gpu` nodes.
fn ctr(id: &str, ns: &str, cores: i64, gpus: &[u32]) -> ContainerView {
    ContainerView {
        id: id.into(),
        name: id.into(),
        pod_sandbox_id: format!("sb-{ns}"),
        state: ContainerState::Running,
        resources: ResourcesView {
            cpu_shares: Some(if cores > 0 { cores as u64 * 1024 } else { 102 }),
            cpu_quota: (cores > 0).then_some(cores * 100_000),
            cpu_period: Some(100_000),
            ..Default::default()
        },
        devices: gpus
            .iter()
            .map(|m| node(&format!("/dev/nvidia{m}"), 195, i64::from(*m)))
            .collect(),
        ..Default::default()
    }
}

fn running(e: &Engine<FakePlacer>, id: &str) -> ContainerView {
    // What the runtime would report for a container the engine adjusted.
    let r = &e.records().containers[id];
    let mut c = ctr(id, &r.namespace, 0, &[]);
    c.resources.cpuset_cpus = r.applied_cpus.to_string().into();
    c
}

#[test]
fn exclusive_create_shrinks_the_pool_and_stop_grows_it_back() {
    let mut e = engine(None, Config::default());
    let shared = e
        .create_container(&pod("a"), &ctr("s1", "a", 0, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(shared.adjustment.cpuset_cpus.to_string(), "0-7");
    assert!(shared.updates.is_empty());

    let ex = e
        .create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(ex.adjustment.cpuset_cpus.to_string(), "0-1");
    assert_eq!(
        ex.updates,
        vec![CpusetUpdate {
            container_id: "s1".into(),
            cpus: "2-7".parse().expect("set")
        }]
    );

    // A later shared container starts on the shrunken pool; nobody else moves.
    let s2 = e
        .create_container(&pod("a"), &ctr("s2", "a", 0, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(
        (
            s2.adjustment.cpuset_cpus.to_string().as_str(),
            s2.updates.len()
        ),
        ("2-7", 0)
    );

    let grown = e.release_container("x1");
    let ids: Vec<_> = grown.iter().map(|u| u.container_id.as_str()).collect();
    assert_eq!(ids, vec!["s1", "s2"]);
    assert!(grown.iter().all(|u| u.cpus.to_string() == "0-7"));
    assert!(
        e.release_container("x1").is_empty(),
        "release is idempotent"
    );
}

#[test]
fn shared_container_bound_to_a_node_follows_the_pool_there_only() {
    let mut e = engine(None, Config::default());
    let cpus = |s: &str| -> CpuSet { s.parse().expect("set") };
    let bound = e
        .create_container(&pod("a"), &ctr("sg", "a", 0, &[1]))
        .expect("ok")
        .expect("adj");
    assert_eq!(
        bound.adjustment.cpuset_cpus.to_string(),
        "4-7",
        "shared CPUs of GPU 1's node"
    );
    e.create_container(&pod("a"), &ctr("s1", "a", 0, &[]))
        .expect("ok")
        .expect("adj");

    // Node 0 loses two CPUs: only the unbound container follows.
    let x1 = e
        .create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(
        x1.updates,
        vec![CpusetUpdate {
            container_id: "s1".into(),
            cpus: cpus("2-7")
        }]
    );

    // Node 1 loses two: the bound container keeps to what is left there.
    let x2 = e
        .create_container(&pod("a"), &ctr("x2", "a", 2, &[1]))
        .expect("ok")
        .expect("adj");
    let mut got: Vec<(String, String)> = x2
        .updates
        .iter()
        .map(|u| (u.container_id.clone(), u.cpus.to_string()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("s1".to_string(), "2-3,6-7".to_string()),
            ("sg".to_string(), "6-7".to_string())
        ]
    );
}

#[test]
fn gpu_container_is_aligned_to_its_gpu_with_env_and_nodes() {
    let mut e = engine(None, Config::default());
    let out = e
        .create_container(&pod("g"), &ctr("g1", "g", 2, &[1]))
        .expect("ok")
        .expect("adj");
    assert_eq!(
        out.adjustment.cpuset_cpus.to_string(),
        "4-5",
        "GPU 1 sits on node 1"
    );
    assert_eq!(out.adjustment.cpuset_mems.to_string(), "1");
    assert_eq!(out.adjustment.env["CUDA_VISIBLE_DEVICES"], "0");
    assert_eq!(out.adjustment.env["NVIDIA_VISIBLE_DEVICES"], "GPU-1aaa");
    assert!(out
        .adjustment
        .device_rules
        .iter()
        .any(|r| r.allow && r.minor == Some(1)));
}

#[test]
fn rejection_fails_the_create_with_the_message_and_is_counted() {
    let mut e = engine(None, Config::default());
    let err = e
        .create_container(&pod("a"), &ctr("big", "a", 6, &[]))
        .expect_err("too big");
    assert_eq!(
        err.to_string(),
        "nri-align: 6 CPUs do not fit on one NUMA node"
    );
    assert!(e.records().containers.is_empty());
    let text = e.metrics.as_ref().expect("metrics").encode();
    assert!(
        text.contains("nri_align_rejections_total{reason=\"unalignable\"} 1"),
        "{text}"
    );
    let bad = ctr("bad", "a", 0, &[7]);
    let err = e
        .create_container(&pod("a"), &bad)
        .expect_err("unknown gpu");
    assert!(err.to_string().contains("names GPU \"7\""), "{err}");
}

#[test]
fn exempt_namespaces_run_on_the_shared_pool_unaligned() {
    let cfg = Config::parse("exempt_namespaces: [kube-system]", "t").expect("cfg");
    let mut e = engine(None, cfg);
    // Asks for 2 whole CPUs and a GPU: an exempt container gets neither, only the pool.
    let out = e
        .create_container(&pod("kube-system"), &ctr("k", "kube-system", 2, &[0]))
        .expect("ok")
        .expect("adjustment");
    assert_eq!(
        out.adjustment.cpuset_cpus.to_string(),
        e.placer().shared_pool().to_string()
    );
    assert!(out.adjustment.cpuset_mems.is_empty());
    assert!(out.adjustment.add_devices.is_empty() && out.adjustment.env.is_empty());
    let r = &e.records().containers["k"];
    assert!(r.exempt && !r.assignment.exclusive && r.assignment.gpus.is_empty());
}

#[test]
fn restart_restores_state_releases_the_gone_and_never_double_allocates() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = || Some(StateStore::open(dir.path()).expect("store"));
    let mut first = engine(store(), Config::default());
    first
        .create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok");
    first
        .create_container(&pod("a"), &ctr("x2", "a", 2, &[]))
        .expect("ok");
    first
        .create_container(&pod("a"), &ctr("s1", "a", 0, &[]))
        .expect("ok");
    let live = vec![running(&first, "x1"), running(&first, "s1")];
    drop(first); // kill -9: nothing but the state file survives

    let mut second = engine(store(), Config::default());
    assert_eq!(
        second.start(),
        StartState::Restored {
            restored: 3,
            dropped: vec![]
        }
    );
    let updates = second.synchronize(&[pod("a")], &live);
    assert!(
        !second.records().containers.contains_key("x2"),
        "x2 is gone"
    );
    // x2's CPUs went back to the pool, so s1 follows it.
    assert_eq!(
        updates,
        vec![CpusetUpdate {
            container_id: "s1".into(),
            cpus: "2-7".parse().expect("set")
        }]
    );
    let x3 = second
        .create_container(&pod("a"), &ctr("x3", "a", 2, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(
        x3.adjustment.cpuset_cpus.to_string(),
        "2-3",
        "x1 keeps 0-1; x3 gets what x2 had"
    );
}

#[test]
fn prelaunched_without_synchronize_relies_on_the_state_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut first = engine(
        Some(StateStore::open(dir.path()).expect("s")),
        Config::default(),
    );
    first
        .create_container(&pod("a"), &ctr("x1", "a", 4, &[]))
        .expect("ok");
    drop(first);
    let mut second = engine(
        Some(StateStore::open(dir.path()).expect("s")),
        Config::default(),
    );
    second.start();
    let x2 = second
        .create_container(&pod("a"), &ctr("x2", "a", 4, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(x2.adjustment.cpuset_cpus.to_string(), "4-7");
    assert!(
        second
            .create_container(&pod("a"), &ctr("x3", "a", 1, &[]))
            .is_err(),
        "no CPU left"
    );
}

#[test]
fn prune_releases_only_when_liveness_is_known() {
    let mut e = engine(None, Config::default());
    e.create_container(&pod("a"), &ctr("x1", "a", 4, &[]))
        .expect("ok");
    e.create_container(&pod("a"), &ctr("x2", "a", 4, &[]))
        .expect("ok");
    assert!(e.prune_gone(None).is_empty());
    let live = std::collections::HashSet::from(["x2".to_string()]);
    assert_eq!(e.prune_gone(Some(&live)), vec!["x1".to_string()]);
    let again = e
        .create_container(&pod("a"), &ctr("x3", "a", 4, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(
        again.adjustment.cpuset_cpus.to_string(),
        "0-3",
        "x1's CPUs are free again"
    );
}

#[test]
fn corrupt_state_is_rebuilt_from_running_containers() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = StateStore::open(dir.path()).expect("s");
    std::fs::write(store.path(), "not a state log").expect("write");
    let mut e = engine(Some(store), Config::default());
    assert!(matches!(e.start(), StartState::Corrupt(_)));
    let mut pinned = ctr("x1", "a", 2, &[]);
    pinned.resources.cpuset_cpus = "6-7".into();
    let mut clash = ctr("x2", "a", 2, &[]);
    clash.resources.cpuset_cpus = "6-7".into();
    e.synchronize(&[pod("a")], &[pinned, clash]);
    let recs = &e.records().containers;
    assert!(recs["x1"].assignment.exclusive);
    assert!(
        !recs["x2"].assignment.exclusive,
        "a clash is kept running but not exclusive"
    );
    let next = e
        .create_container(&pod("a"), &ctr("x3", "a", 2, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(next.adjustment.cpuset_cpus.to_string(), "0-1");
    assert!(
        matches!(StateStore::open_read_only(dir.path()).expect("s").load(), Loaded::Doc(d) if d.containers.len() == 3)
    );
}

#[test]
fn cri_update_replaces_only_on_a_resource_change() {
    let mut e = engine(None, Config::default());
    e.create_container(&pod("a"), &ctr("s1", "a", 0, &[]))
        .expect("ok");
    e.create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok");
    let same = ctr("x1", "a", 2, &[]).resources;
    assert!(e
        .update_container(&pod("a"), &ctr("x1", "a", 2, &[]), &same)
        .expect("ok")
        .is_empty());
    let bigger = ctr("x1", "a", 3, &[]).resources;
    let ups = e
        .update_container(&pod("a"), &ctr("x1", "a", 2, &[]), &bigger)
        .expect("ok");
    assert_eq!(
        ups[0],
        CpusetUpdate {
            container_id: "x1".into(),
            cpus: "0-2".parse().expect("set")
        }
    );
    assert_eq!(
        ups[1],
        CpusetUpdate {
            container_id: "s1".into(),
            cpus: "3-7".parse().expect("set")
        }
    );
    let huge = ctr("x1", "a", 5, &[]).resources;
    assert!(e
        .update_container(&pod("a"), &ctr("x1", "a", 3, &[]), &huge)
        .is_err());
    assert_eq!(
        e.records().containers["x1"].assignment.cpus.to_string(),
        "0-2",
        "old decision kept"
    );
}

#[test]
fn reload_applies_reserved_cpus_or_keeps_the_old_config() {
    let mut e = engine(None, Config::default());
    e.create_container(&pod("a"), &ctr("s1", "a", 0, &[]))
        .expect("ok");
    let ups = e
        .reload(Config::parse("reserved_cpus: \"0\"\npolicy: restricted", "t").expect("cfg"))
        .expect("ok");
    assert_eq!(
        ups,
        vec![CpusetUpdate {
            container_id: "s1".into(),
            cpus: "1-7".parse().expect("set")
        }]
    );
    assert_eq!(e.config().placement.policy, Policy::Restricted);
    assert!(e
        .reload(Config::parse("reserved_cpus: \"0-9\"", "t").expect("cfg"))
        .is_err());
    assert_eq!(
        e.config().placement.policy,
        Policy::Restricted,
        "old config kept"
    );
}

#[test]
fn pod_removal_releases_all_its_containers() {
    let mut e = engine(None, Config::default());
    e.create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok");
    e.create_container(&pod("a"), &ctr("x2", "a", 2, &[]))
        .expect("ok");
    e.create_container(&pod("b"), &ctr("s1", "b", 0, &[]))
        .expect("ok");
    let ups = e.release_pod("sb-a");
    assert_eq!(
        ups,
        vec![CpusetUpdate {
            container_id: "s1".into(),
            cpus: "0-7".parse().expect("set")
        }]
    );
    assert_eq!(e.records().containers.len(), 1);
}

#[test]
fn gpus_that_arrive_as_device_nodes_are_kept_in_remap_mode() {
    use crate::placement::GpuMode;
    let mut cfg = Config::default();
    cfg.placement.gpu_mode = GpuMode::Remap;
    let mut e = engine(None, cfg);
    // A device node in the spec: the runtime could not remove it, so no remapping.
    e.create_container(&pod("g"), &ctr("n1", "g", 1, &[0]))
        .expect("ok")
        .expect("adj");
    // Allocated by the kubelet and named only through NVIDIA_VISIBLE_DEVICES: remappable.
    let mut by_env = ctr("e1", "g", 1, &[]);
    by_env.env = vec!["NVIDIA_VISIBLE_DEVICES=1".into()];
    by_env.kubelet_devices = Some(vec![crate::enforce::container::KubeletDevices {
        resource: "nvidia.com/gpu".into(),
        ids: vec!["1".into()],
    }]);
    let mut without_allocatable = by_env.clone();
    by_env.kubelet_allocatable = by_env.kubelet_devices.clone();
    e.create_container(&pod("g"), &by_env)
        .expect("ok")
        .expect("adj");
    // Named only by the environment (no authoritative source): never remapped.
    let mut env_only = ctr("e2", "g", 1, &[]);
    env_only.env = vec!["NVIDIA_VISIBLE_DEVICES=1".into()];
    e.create_container(&pod("g"), &env_only)
        .expect("ok")
        .expect("adj");
    // The kubelet's allocatable devices unknown (not answered): kept, never a guess.
    without_allocatable.id = "e3".into();
    e.create_container(&pod("g"), &without_allocatable)
        .expect("ok")
        .expect("adj");
    assert_eq!(
        e.placer().modes(),
        vec![GpuMode::Keep, GpuMode::Remap, GpuMode::Keep, GpuMode::Keep]
    );
    assert_eq!(e.config().placement.gpu_mode, GpuMode::Remap);
}

#[test]
fn a_lost_adjustment_is_reapplied_at_synchronize() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = || Some(StateStore::open(dir.path()).expect("store"));
    let mut first = engine(store(), Config::default());
    first
        .create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok");
    // nri-align died before the runtime got the answer: x1 runs without a cpuset.
    let lost = ctr("x1", "a", 2, &[]);
    drop(first);
    let mut second = engine(store(), Config::default());
    second.start();
    let updates = second.synchronize(&[pod("a")], &[lost]);
    assert_eq!(
        updates,
        vec![CpusetUpdate {
            container_id: "x1".into(),
            cpus: "0-1".parse().expect("set")
        }]
    );
    // Once it runs as recorded, nothing more is sent.
    let mut applied = ctr("x1", "a", 2, &[]);
    applied.resources.cpuset_cpus = "0-1".into();
    assert!(second.synchronize(&[pod("a")], &[applied]).is_empty());
}

#[test]
fn containers_moved_before_they_started_get_their_cpuset_again() {
    let mut e = engine(None, Config::default());
    e.create_container(&pod("a"), &ctr("s1", "a", 0, &[]))
        .expect("ok");
    assert_eq!(
        e.container_started("s1"),
        None,
        "still where it was created"
    );
    e.create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok");
    // s1 was moved to 2-7 while (as far as the runtime goes) it may not have been running.
    assert_eq!(
        e.container_started("s1"),
        Some(CpusetUpdate {
            container_id: "s1".into(),
            cpus: "2-7".parse().expect("set")
        })
    );
    assert_eq!(e.container_started("x1"), None);
    assert_eq!(e.container_started("unknown"), None);
}

#[test]
fn pod_resources_size_the_pod_before_its_first_container_only() {
    let mut e = engine(None, Config::default());
    let mut p = pod("team");
    // The kubelet's sum over a pod of two 2-CPU Guaranteed containers with 1 GiB each.
    p.resources = Some(ResourcesView {
        cpu_shares: Some(4096),
        cpu_quota: Some(400_000),
        cpu_period: Some(100_000),
        memory_limit: Some(2 << 30),
        ..Default::default()
    });
    e.create_container(&p, &ctr("a", "team", 2, &[]))
        .expect("a");
    e.create_container(&p, &ctr("b", "team", 2, &[]))
        .expect("b");
    let told = &e.placer().expected_pods;
    assert_eq!(
        told.len(),
        1,
        "told once, before the first container: {told:?}"
    );
    assert_eq!(told[0].0, "uid-team");
    assert_eq!(told[0].1.exclusive_cpus, 4);
    assert_eq!(told[0].1.memory_bytes, 2 << 30);

    // A Burstable pod (request below limit) pins no exclusive CPUs and says nothing.
    let mut q = pod("burst");
    q.resources = Some(ResourcesView {
        cpu_shares: Some(512),
        cpu_quota: Some(400_000),
        cpu_period: Some(100_000),
        ..Default::default()
    });
    e.create_container(&q, &ctr("c", "burst", 0, &[]))
        .expect("c");
    assert_eq!(e.placer().expected_pods.len(), 1);
}

#[test]
fn a_container_started_behind_synchronize_is_adopted_into_the_pool() {
    let mut e = engine(None, Config::default());
    e.synchronize(&[pod("a")], &[]);
    e.create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok");
    // Created while no plugin was connected, after Synchronize: it runs on every CPU,
    // including x1's.
    let mut stray = ctr("s9", "a", 0, &[]);
    stray.resources.cpuset_cpus = "0-7".into();
    let ups = e.adopt_started(&pod("a"), &stray);
    assert_eq!(
        ups,
        vec![CpusetUpdate {
            container_id: "s9".into(),
            cpus: "2-7".parse().expect("set")
        }]
    );
    assert!(e.records().containers.contains_key("s9"));
    assert!(e.adopt_started(&pod("a"), &stray).is_empty(), "once only");
    // An exempt one is recorded as exempt: it holds nothing and follows the pool off x1's CPUs.
    let cfg = Config::parse("exempt_namespaces: [kube-system]", "t").expect("cfg");
    let mut ex = engine(None, cfg);
    ex.create_container(&pod("a"), &ctr("x1", "a", 2, &[]))
        .expect("ok");
    let mut k1 = ctr("k1", "kube-system", 0, &[]);
    k1.pod_sandbox_id = "sb-kube-system".into();
    k1.resources.cpuset_cpus = "0-7".into();
    assert_eq!(
        ex.adopt_started(&pod("kube-system"), &k1),
        vec![CpusetUpdate {
            container_id: "k1".into(),
            cpus: "2-7".parse().expect("set")
        }]
    );
    let rec = &ex.records().containers["k1"];
    assert!(rec.exempt && !rec.assignment.exclusive, "{rec:?}");
    let x2 = ex
        .create_container(&pod("a"), &ctr("x2", "a", 2, &[]))
        .expect("ok")
        .expect("adj");
    assert_eq!(
        x2.adjustment.cpuset_cpus.to_string(),
        "2-3",
        "k1 holds nothing"
    );
}

mod cdi_devices;
mod claims;
mod consistency;
mod diskfull;
mod gpu_props;
mod headroom;
mod hugepages;
mod kubernetes;
mod listing;
mod logs;
mod mempolicy;
mod observe;
mod others;
mod pod_budget;
mod privileged;
mod props;
mod quota;
mod rdma_cdi;
mod resize;
mod restarts;
mod scheduler;
