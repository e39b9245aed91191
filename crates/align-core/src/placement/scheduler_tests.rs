use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::placement::policy::{PlacementConfig, Policy, SchedulerChoiceMode};
use crate::placement::request::{PodInfo, Request};
use crate::placement::{Allocator, PlacementError};
use crate::topology::testing::{shipped, two_node};

fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn read_one(key: &str, value: &str) -> Result<Option<SchedulerChoice>, PlacementError> {
    read(&ann(&[(key, value)]))
}

fn refusal(key: &str, value: &str) -> String {
    let err = read_one(key, value).expect_err("malformed");
    assert!(
        matches!(&err, PlacementError::InvalidAnnotation { key: k, .. } if k == key),
        "{err:?}"
    );
    err.to_string()
}

// The JSON shapes below are those the upstream types marshal to: `ResourceStatus` of
// koordinator `apis/extension/numa_aware.go`, `DeviceAllocations` of `device_share.go`, and
// gocrane/api `topology/v1alpha1` `ZoneList`.
const KOORD_STATUS: &str = r#"{"cpuset":"0-3,32-35","numaNodeResources":[{"node":0,"resources":{"cpu":"8","memory":"8Gi"}}]}"#;
const KOORD_DEVICES: &str = r#"{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"80Gi","koordinator.sh/gpu-memory-ratio":"100"}},{"minor":1,"resources":{"koordinator.sh/gpu-core":100}}],"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:09:00.0","extension":{"vfs":[{"minor":2,"busID":"0000:09:00.2"}]}}],"fpga":[{"minor":0,"resources":null}]}"#;
const CRANE_RESULT: &str = r#"[{"name":"node1","type":"Node","resources":{"capacity":{"cpu":"4","memory":"8Gi"}}},{"name":"socket0","type":"Socket"}]"#;

#[test]
fn koordinator_shapes_from_its_sources_are_read() {
    let c = read(&ann(&[
        (KOORD_RESOURCE_STATUS, KOORD_STATUS),
        (KOORD_DEVICE_ALLOCATED, KOORD_DEVICES),
        ("other.example.com/x", "{"),
    ]))
    .expect("valid")
    .expect("a choice");
    assert_eq!(c.scheduler, Scheduler::Koordinator);
    assert_eq!(
        c.cpus.as_ref().map(|s| s.to_string()).as_deref(),
        Some("0-3,32-35")
    );
    assert_eq!(c.nodes.to_string(), "0");
    assert_eq!(c.gpu_minors, vec![0, 1]);
    assert_eq!(c.rdma, vec!["0000:09:00.0"]);
    assert_eq!(c.vfs, vec!["0000:09:00.2"]);
    assert_eq!(
        c.describe(),
        "cpus 0-3,32-35, NUMA node 0, GPU minor 0,1, RDMA 0000:09:00.0"
    );
    // Only the nodes (an LS pod), and an older release's cpuSharedPools beside them.
    let c = read_one(
        KOORD_RESOURCE_STATUS,
        r#"{"numaNodeResources":[{"node":1},{"node":0,"resources":{"memory":"4Gi"}}],"cpuSharedPools":[{"socket":0,"node":0,"cpuset":"0-7"}]}"#,
    )
    .expect("valid")
    .expect("a choice");
    assert!(c.cpus.is_none());
    assert_eq!(c.nodes.to_string(), "0-1");
    // A GPU given in part is shared, not held.
    let c = read_one(
        KOORD_DEVICE_ALLOCATED,
        r#"{"gpu":[{"minor":3,"resources":{"koordinator.sh/gpu-core":50,"koordinator.sh/gpu-memory-ratio":50}}]}"#,
    )
    .expect("valid")
    .expect("a choice");
    assert_eq!(
        (c.gpu_minors.len(), c.shared_gpu_minors.clone()),
        (0, vec![3])
    );
    // Nothing chosen is no choice; no annotation is none either.
    assert_eq!(read_one(KOORD_RESOURCE_STATUS, "{}").expect("valid"), None);
    assert_eq!(
        read(&ann(&[("a.example.com/b", "c")])).expect("valid"),
        None
    );
}

