//! The builder on shipped host descriptions: names, types, costs, every resource's three
//! amounts, attributes, and the errors a caller can cause.

use std::sync::Arc;

use super::*;
use crate::nrt::quantity;
use crate::placement::{Allocator, PlacementConfig, PodInfo, Request};
use crate::topology::desc::HostDesc;

fn host(name: &str) -> Topology {
    HostDesc::load(name).expect("shipped host").to_topology()
}

/// Everything free: what the ledger reports before any allocation.
fn all_free(topo: &Topology, reserved: &CpuSet) -> Vec<ZoneFree> {
    topo.numa_nodes
        .iter()
        .map(|n| ZoneFree {
            node: n.id,
            cpus: n.cpus.difference(reserved).len() as u64,
            memory_bytes: n.memory_bytes,
            gpus: topo
                .gpus
                .iter()
                .filter(|g| g.numa_node == Some(n.id))
                .map(|g| g.pci_bus_id.clone())
                .collect(),
            nics: topo
                .nics
                .iter()
                .filter(|x| x.numa_node == Some(n.id))
                .map(|x| x.name.clone())
                .collect(),
            ..Default::default()
        })
        .collect()
}

fn settings(reserved: &str) -> NrtSettings {
    NrtSettings {
        node_name: "worker-1".into(),
        policy: Policy::SingleNumaNode,
        scope: Scope::Pod,
        reserved_cpus: CpuSet::parse_list(reserved).expect("cpu list"),
        resources: ResourceNames {
            gpu: Some("nvidia.com/gpu".into()),
            rdma_nic: Some("intel.com/sriov_rdma".into()),
        },
        owner: None,
        take_over_foreign: false,
    }
}

fn amounts(obj: &NodeResourceTopology, zone: &str, res: &str) -> Option<(String, String, String)> {
    let r = obj.zone(zone)?.resource(res)?;
    Some((
        r.capacity.clone(),
        r.allocatable.clone(),
        r.available.clone(),
    ))
}

fn triple(c: &str, a: &str, v: &str) -> Option<(String, String, String)> {
    Some((c.into(), a.into(), v.into()))
}

#[test]
fn vm_2s4n_idle_object_has_a_node_zone_per_numa_node_with_its_resources_and_costs() {
    let topo = host("vm-2s4n");
    let s = settings("0");
    let obj = build(&topo, &all_free(&topo, &s.reserved_cpus), None, &s).expect("builds");

    assert_eq!(obj.api_version, "topology.node.k8s.io/v1alpha2");
    assert_eq!(obj.kind, "NodeResourceTopology");
    assert_eq!(obj.metadata.name.as_deref(), Some("worker-1"));
    let names: Vec<_> = obj.zones.iter().map(|z| z.name.as_str()).collect();
    assert_eq!(names, ["node-0", "node-1", "node-2", "node-3", "node-4"]);
    assert!(obj
        .zones
        .iter()
        .all(|z| z.zone_type == "Node" && z.parent.is_empty()));

    // CPU 0 is reserved: node 0 has 2 CPUs, 1 allocatable, 1 available.
    assert_eq!(amounts(&obj, "node-0", "cpu"), triple("2", "1", "1"));
    assert_eq!(amounts(&obj, "node-1", "cpu"), triple("2", "2", "2"));
    assert_eq!(
        amounts(&obj, "node-0", "memory"),
        triple("512Mi", "512Mi", "512Mi")
    );
    assert_eq!(
        amounts(&obj, "node-3", "nvidia.com/gpu"),
        triple("1", "1", "1")
    );
    assert_eq!(
        amounts(&obj, "node-2", "intel.com/sriov_rdma"),
        triple("1", "1", "1")
    );
    // The memory-only node: memory, and an explicit zero CPU count, no devices.
    assert_eq!(amounts(&obj, "node-4", "cpu"), triple("0", "0", "0"));
    assert_eq!(
        amounts(&obj, "node-4", "memory"),
        triple("256Mi", "256Mi", "256Mi")
    );
    assert_eq!(obj.zone("node-4").map(|z| z.resources.len()), Some(2));
    // Resources in a fixed order.
    let order: Vec<_> = obj.zones[0]
        .resources
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(
        order,
        ["cpu", "memory", "nvidia.com/gpu", "intel.com/sriov_rdma"]
    );

    // Costs: the distance matrix row, every zone including itself.
    let costs: Vec<_> = obj.zones[1]
        .costs
        .iter()
        .map(|c| (c.name.as_str(), c.value))
        .collect();
    assert_eq!(
        costs,
        [
            ("node-0", 12),
            ("node-1", 10),
            ("node-2", 21),
            ("node-3", 21),
            ("node-4", 22)
        ]
    );

    assert_eq!(
        obj.attribute("topologyManagerPolicy"),
        Some("single-numa-node")
    );
    assert_eq!(obj.attribute("topologyManagerScope"), Some("pod"));
    assert_eq!(obj.attribute("topologyManagerMaxNUMANodes"), Some("5"));
    assert_eq!(obj.attribute("nodeTopologyPodsFingerprint"), None);
    assert_eq!(obj.topology_policies, ["SingleNUMANodePodLevel"]);
    assert_eq!(
        obj.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/managed-by"))
            .map(String::as_str),
        Some("nri-align")
    );
}

