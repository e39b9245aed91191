//! Hot-plug through the engine with the real allocator, under a fake host root whose
//! `online` files the tests rewrite.

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::config::Config;
use crate::enforce::container::{ContainerState, ContainerView, PodView, ResourcesView};
use crate::enforce::engine::Engine;
use crate::enforce::testing::AllDevices;
use crate::metrics::Metrics;
use crate::placement::{Allocator, Policy};
use crate::topology::testing::TopologyBuilder;
use crate::topology::Topology;

/// Two nodes of four CPUs (0-3, 4-7).
fn engine(root: &Path, replace: bool) -> (Engine<Allocator>, Arc<Metrics>) {
    let topo = Arc::new(TopologyBuilder::new().sockets(2).cores(4).build());
    let mut config = Config {
        replace_offlined_cpus: replace,
        ..Config::default()
    };
    config.placement.policy = Policy::BestEffort;
    let metrics = Arc::new(Metrics::new());
    let alloc = Allocator::new(topo, config.placement.clone());
    let mut e = Engine::new(
        alloc,
        config,
        None,
        Some(metrics.clone()),
        Box::new(AllDevices),
    );
    set_online(root, "0-7", "0-1");
    e.watch_hotplug(root);
    (e, metrics)
}

fn set_online(root: &Path, cpus: &str, mem: &str) {
    let cpu = root.join("sys/devices/system/cpu");
    let node = root.join("sys/devices/system/node");
    std::fs::create_dir_all(&cpu).expect("cpu dir");
    std::fs::create_dir_all(&node).expect("node dir");
    std::fs::write(cpu.join("online"), format!("{cpus}\n")).expect("online");
    std::fs::write(node.join("has_memory"), format!("{mem}\n")).expect("has_memory");
}

fn pod() -> PodView {
    PodView {
        id: "sb".into(),
        uid: "uid".into(),
        name: "p".into(),
        namespace: "default".into(),
        ..Default::default()
    }
}