#[test]
fn malformed_koordinator_values_name_the_key_and_the_fault() {
    let s = KOORD_RESOURCE_STATUS;
    let d = KOORD_DEVICE_ALLOCATED;
    for (key, value, says) in [
        (s, "not json", "not valid JSON"),
        (s, r#"{"cpuset":"0-x"}"#, "cpuset"),
        (s, r#"{"cpuset":3}"#, "not valid JSON"),
        (s, r#"{"numaNodeResources":[{"node":-1}]}"#, "NUMA node -1"),
        (
            s,
            r#"{"numaNodeResources":[{"node":"0"}]}"#,
            "not valid JSON",
        ),
        (
            s,
            r#"{"numaNodeResources":[{"node":0},{"node":0}]}"#,
            "listed twice",
        ),
        (d, r#"{"gpu":[{"minor":-1}]}"#, "GPU minor -1"),
        (
            d,
            r#"{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"lots"}}]}"#,
            "gpu-core",
        ),
        (
            d,
            r#"{"rdma":[{"minor":0,"id":"mlx5_0"}]}"#,
            "not a PCI address",
        ),
        (
            d,
            r#"{"rdma":[{"minor":0,"id":"0000:09:00.0","extension":{"vfs":[{"busID":"09:00.2"}]}}]}"#,
            "busID",
        ),
        (d, r#"["gpu"]"#, "not valid JSON"),
    ] {
        let msg = refusal(key, value);
        assert!(msg.contains(says), "{value}: {msg}");
        assert!(
            msg.starts_with(&format!("invalid annotation {key}=")),
            "{msg}"
        );
    }
}

#[test]
fn oversized_values_are_refused_without_being_echoed() {
    let big = format!(r#"{{"cpuset":"0","pad":"{}"}}"#, "x".repeat(1 << 20));
    let msg = refusal(KOORD_RESOURCE_STATUS, &big);
    assert!(msg.len() < 600, "{} bytes", msg.len());
    assert!(
        msg.contains(&format!("the value is {} bytes", big.len())),
        "{msg}"
    );
    // Many entries within the byte limit are refused by count.
    let nodes: Vec<String> = (0..300)
        .map(|n| format!(r#"{{"node":{}}}"#, n % 1000))
        .collect();
    let many = format!(r#"{{"numaNodeResources":[{}]}}"#, nodes.join(","));
    assert!(refusal(KOORD_RESOURCE_STATUS, &many).contains("at most 256"));
    // A serde message that repeats a long bad value is cut.
    let long = format!(r#"{{"cpuset":"{}"}}"#, "9".repeat(20_000));
    assert!(refusal(KOORD_RESOURCE_STATUS, &long).len() < 1200);
}

#[test]
fn crane_shapes_from_its_sources_are_read() {
    let c = read(&ann(&[
        (CRANE_TOPOLOGY_RESULT, CRANE_RESULT),
        (CRANE_TOPOLOGY_AWARENESS, "true"),
        (CRANE_CPU_POLICY, "exclusive"),
        (CRANE_EXCLUDE_RESERVED, "true"),
    ]))
    .expect("valid")
    .expect("a choice");
    assert_eq!(c.scheduler, Scheduler::Crane);
    assert_eq!(c.nodes.to_string(), "1");
    assert_eq!(c.cpu_policy, Some(CranePolicy::Exclusive));
    // Awareness off: a result left on the pod binds nothing; the policy still applies.
    let c = read(&ann(&[
        (CRANE_TOPOLOGY_RESULT, CRANE_RESULT),
        (CRANE_TOPOLOGY_AWARENESS, "false"),
        (CRANE_CPU_POLICY, "numa"),
    ]))
    .expect("valid")
    .expect("a choice");
    assert!(c.nodes.is_empty());
    assert_eq!(c.cpu_policy, Some(CranePolicy::Numa));
    for (key, value, says) in [
        (
            CRANE_TOPOLOGY_RESULT,
            r#"[{"name":"numa1","type":"Node"}]"#,
            "node<N>",
        ),
        (
            CRANE_TOPOLOGY_RESULT,
            r#"[{"name":"node1","type":"Die"}]"#,
            "zone type",
        ),
        (
            CRANE_TOPOLOGY_RESULT,
            r#"[{"name":"node1"}]"#,
            "not valid JSON",
        ),
        (
            CRANE_TOPOLOGY_RESULT,
            r#"[{"name":"node1","type":"Node"},{"name":"node1","type":"Node"}]"#,
            "twice",
        ),
        (
            CRANE_CPU_POLICY,
            "dedicated",
            "none exclusive numa immovable",
        ),
        (CRANE_TOPOLOGY_AWARENESS, "yes", "true or false"),
        (CRANE_EXCLUDE_RESERVED, "1", "true or false"),
    ] {
        let msg = refusal(key, value);
        assert!(msg.contains(says), "{value}: {msg}");
    }
    let both = read(&ann(&[
        (KOORD_RESOURCE_STATUS, KOORD_STATUS),
        (CRANE_TOPOLOGY_RESULT, CRANE_RESULT),
    ]))
    .expect_err("two schedulers");
    assert!(
        both.to_string().contains("one scheduler places a pod"),
        "{both}"
    );
}

// Placement: the choice is honoured by the one search, or refused with what is there.

fn req(pod: &str, container: &str, cpus: u64, gib: u64, a: &[(&str, &str)]) -> Request {
    let pod_info = PodInfo {
        uid: format!("uid-{pod}"),
        namespace: "ns".into(),
        name: pod.into(),
        annotations: ann(a),
    };
    Request {
        container_id: format!("{pod}-{container}"),
        container_name: container.into(),
        cpu_request_milli: cpus * 1000,
        cpu_limit_milli: (cpus > 0).then_some(cpus * 1000),
        memory_limit_bytes: (gib > 0).then_some(gib << 30),
        scheduler: read(&pod_info.annotations).expect("valid"),
        pod: pod_info,
        ..Request::default()
    }
}

fn koord_cpus(cpuset: &str) -> String {
    format!(r#"{{"cpuset":"{cpuset}"}}"#)
}

fn koord_nodes(nodes: &[u32]) -> String {
    let n: Vec<String> = nodes.iter().map(|n| format!(r#"{{"node":{n}}}"#)).collect();
    format!(r#"{{"numaNodeResources":[{}]}}"#, n.join(","))
}

fn allocator(config: PlacementConfig) -> Allocator {
    Allocator::new(Arc::new(two_node()), config)
}

#[test]
fn the_exact_cpuset_is_placed_with_the_memory_of_its_node() {
    let mut a = allocator(PlacementConfig::default());
    let status = koord_cpus("2-3,18-19");
    let got = a
        .place(&req("p", "c", 4, 2, &[(KOORD_RESOURCE_STATUS, &status)]))
        .expect("honoured");
    assert_eq!(got.cpus.to_string(), "2-3,18-19");
    assert!(got.exclusive);
    assert_eq!(got.mems.to_string(), "0");
    assert_eq!(
        got.scheduler_choice,
        Some(crate::placement::ChoiceOutcome {
            scheduler: Scheduler::Koordinator,
            honoured: true
        })
    );
    assert!(
        got.reason.starts_with("koordinator's choice: "),
        "{}",
        got.reason
    );
    // Left to itself the allocator would have started at CPU 0.
    let mut b = allocator(PlacementConfig::default());
    assert_ne!(
        b.place(&req("p", "c", 4, 2, &[]))
            .expect("ok")
            .cpus
            .to_string(),
        "2-3,18-19"
    );
}

#[test]
fn listed_nodes_bind_cpus_and_memory_whatever_the_node_policy() {
    let mut a = allocator(PlacementConfig {
        policy: Policy::SingleNumaNode,
        ..PlacementConfig::default()
    });
    let node1 = a.topology().numa_nodes[1].cpus.clone();
    let one = koord_nodes(&[1]);
    let x = a
        .place(&req("x", "c", 4, 4, &[(KOORD_RESOURCE_STATUS, &one)]))
        .expect("honoured");
    assert!(x.cpus.is_subset(&node1), "{}", x.cpus);
    assert_eq!(
        (x.mems.to_string(), x.numa_nodes.to_string()),
        ("1".into(), "1".into())
    );
    // A shared container of such a pod: the shared CPUs of node 1, its memory.
    let s = a
        .place(&req("s", "c", 0, 0, &[(KOORD_RESOURCE_STATUS, &one)]))
        .expect("honoured");
    assert!(
        !s.exclusive && s.cpus.is_subset(&node1) && !s.cpus.is_empty(),
        "{}",
        s.cpus
    );
    assert_eq!(s.mems.to_string(), "1");
    // Both nodes chosen under single-numa-node: the scheduler's width stands.
    let both = koord_nodes(&[0, 1]);
    let w = a
        .place(&req("w", "c", 2, 0, &[(KOORD_RESOURCE_STATUS, &both)]))
        .expect("honoured");
    assert_eq!(w.mems.to_string(), "0-1");
}

#[test]
fn taken_cpus_are_refused_naming_the_holder_and_what_is_free() {
    let mut a = allocator(PlacementConfig::default());
    let first = koord_cpus("0-3");
    a.place(&req("a", "main", 4, 0, &[(KOORD_RESOURCE_STATUS, &first)]))
        .expect("first");
    let second = koord_cpus("2-5");
    let r = req("b", "main", 4, 0, &[(KOORD_RESOURCE_STATUS, &second)]);
    let err = a.plan(&r).expect_err("conflict");
    assert_eq!(err.reason(), "scheduler-choice");
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "koordinator chose cpus 2-5 for ns/b/main, but 2 of its cpus are held (2-3); free there: \
             node 0: cpus 4-7,16-23 (12), "
        ),
        "{msg}"
    );
    assert!(
        msg.contains("; held by ns/a/main (container a-main, cpus 0-3)."),
        "{msg}"
    );
    assert!(msg.contains("scheduler_choice: preferred"), "{msg}");
    assert!(
        !msg.contains('\n') && msg.len() < 1024,
        "{} bytes",
        msg.len()
    );
    // Preferred: placed by the node's own search, and said so.
    a.set_config(PlacementConfig {
        scheduler_choice: SchedulerChoiceMode::Preferred,
        ..PlacementConfig::default()
    });
    let got = a.place(&r).expect("placed elsewhere");
    assert!(
        got.cpus.is_disjoint(&"0-3".parse().expect("set")),
        "{}",
        got.cpus
    );
    assert_eq!(got.scheduler_choice.map(|o| o.label()), Some("overridden"));
    assert!(
        got.reason.contains("koordinator's choice set aside"),
        "{}",
        got.reason
    );
}

#[test]
fn a_zone_too_small_after_a_race_is_refused_with_who_holds_it() {
    let mut a = allocator(PlacementConfig::default());
    // Fill node 1 but two CPUs (16 CPUs per node).
    let one = koord_nodes(&[1]);
    a.place(&req("big", "c", 14, 0, &[(KOORD_RESOURCE_STATUS, &one)]))
        .expect("fits");
    let err = a
        .plan(&req("late", "c", 4, 0, &[(KOORD_RESOURCE_STATUS, &one)]))
        .expect_err("too small");
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "koordinator chose NUMA node 1 for ns/late/c, but 4 exclusive CPUs are asked and 2 \
             are free there; free there: node 1: cpus "
        ),
        "{msg}"
    );
    assert!(msg.contains("; held by ns/big/c (container big-c"), "{msg}");
    // Crane's zones are checked the same way.
    let zone = r#"[{"name":"node1","type":"Node"}]"#;
    let err = a
        .plan(&req("cr", "c", 4, 0, &[(CRANE_TOPOLOGY_RESULT, zone)]))
        .expect_err("too small");
    assert!(
        err.to_string()
            .starts_with("crane chose NUMA node 1 for ns/cr/c"),
        "{err}"
    );
    // A node this host lacks.
    let err = a
        .plan(&req(
            "far",
            "c",
            1,
            0,
            &[(KOORD_RESOURCE_STATUS, &koord_nodes(&[7]))],
        ))
        .expect_err("no node 7");
    assert!(
        err.to_string()
            .contains("this host has no NUMA node 7 (it has 0-1)"),
        "{err}"
    );
}

#[test]
fn a_pods_containers_share_its_cpuset() {
    let mut a = allocator(PlacementConfig::default());
    let set = koord_cpus("4-7");
    let ann = [(KOORD_RESOURCE_STATUS, set.as_str())];
    let one = a.place(&req("p", "one", 2, 0, &ann)).expect("first");
    let two = a.place(&req("p", "two", 2, 0, &ann)).expect("second");
    assert_eq!(one.cpus.union(&two.cpus).to_string(), "4-7");
    assert!(one.cpus.is_disjoint(&two.cpus));
    let err = a
        .plan(&req("p", "three", 1, 0, &ann))
        .expect_err("none left");
    assert!(
        err.to_string()
            .contains("the pod's other containers hold cpus 4-7"),
        "{err}"
    );
}

#[test]
fn crane_policies_pick_the_cpus_in_the_zones() {
    let mut a = allocator(PlacementConfig::default());
    let node1 = a.topology().numa_nodes[1].cpus.clone();
    let zone = r#"[{"name":"node1","type":"Node"}]"#;
    let x = a
        .place(&req(
            "x",
            "c",
            2,
            0,
            &[
                (CRANE_TOPOLOGY_RESULT, zone),
                (CRANE_CPU_POLICY, "exclusive"),
            ],
        ))
        .expect("honoured");
    assert!(
        x.exclusive && x.cpus.is_subset(&node1) && x.cpus.len() == 2,
        "{}",
        x.cpus
    );
    // numa: the shared CPUs of the zone, even for a Guaranteed-shaped container.
    let n = a
        .place(&req(
            "n",
            "c",
            2,
            0,
            &[(CRANE_TOPOLOGY_RESULT, zone), (CRANE_CPU_POLICY, "numa")],
        ))
        .expect("honoured");
    assert!(!n.exclusive && n.cpus.is_subset(&node1), "{}", n.cpus);
    assert_eq!(n.mems.to_string(), "1");
    // none: the default CPUs anywhere, the zones bind nothing.
    let d = a
        .place(&req(
            "d",
            "c",
            2,
            0,
            &[(CRANE_TOPOLOGY_RESULT, zone), (CRANE_CPU_POLICY, "none")],
        ))
        .expect("placed");
    assert!(!d.exclusive && !d.cpus.is_subset(&node1), "{}", d.cpus);
}

#[test]
fn chosen_gpus_and_nics_are_held_and_their_holders_named() {
    let topo = shipped("dgx-h100");
    let minor = topo.gpus[4].minor.expect("minor");
    let bus = topo.gpus[4].pci_bus_id.clone();
    let nic = topo
        .nics
        .iter()
        .find(|n| n.pci_bus_id.as_deref() == Some("0000:9a:00.0"))
        .expect("nic")
        .name
        .clone();
    let mut a = Allocator::new(Arc::new(topo), PlacementConfig::default());
    let devices = format!(
        r#"{{"gpu":[{{"minor":{minor},"resources":{{"koordinator.sh/gpu-core":100}}}}],"rdma":[{{"minor":0,"id":"0000:9a:00.0","extension":{{"vfs":[{{"busID":"0000:9a:00.3"}}]}}}}]}}"#
    );
    let got = a
        .place(&req("g", "c", 4, 0, &[(KOORD_DEVICE_ALLOCATED, &devices)]))
        .expect("honoured");
    assert_eq!(got.gpus, vec![bus.clone()]);
    assert_eq!(got.nics, vec![nic]);
    assert!(got.chosen_gpus.contains(&bus), "{:?}", got.chosen_gpus);
    let gpu_node = a.topology().gpus[4].numa_node.expect("node");
    assert!(got.mems.contains(gpu_node), "{}", got.mems);
    let err = a
        .plan(&req("h", "c", 1, 0, &[(KOORD_DEVICE_ALLOCATED, &devices)]))
        .expect_err("held");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("but GPU minor {minor} is held")),
        "{msg}"
    );
    assert!(msg.contains("held by ns/g/c"), "{msg}");
    let err = a
        .plan(&req(
            "u",
            "c",
            1,
            0,
            &[(KOORD_DEVICE_ALLOCATED, r#"{"gpu":[{"minor":99}]}"#)],
        ))
        .expect_err("unknown");
    assert!(
        err.to_string().contains("this host has no GPU of minor 99"),
        "{err}"
    );
}

#[test]
fn the_refusal_fits_an_event_message_on_a_large_fragmented_host() {
    let topo = shipped("numa16-1024");
    let n = topo.cpus.len() as u32;
    let mut a = Allocator::new(Arc::new(topo), PlacementConfig::default());
    // Another pod holds every even CPU of the first half; the scheduler then names all of the
    // first half, every other CPU, and the longest names Kubernetes allows.
    let evens: Vec<String> = (0..n / 2).step_by(2).map(|c| c.to_string()).collect();
    let held = koord_cpus(&evens.join(","));
    let count = evens.len() as u64;
    a.place(&req(
        "holder",
        "c",
        count,
        0,
        &[(KOORD_RESOURCE_STATUS, &held)],
    ))
    .expect("placed");
    let wanted = koord_cpus(&format!("0-{}", n / 2 - 1));
    let long = "p".repeat(253);
    let mut r = req(
        &long,
        &"c".repeat(63),
        u64::from(n / 2),
        0,
        &[(KOORD_RESOURCE_STATUS, &wanted)],
    );
    r.pod.namespace = "n".repeat(63);
    let msg = a.plan(&r).expect_err("held").to_string();
    assert!(
        !msg.contains('\n') && msg.len() <= 1024,
        "{} bytes: {msg}",
        msg.len()
    );
    assert!(
        msg.contains("but 256 of its cpus are held (0,2,4,") && msg.contains("held by ns/holder/c"),
        "{msg}"
    );
    assert!(msg.ends_with("place it elsewhere on this node"), "{msg}");
}

// Trust: a pod author can write any of these annotations.

#[test]
fn only_trusted_schedulers_are_read_and_the_others_are_named() {
    let both = ann(&[
        (KOORD_DEVICE_ALLOCATED, KOORD_DEVICES),
        (CRANE_TOPOLOGY_RESULT, CRANE_RESULT),
    ]);
    assert_eq!(
        annotated_by(&both),
        vec![Scheduler::Koordinator, Scheduler::Crane]
    );
    // Nobody trusted (the default): nothing read, both named as untrusted.
    let r = read_trusted(&both, &[]).expect("nothing read");
    assert_eq!(r.choice, None);
    assert_eq!(r.untrusted, vec![Scheduler::Koordinator, Scheduler::Crane]);
    // One trusted: its choice alone, the other ignored (not "two schedulers placed it").
    let r = read_trusted(&both, &[Scheduler::Crane]).expect("crane read");
    assert_eq!(r.choice.map(|c| c.scheduler), Some(Scheduler::Crane));
    assert_eq!(r.untrusted, vec![Scheduler::Koordinator]);
    // An untrusted scheduler's malformed value refuses nothing: it is never parsed.
    let bad = ann(&[(KOORD_RESOURCE_STATUS, r#"{"cpuset":"x"}"#)]);
    assert_eq!(
        read_trusted(&bad, &[]).expect("ignored").untrusted,
        vec![Scheduler::Koordinator]
    );
    assert!(read_trusted(&bad, &[Scheduler::Koordinator]).is_err());
    assert_eq!(owner_of(CRANE_CPU_POLICY), Some(Scheduler::Crane));
    assert_eq!(owner_of("cpus.nri-align.io/pod"), None);
}

#[test]
fn a_choice_keeps_only_the_devices_the_container_was_given() {
    let topo = shipped("dgx-h100");
    let (g4, g5) = (&topo.gpus[4], &topo.gpus[5]);
    let nic = topo
        .nics
        .iter()
        .find(|n| n.pci_bus_id.as_deref() == Some("0000:9a:00.0"))
        .expect("nic")
        .name
        .clone();
    let devices = format!(
        r#"{{"gpu":[{{"minor":{}}},{{"minor":{}}}],"rdma":[{{"minor":0,"id":"0000:9a:00.0"}}]}}"#,
        g4.minor.expect("minor"),
        g5.minor.expect("minor")
    );
    let read = || {
        read(&ann(&[(KOORD_DEVICE_ALLOCATED, &devices)]))
            .expect("valid")
            .expect("a choice")
    };
    // Given nothing: every device is dropped and named, the choice constrains nothing.
    let mut c = read();
    let dropped = c.narrow_to_given(&topo, &[], &[], &[]);
    assert_eq!(dropped.len(), 3, "{dropped:?}");
    assert!(
        dropped.contains(&"RDMA 0000:9a:00.0".to_string()),
        "{dropped:?}"
    );
    assert!(c.is_empty(), "{c:?}");
    // Given GPU 4 and the NIC: the choice narrows to them; GPU 5 is dropped.
    let mut c = read();
    let dropped = c.narrow_to_given(&topo, std::slice::from_ref(&g4.pci_bus_id), &[], &[nic]);
    assert_eq!(c.gpu_minors, vec![g4.minor.expect("minor")]);
    assert_eq!(c.rdma, vec!["0000:9a:00.0"]);
    assert_eq!(
        dropped,
        vec![format!("GPU minor {}", g5.minor.expect("minor"))]
    );
    // A GPU the container uses shared may be chosen shared, never held.
    let mut c = read();
    c.narrow_to_given(&topo, &[], std::slice::from_ref(&g5.pci_bus_id), &[]);
    assert!(c.gpu_minors.is_empty());
    let mut shared = read();
    shared.shared_gpu_minors = std::mem::take(&mut shared.gpu_minors);
    shared.narrow_to_given(&topo, &[], std::slice::from_ref(&g5.pci_bus_id), &[]);
    assert_eq!(shared.shared_gpu_minors, vec![g5.minor.expect("minor")]);
}