#[test]
fn available_follows_the_allocator_after_placements() {
    let topo = Arc::new(host("vm-2s4n"));
    let s = settings("");
    let mut alloc = Allocator::new(
        Arc::clone(&topo),
        PlacementConfig {
            policy: Policy::SingleNumaNode,
            ..Default::default()
        },
    );
    let gpu = topo.gpus[2].pci_bus_id.clone();
    let req = Request {
        container_id: "c1".into(),
        container_name: "cuda".into(),
        pod: PodInfo {
            uid: "u1".into(),
            namespace: "ml".into(),
            name: "train".into(),
            ..Default::default()
        },
        cpu_request_milli: 2000,
        cpu_limit_milli: Some(2000),
        memory_limit_bytes: Some(128 << 20),
        allocated_gpus: vec![gpu],
        allocated_nics: vec![],
        shared_gpus: vec![],
        generic_devices: vec![],
        scheduler: None,
        hugepages: vec![],
    };
    let placed = alloc.place(&req).expect("fits node 2");
    let node = placed.numa_nodes.first().expect("one node");
    let free: Vec<ZoneFree> = alloc.free_by_node().iter().map(ZoneFree::from).collect();
    let obj = build(&topo, &free, None, &s).expect("builds");
    let zone = zone_name(node);
    assert_eq!(amounts(&obj, &zone, "cpu"), triple("2", "2", "0"));
    assert_eq!(
        amounts(&obj, &zone, "memory"),
        triple("512Mi", "512Mi", "384Mi")
    );
    assert_eq!(
        amounts(&obj, &zone, "nvidia.com/gpu"),
        triple("1", "1", "0")
    );
    // The other nodes are untouched.
    let others = obj
        .zones
        .iter()
        .filter(|z| z.name != zone && z.name != "node-4");
    for z in others {
        assert_eq!(z.resource("cpu").map(|r| r.available.as_str()), Some("2"));
    }
}

#[test]
fn hugepage_availability_drops_with_each_admission_asking_pages() {
    // dgx-h100: 1024 pages of 2 MiB on each node.
    let topo = Arc::new(host("dgx-h100"));
    let s = NrtSettings {
        node_name: "dgx".into(),
        ..Default::default()
    };
    let mut alloc = Allocator::new(
        Arc::clone(&topo),
        PlacementConfig {
            policy: Policy::SingleNumaNode,
            ..Default::default()
        },
    );
    let req = Request {
        container_id: "c1".into(),
        container_name: "dpdk".into(),
        pod: PodInfo {
            uid: "u1".into(),
            namespace: "net".into(),
            name: "dpdk".into(),
            ..Default::default()
        },
        cpu_request_milli: 2000,
        cpu_limit_milli: Some(2000),
        memory_limit_bytes: Some(1 << 30),
        hugepages: vec![crate::placement::HugePageNeed {
            size_kb: 2048,
            pages: 300,
        }],
        ..Default::default()
    };
    let placed = alloc.place(&req).expect("fits a node");
    let node = placed.numa_nodes.first().expect("one node");
    let free: Vec<ZoneFree> = alloc.free_by_node().iter().map(ZoneFree::from).collect();
    let obj = build(&topo, &free, None, &s).expect("builds");
    // 1024 - 300 = 724 pages of 2 MiB left on the container's node.
    assert_eq!(
        amounts(&obj, &zone_name(node), "hugepages-2Mi"),
        triple("2Gi", "2Gi", "1448Mi")
    );
    let other = obj
        .zones
        .iter()
        .find(|z| z.name != zone_name(node))
        .expect("another zone");
    assert_eq!(
        other
            .resource("hugepages-2Mi")
            .map(|r| r.available.as_str()),
        Some("2Gi")
    );
}