/// A container asking for `cores` Guaranteed CPUs (0: shared).
fn ctr(id: &str, cores: i64) -> ContainerView {
    ContainerView {
        id: id.into(),
        name: id.into(),
        pod_sandbox_id: "sb".into(),
        state: ContainerState::Running,
        resources: ResourcesView {
            cpu_shares: Some(if cores > 0 { cores as u64 * 1024 } else { 102 }),
            cpu_quota: (cores > 0).then_some(cores * 100_000),
            cpu_period: Some(100_000),
            memory_limit: (cores > 0).then_some(1 << 30),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn create(e: &mut Engine<Allocator>, id: &str, cores: i64) -> String {
    e.create_container(&pod(), &ctr(id, cores))
        .expect("admitted")
        .expect("adjusted")
        .adjustment
        .cpuset_cpus
        .to_string()
}

fn metric(m: &Metrics, series: &str) -> Option<String> {
    m.encode()
        .lines()
        .find(|l| l.starts_with(series))
        .map(|l| l.rsplit(' ').next().unwrap_or_default().to_string())
}

fn update_of(ups: &[CpusetUpdate], id: &str) -> Option<String> {
    ups.iter()
        .find(|u| u.container_id == id)
        .map(|u| u.cpus.to_string())
}

#[test]
fn an_offline_cpu_leaves_the_pool_and_its_holder_keeps_the_rest() {
    let t = tempfile::tempdir().expect("tmp");
    let (mut e, m) = engine(t.path(), false);
    assert!(e.poll_hotplug().is_empty(), "nothing changed");
    assert_eq!(create(&mut e, "x", 2), "0-1");
    assert_eq!(create(&mut e, "s", 0), "2-7");

    // CPU 1 (held by x) and CPU 5 (in the pool) go offline.
    set_online(t.path(), "0,2-4,6-7", "0-1");
    let ups = e.poll_hotplug();
    assert_eq!(update_of(&ups, "s").as_deref(), Some("2-4,6-7"));
    assert_eq!(update_of(&ups, "x"), None, "no silent replacement");
    let x = &e.records().containers["x"];
    assert_eq!(x.assignment.cpus.to_string(), "0-1", "keeps its CPUs");
    assert_eq!(e.placer().ledger().cpu_holder(1), Some("x"));
    assert_eq!(
        metric(&m, "nri_align_held_cpus_offline").as_deref(),
        Some("1")
    );
    assert_eq!(
        metric(&m, "nri_align_topology_changes_total").as_deref(),
        Some("1")
    );
    // A new container is never given an offline CPU.
    assert_eq!(create(&mut e, "y", 2), "2-3");
    assert_eq!(create(&mut e, "s2", 0), "4,6-7");

    // Both come back: 5 to the pool, 1 to its holder.
    set_online(t.path(), "0-7", "0-1");
    let ups = e.poll_hotplug();
    assert_eq!(update_of(&ups, "s").as_deref(), Some("4-7"));
    // Its holder is told its CPUs again (cgroup v1 dropped CPU 1 from its cpuset).
    assert_eq!(update_of(&ups, "x").as_deref(), Some("0-1"));
    assert_eq!(update_of(&ups, "y"), None, "lost nothing");
    assert_eq!(e.placer().ledger().cpu_holder(1), Some("x"));
    assert_eq!(e.placer().shared_pool().to_string(), "4-7");
    assert_eq!(
        metric(&m, "nri_align_held_cpus_offline").as_deref(),
        Some("0")
    );
}

#[test]
fn with_replace_offlined_cpus_a_free_cpu_of_its_node_replaces_the_offline_one() {
    let t = tempfile::tempdir().expect("tmp");
    let (mut e, m) = engine(t.path(), true);
    assert_eq!(create(&mut e, "x", 2), "0-1");
    create(&mut e, "s", 0);
    set_online(t.path(), "0,2-7", "0-1");
    let ups = e.poll_hotplug();
    assert_eq!(update_of(&ups, "x").as_deref(), Some("0,2"));
    assert_eq!(update_of(&ups, "s").as_deref(), Some("3-7"));
    assert_eq!(
        e.records().containers["x"].assignment.cpus.to_string(),
        "0,2"
    );
    assert_eq!(e.records().containers["x"].applied_cpus.to_string(), "0,2");
    assert_eq!(
        metric(&m, "nri_align_offlined_cpus_replaced_total").as_deref(),
        Some("1")
    );
    // Back online, the CPU is free again: the pool's.
    set_online(t.path(), "0-7", "0-1");
    e.poll_hotplug();
    assert_eq!(e.placer().shared_pool().to_string(), "1,3-7");
}

#[test]
fn failed_reads_keep_the_topology_and_are_counted() {
    let t = tempfile::tempdir().expect("tmp");
    let (mut e, m) = engine(t.path(), false);
    assert_eq!(create(&mut e, "x", 2), "0-1");
    create(&mut e, "s", 0);
    let before = e.placer().shared_pool();
    let online = t.path().join("sys/devices/system/cpu/online");
    // Half-written, empty, then gone altogether.
    for (text, kind) in [("0-", "malformed"), ("0-3,", "malformed"), ("", "empty")] {
        std::fs::write(&online, text).expect("write");
        assert!(e.poll_hotplug().is_empty(), "{text:?}");
        assert_eq!(e.placer().shared_pool(), before, "{kind}");
    }
    std::fs::remove_file(&online).expect("rm");
    assert!(e.poll_hotplug().is_empty());
    std::fs::remove_file(t.path().join("sys/devices/system/node/has_memory")).expect("rm");
    assert!(e.poll_hotplug().is_empty());
    assert_eq!(e.placer().shared_pool(), before);
    assert_eq!(e.placer().ledger().cpu_holder(0), Some("x"));
    let text = m.encode();
    assert!(
        text.contains("nri_align_topology_read_failures_total{kind=\"malformed\"} 2"),
        "{text}"
    );
    assert!(text.contains("nri_align_topology_read_failures_total{kind=\"empty\"} 1"));
    assert!(text.contains("nri_align_topology_read_failures_total{kind=\"missing\"} 2"));
    // The files back: followed again.
    set_online(t.path(), "0-6", "0-1");
    assert_eq!(update_of(&e.poll_hotplug(), "s").as_deref(), Some("2-6"));
}

#[test]
fn memory_node_leaving_takes_no_new_memory_and_coming_back_does() {
    let t = tempfile::tempdir().expect("tmp");
    let (mut e, _) = engine(t.path(), false);
    set_online(t.path(), "0-7", "0");
    e.poll_hotplug();
    let free = e.placer().free_by_node();
    assert_eq!(free[1].memory_bytes, 0);
    assert!(free[0].memory_bytes > 0);
    set_online(t.path(), "0-7", "0-1");
    e.poll_hotplug();
    assert!(e.placer().free_by_node()[1].memory_bytes > 0);
}

#[test]
fn a_reload_is_checked_against_the_cpus_online_now() {
    let t = tempfile::tempdir().expect("tmp");
    let (mut e, _) = engine(t.path(), false);
    assert_eq!(create(&mut e, "x", 2), "0-1");
    set_online(t.path(), "0-3", "0-1");
    e.poll_hotplug();
    let mut config = e.config().clone();
    config.placement.reserved_cpus = "2-3".parse().expect("set");
    let err = e.reload(config).expect_err("no shared CPU would be left");
    assert!(err.to_string().contains("leaves no shared CPU"), "{err}");
}

#[test]
fn a_cpu_held_while_offline_at_start_is_reported_at_the_first_read() {
    let t = tempfile::tempdir().expect("tmp");
    let (mut e, m) = engine(t.path(), false);
    assert_eq!(create(&mut e, "x", 2), "0-1");
    // As a restart finds it: the topology read without CPU 1, the record restored whole.
    let held = e.records().containers["x"].assignment.clone();
    let mut topo = TopologyBuilder::new().sockets(2).cores(4).build();
    topo.cpus.retain(|c| c.id != 1);
    topo.numa_nodes[0].cpus.remove(1);
    topo.offline_cpus.insert(1);
    let mut alloc = Allocator::new(Arc::new(topo), e.config().placement.clone());
    alloc
        .restore(held)
        .expect("a present, offline CPU is restored");
    assert_eq!(alloc.ledger().cpu_holder(1), Some("x"));
    let mut e2 = Engine::new(
        alloc,
        e.config().clone(),
        None,
        Some(m.clone()),
        Box::new(AllDevices),
    );
    e2.doc = e.doc.clone();
    set_online(t.path(), "0,2-7", "0-1");
    e2.watch_hotplug(t.path());
    assert!(e2.poll_hotplug().is_empty(), "nothing changed since start");
    assert_eq!(
        metric(&m, "nri_align_held_cpus_offline").as_deref(),
        Some("1")
    );
}

/// Hands each state the engine reports to the NodeResourceTopology builder, as the daemon's
/// publisher does, and keeps the last object.
struct Nrt(
    Arc<Topology>,
    Arc<std::sync::Mutex<Option<crate::nrt::NodeResourceTopology>>>,
);

impl super::super::StateObserver for Nrt {
    fn state_changed(
        &self,
        free: &[crate::placement::NodeFree],
        _: Option<&Arc<[crate::nrt::fingerprint::PodId]>>,
    ) {
        let free: Vec<crate::nrt::ZoneFree> = free.iter().map(Into::into).collect();
        let settings = crate::nrt::builder::NrtSettings {
            node_name: "n".into(),
            ..Default::default()
        };
        let obj = crate::nrt::build(&self.0, &free, None, &settings).expect("object");
        *self.1.lock().expect("lock") = Some(obj);
    }
    fn config_changed(&self, _: &Config) {}
}

/// `(capacity, allocatable, available)` of `resource` in zone `node-N` of the last object.
fn published(
    last: &std::sync::Mutex<Option<crate::nrt::NodeResourceTopology>>,
    node: u32,
    resource: &str,
) -> (String, String, String) {
    let obj = last.lock().expect("lock");
    let r = obj
        .as_ref()
        .and_then(|o| o.zone(&format!("node-{node}")))
        .and_then(|z| z.resource(resource))
        .unwrap_or_else(|| panic!("no {resource} in node-{node}: {obj:?}"));
    (
        r.capacity.clone(),
        r.allocatable.clone(),
        r.available.clone(),
    )
}

#[test]
fn node_resource_topology_follows_cpus_and_memory_going_and_coming_back() {
    let t = tempfile::tempdir().expect("tmp");
    let (mut e, _) = engine(t.path(), false);
    let topo = Arc::new(e.placer().topology().clone());
    let last = Arc::new(std::sync::Mutex::new(None));
    e.set_observer(Box::new(Nrt(topo.clone(), last.clone())));
    let node1_mem = crate::nrt::quantity::bytes(topo.numa_nodes[1].memory_bytes);
    let triple = |c: &str, a: &str, v: &str| (c.to_string(), a.to_string(), v.to_string());
    assert_eq!(published(&last, 1, "cpu"), triple("4", "4", "4"));
    assert_eq!(create(&mut e, "x", 2), "0-1");
    assert_eq!(published(&last, 0, "cpu"), triple("4", "4", "2"));

    // CPU 1 (held by x) and CPU 5 (free) unplugged, node 1's memory gone: each zone has three
    // CPUs, node 1 no memory, and x's CPU 0 is still not available.
    set_online(t.path(), "0,2-4,6-7", "0");
    e.poll_hotplug();
    assert_eq!(published(&last, 0, "cpu"), triple("3", "3", "2"));
    assert_eq!(published(&last, 1, "cpu"), triple("3", "3", "3"));
    assert_eq!(published(&last, 1, "memory"), triple("0", "0", "0"));
    assert_ne!(published(&last, 0, "memory").0, "0");

    // All back: the zones are whole again.
    set_online(t.path(), "0-7", "0-1");
    e.poll_hotplug();
    assert_eq!(published(&last, 0, "cpu"), triple("4", "4", "2"));
    assert_eq!(published(&last, 1, "cpu"), triple("4", "4", "4"));
    assert_eq!(
        published(&last, 1, "memory"),
        triple(&node1_mem, &node1_mem, &node1_mem)
    );
}

#[test]
fn a_shared_container_is_refused_while_only_exclusive_cpus_are_online() {
    let t = tempfile::tempdir().expect("tmp");
    let (mut e, m) = engine(t.path(), false);
    assert_eq!(create(&mut e, "x", 3), "0-2");
    assert_eq!(create(&mut e, "y", 3), "4-6");
    assert_eq!(e.placer().shared_pool().to_string(), "3,7");
    // The pool's CPUs go offline: only exclusively held CPUs are online.
    set_online(t.path(), "0-2,4-6", "0-1");
    e.poll_hotplug();
    assert!(e.placer().shared_pool().is_empty());
    let err = e
        .create_container(&pod(), &ctr("s", 0))
        .expect_err("no CPU to share: refused, never created without a cpuset");
    let msg = err.to_string();
    assert!(
        msg.contains("no shared cpu") && msg.contains("0-2,4-6"),
        "{msg}"
    );
    assert!(!e.records().containers.contains_key("s"));
    assert!(
        m.encode()
            .contains("nri_align_rejections_total{reason=\"no-shared-cpu\"} 1"),
        "{}",
        m.encode()
    );
    // A CPU back online: the next try (the kubelet retries) gets it.
    set_online(t.path(), "0-2,4-7", "0-1");
    e.poll_hotplug();
    assert_eq!(create(&mut e, "s", 0), "7");
}

#[test]
fn cpus_outside_the_containers_cpuset_are_no_hot_plug_and_never_given() {
    let t = tempfile::tempdir().expect("tmp");
    let mut topo = TopologyBuilder::new().sockets(2).cores(4).build();
    topo.outside_cpuset = "6-7".parse().expect("set");
    let config = Config::default();
    let metrics = Arc::new(Metrics::new());
    let alloc = Allocator::new(Arc::new(topo), config.placement.clone());
    let mut e = Engine::new(
        alloc,
        config,
        None,
        Some(metrics.clone()),
        Box::new(AllDevices),
    );
    // Every CPU is online: the ones outside the cpuset are no change, and stay out.
    set_online(t.path(), "0-7", "0-1");
    e.watch_hotplug(t.path());
    assert!(e.poll_hotplug().is_empty());
    assert_eq!(
        metric(&metrics, "nri_align_topology_changes_total").as_deref(),
        Some("0")
    );
    assert_eq!(create(&mut e, "s", 0), "0-5");
    assert_eq!(create(&mut e, "x", 2), "4-5");
    assert_eq!(e.placer().shared_pool().to_string(), "0-3");
}