#[test]
fn hugepages_appear_per_size_with_pages_in_bytes_and_free_from_the_caller() {
    let topo = host("dgx-h100");
    let s = NrtSettings {
        node_name: "dgx".into(),
        ..Default::default()
    };
    let mut free = all_free(&topo, &CpuSet::new());
    free[0].hugepages_free = vec![(2048, 1000)];
    let obj = build(&topo, &free, None, &s).expect("builds");
    // 1024 pages of 2 MiB = 2 GiB; node 0 has 1000 free per the caller, node 1 as discovered.
    assert_eq!(
        amounts(&obj, "node-0", "hugepages-2Mi"),
        triple("2Gi", "2Gi", "2000Mi")
    );
    assert_eq!(
        amounts(&obj, "node-1", "hugepages-2Mi"),
        triple("2Gi", "2Gi", "2Gi")
    );
    // No 1 GiB pages configured: not listed.
    assert!(obj.zones[0].resource("hugepages-1Gi").is_none());
    // Defaults: GPUs under nvidia.com/gpu, NICs not published.
    assert!(obj
        .zones
        .iter()
        .any(|z| z.resource("nvidia.com/gpu").is_some()));
    assert!(obj
        .zones
        .iter()
        .all(|z| z.resources.iter().all(|r| !r.name.starts_with("intel.com"))));
    assert_eq!(obj.attribute("topologyManagerPolicy"), Some("best-effort"));
    assert_eq!(obj.topology_policies, ["BestEffortContainerLevel"]);
}

#[test]
fn available_never_exceeds_allocatable_and_quantities_parse_back() {
    let topo = host("vm-2s4n");
    let s = settings("0-1");
    let mut free = all_free(&topo, &CpuSet::new());
    free[0].cpus = 2; // a stale caller claiming the reserved CPUs are free
    free[1].memory_bytes = u64::MAX;
    let obj = build(&topo, &free, None, &s).expect("builds");
    assert_eq!(amounts(&obj, "node-0", "cpu"), triple("2", "0", "0"));
    assert_eq!(
        amounts(&obj, "node-1", "memory"),
        triple("512Mi", "512Mi", "512Mi")
    );
    for r in obj.zones.iter().flat_map(|z| &z.resources) {
        let (c, a, v) = (
            quantity::parse(&r.capacity),
            quantity::parse(&r.allocatable),
            quantity::parse(&r.available),
        );
        assert!(c >= a && a >= v && v >= Some(0), "{r:?}");
    }
}

#[test]
fn pods_add_the_fingerprint_attributes_the_scheduler_cache_checks() {
    let topo = host("vm-2s4n");
    let s = settings("");
    let pods = [PodId::new("ml", "train"), PodId::new("default", "web")];
    let obj = build(&topo, &all_free(&topo, &CpuSet::new()), Some(&pods), &s).expect("builds");
    assert_eq!(
        obj.attribute("nodeTopologyPodsFingerprint"),
        Some(fingerprint::sign(&pods).as_str())
    );
    assert_eq!(
        obj.attribute("nodeTopologyPodsFingerprintMethod"),
        Some("all")
    );
}

#[test]
fn the_same_input_builds_the_same_object() {
    let topo = host("dgx1-v100");
    let s = settings("");
    let free = all_free(&topo, &CpuSet::new());
    let a = build(&topo, &free, None, &s).expect("builds");
    let b = build(&topo, &free, None, &s).expect("builds");
    assert_eq!(a, b);
    assert!(a.content_matches(&b));
    assert_eq!(
        serde_json::to_string(&a).expect("json"),
        serde_json::to_string(&b).expect("json")
    );
}

#[test]
fn content_matches_ignores_server_metadata_but_not_zones_or_our_labels() {
    let topo = host("vm-2s4n");
    let s = settings("");
    let desired = build(&topo, &all_free(&topo, &CpuSet::new()), None, &s).expect("builds");
    let mut on_server = desired.clone();
    on_server.metadata.resource_version = Some("42".into());
    on_server.metadata.uid = Some("abc".into());
    if let Some(l) = on_server.metadata.labels.as_mut() {
        l.insert("someone.else/label".into(), "x".into());
    }
    assert!(on_server.content_matches(&desired));
    let mut edited = on_server.clone();
    edited.zones[0].resources[0].available = "7".into();
    assert!(!edited.content_matches(&desired));
    let mut relabelled = on_server;
    relabelled.metadata.labels = None;
    assert!(!relabelled.content_matches(&desired));
}

#[test]
fn caller_errors_are_precise() {
    let topo = host("vm-2s4n");
    let free = all_free(&topo, &CpuSet::new());
    let mut s = settings("");
    s.node_name = "Worker_1".into();
    assert_eq!(
        build(&topo, &free, None, &s),
        Err(BuildError::NodeName("Worker_1".into()))
    );
    let mut s = settings("");
    s.resources.gpu = Some("gpu".into());
    assert_eq!(
        build(&topo, &free, None, &s),
        Err(BuildError::ResourceName("gpu".into()))
    );
    let s = settings("");
    let mut extra = free.clone();
    extra.push(ZoneFree {
        node: 9,
        ..Default::default()
    });
    assert_eq!(
        build(&topo, &extra, None, &s),
        Err(BuildError::UnknownNode(9))
    );
    assert_eq!(
        build(&topo, &free[..4], None, &s),
        Err(BuildError::MissingNode(4))
    );
}

#[test]
fn names_and_policies_follow_kubernetes_rules() {
    for ok in ["worker-1", "a", "node.example.com", "10.0.0.1"] {
        assert!(is_dns_subdomain(ok), "{ok}");
    }
    for bad in ["", "-a", "a-", "A", "a_b", "a..b", &"x".repeat(254)] {
        assert!(!is_dns_subdomain(bad), "{bad}");
    }
    for ok in [
        "nvidia.com/gpu",
        "intel.com/sriov_rdma",
        "rdma/hca_shared_devices_a",
        "amd.com/gpu",
    ] {
        assert!(is_extended_resource_name(ok), "{ok}");
    }
    for bad in [
        "gpu",
        "/gpu",
        "nvidia.com/",
        "nvidia.com/-gpu",
        "Nvidia.com/gpu",
        "a/b/c",
    ] {
        assert!(!is_extended_resource_name(bad), "{bad}");
    }
    assert_eq!(legacy_policy(Policy::None, Scope::Pod), "None");
    assert_eq!(
        legacy_policy(Policy::Restricted, Scope::Container),
        "RestrictedContainerLevel"
    );
    // The attribute values are the kubelet's configuration names.
    assert_eq!(Policy::SingleNumaNode.to_string(), "single-numa-node");
    assert_eq!(Policy::BestEffort.to_string(), "best-effort");
    assert_eq!(Scope::Container.to_string(), "container");
}

#[test]
fn offline_cpus_and_memory_leave_capacity_and_allocatable() {
    // vm-2s4n: node 0 has CPUs 0-1, node 4 is memory only; CPU 0 reserved.
    let topo = host("vm-2s4n");
    let s = settings("0");
    let mut free = all_free(&topo, &s.reserved_cpus);
    let idle = build(&topo, &free, None, &s).expect("builds");
    assert_eq!(amounts(&idle, "node-0", "cpu"), triple("2", "1", "1"));
    // CPU 1 unplugged (it is no longer free either), node 4's memory offline.
    free[0].offline_cpus = CpuSet::parse_list("1").expect("list");
    free[0].cpus = 0;
    free[4].memory_offline = true;
    free[4].memory_bytes = 0;
    let obj = build(&topo, &free, None, &s).expect("builds");
    assert_eq!(amounts(&obj, "node-0", "cpu"), triple("1", "0", "0"));
    assert_eq!(amounts(&obj, "node-4", "memory"), triple("0", "0", "0"));
    // The reserved CPU offline instead: allocatable keeps the other one.
    free[0].offline_cpus = CpuSet::parse_list("0").expect("list");
    free[0].cpus = 1;
    let obj = build(&topo, &free, None, &s).expect("builds");
    assert_eq!(amounts(&obj, "node-0", "cpu"), triple("1", "1", "1"));
    // Other zones are untouched.
    assert_eq!(
        amounts(&obj, "node-1", "cpu"),
        amounts(&idle, "node-1", "cpu")
    );
}
