//! The kubelet's semantics for DRA devices on the real allocator: a claim's device (a GPU, an
//! RDMA NIC, a generic PCI function) named by two containers of one pod is shared, not
//! allocated twice nor refused; it stays held until the last of them is removed; a restarted
//! container keeps its CPUs and its part (holder or sharer); and a device is never held by
//! two containers, nor by two pods.

use std::sync::Arc;

use super::kubernetes::{host, kctr, kpod, real, BUS};
use super::*;
use crate::enforce::testing::AllDevices;
use crate::host::cdi::{CdiDevice, CdiTarget, PciFunction};
use crate::placement::Allocator;
use crate::topology::Nic;

const CLAIM_GPU: &str = "k8s.gpu.nvidia.com/claim=4c1d-gpu-1";

/// Container `name` of `pod` with one whole CPU and the claim's GPU (minor 1, node 1).
fn claimer(pod: &PodView, id: &str, name: &str) -> ContainerView {
    let mut c = kctr(pod, id, name, 1000, Some(1000));
    c.kubelet_allocatable = None;
    c.cdi_devices = vec![CLAIM_GPU.into()];
    c.cdi_resolved = vec![CdiDevice {
        name: CLAIM_GPU.into(),
        spec: "/var/run/cdi/k8s.gpu.nvidia.com-claim_4c1d.yaml".into(),
        targets: vec![CdiTarget::NvidiaGpu { minor: 1 }],
        unmapped: Vec::new(),
        net_devices: Vec::new(),
        env: Vec::new(),
        mounts: Vec::new(),
        nodes: Vec::new(),
    }];
    c
}

fn create(e: &mut Engine<Allocator>, p: &PodView, c: &ContainerView) {
    e.create_container(p, c)
        .unwrap_or_else(|err| panic!("{}: {err}", c.name))
        .expect("placed");
}

/// Who holds GPU `bus` alone in the placer.
fn holder(e: &Engine<Allocator>, bus: &str) -> Vec<String> {
    e.placer()
        .held()
        .into_iter()
        .filter(|a| a.gpus.iter().any(|g| g == bus))
        .map(|a| a.container_id)
        .collect()
}

#[test]
fn two_containers_naming_one_claim_share_its_gpu_until_the_last_goes() {
    let mut e = real(Config::default(), "");
    let p = kpod("ml", "pair", &[]);
    let a = claimer(&p, "a-1", "trainer");
    let b = claimer(&p, "b-1", "sidecar");
    create(&mut e, &p, &a);
    create(&mut e, &p, &b);
    let ra = e.records().containers["a-1"].assignment.clone();
    let rb = e.records().containers["b-1"].assignment.clone();
    assert_eq!(ra.gpus, [BUS[1]]);
    assert_eq!(rb.shared_gpus, [BUS[1]], "the sibling shares it");
    assert!(rb.gpus.is_empty());
    // Both aligned to the GPU's node.
    assert_eq!(ra.numa_nodes.to_string(), "1");
    assert_eq!(rb.numa_nodes.to_string(), "1");

    // The holder goes: the hold passes to the sibling, so the claim's GPU stays held.
    e.release_container("a-1");
    assert_eq!(holder(&e, BUS[1]), ["b-1"]);
    assert_eq!(e.records().containers["b-1"].assignment.gpus, [BUS[1]]);
    assert!(e.records().containers["b-1"]
        .assignment
        .shared_gpus
        .is_empty());
    // The last one goes: released, and the next pod's claim holds it alone.
    e.release_container("b-1");
    assert!(holder(&e, BUS[1]).is_empty());
    let q = kpod("ml", "next", &[]);
    let mut x = claimer(&q, "x-1", "trainer");
    x.cdi_resolved[0].name = "k8s.gpu.nvidia.com/claim=9999-gpu-1".into();
    x.cdi_devices = vec![x.cdi_resolved[0].name.clone()];
    create(&mut e, &q, &x);
    assert_eq!(holder(&e, BUS[1]), ["x-1"]);
}

#[test]
fn a_restarted_sharer_keeps_its_cpus_and_stays_a_sharer() {
    let mut e = real(Config::default(), "");
    let p = kpod("ml", "pair", &[]);
    let a = claimer(&p, "a-1", "trainer");
    let b = claimer(&p, "b-1", "sidecar");
    create(&mut e, &p, &a);
    create(&mut e, &p, &b);
    let before = e.records().containers["b-1"].assignment.clone();
    e.container_stopped("b-1");
    let again = ContainerView {
        id: "b-2".into(),
        ..b.clone()
    };
    create(&mut e, &p, &again);
    let after = e.records().containers["b-2"].assignment.clone();
    assert_eq!(after.cpus, before.cpus, "same CPUs after the restart");
    assert_eq!(after.shared_gpus, [BUS[1]]);
    assert!(!e.records().containers.contains_key("b-1"));
    // The holder restarts too: it keeps the hold and its CPUs.
    let held = e.records().containers["a-1"].assignment.clone();
    e.container_stopped("a-1");
    let a2 = ContainerView {
        id: "a-2".into(),
        ..a.clone()
    };
    create(&mut e, &p, &a2);
    assert_eq!(e.records().containers["a-2"].assignment.cpus, held.cpus);
    assert_eq!(holder(&e, BUS[1]), ["a-2"]);
}

/// The NIC and the generic function of the tests below, both on node 1.
const NIC: &str = "ib0";
const NIC_BUS: &str = "0000:5e:00.0";
const FN_BUS: &str = "0000:c0:00.0";

/// Device nodes as [`AllDevices`] has them, and the NIC's uverbs node (char 231:192 as the
/// kernel numbers `uverbs0`), which a NIC's decision adds.
struct WithUverbs;
impl crate::host::devices::DeviceLookup for WithUverbs {
    fn lookup(&self, path: &str) -> Option<crate::enforce::container::DeviceNode> {
        match path {
            "/dev/infiniband/uverbs0" => Some(crate::enforce::inputs::tests::node(path, 231, 192)),
            _ => AllDevices.lookup(path),
        }
    }
}

/// [`real`]'s host with an RDMA NIC on node 1.
fn with_nic() -> Engine<Allocator> {
    with_nic_stored(None)
}

/// [`with_nic`], its decisions persisted in `store` when given.
fn with_nic_stored(store: Option<StateStore>) -> Engine<Allocator> {
    let mut t = host("");
    t.nics = vec![Nic {
        name: NIC.into(),
        pci_bus_id: Some(NIC_BUS.into()),
        numa_node: Some(1),
        rdma_device: Some("mlx5_0".into()),
        uverbs: vec!["uverbs0".into()],
    }];
    let config = Config::default();
    let a = Allocator::new(Arc::new(t), config.placement.clone());
    Engine::new(a, config, store, None, Box::new(WithUverbs))
}

/// The two kinds besides GPUs: the claim's CDI name and what its spec's node maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Nic,
    Generic,
}

fn target(kind: Kind) -> CdiTarget {
    match kind {
        Kind::Nic => CdiTarget::Uverbs {
            name: "uverbs0".into(),
            pci: None,
        },
        Kind::Generic => CdiTarget::Pci(PciFunction {
            bus_id: FN_BUS.into(),
            numa_node: Some(1),
            pcie_path: Vec::new(),
        }),
    }
}

/// Container `name` of `pod` with one whole CPU and claim `claim`'s device of `kind`.
fn kind_claimer(pod: &PodView, id: &str, name: &str, claim: &str, kind: Kind) -> ContainerView {
    let mut c = kctr(pod, id, name, 1000, Some(1000));
    c.kubelet_allocatable = None;
    let cdi = format!("example.com/claim={claim}-dev");
    c.cdi_devices = vec![cdi.clone()];
    c.cdi_resolved = vec![CdiDevice {
        name: cdi,
        spec: format!("/var/run/cdi/example.com-claim_{claim}.yaml").into(),
        targets: vec![target(kind)],
        unmapped: Vec::new(),
        net_devices: Vec::new(),
        env: Vec::new(),
        mounts: Vec::new(),
        nodes: Vec::new(),
    }];
    c
}

/// The containers holding the `kind` device: in the placer's ledger for a NIC (counted users),
/// by their records for a generic function (listed, not as a sibling's).
fn holders_of(e: &Engine<Allocator>, kind: Kind) -> Vec<String> {
    match kind {
        Kind::Nic => e
            .placer()
            .held()
            .into_iter()
            .filter(|a| a.nics.iter().any(|n| n == NIC))
            .map(|a| a.container_id)
            .collect(),
        Kind::Generic => e
            .records()
            .containers
            .iter()
            .filter(|(_, r)| {
                r.assignment.generic_devices.iter().any(|b| b == FN_BUS)
                    && !r.shared_devices.iter().any(|b| b == FN_BUS)
            })
            .map(|(id, _)| id.clone())
            .collect(),
    }
}

/// The invariant: at most one container holds the device, so never two pods; returns it.
fn sole_holder(e: &Engine<Allocator>, kind: Kind) -> Option<String> {
    let h = holders_of(e, kind);
    assert!(h.len() <= 1, "{kind:?} held by {h:?}");
    let pods: std::collections::BTreeSet<String> = h
        .iter()
        .map(|id| e.records().containers[id].assignment.pod_uid.clone())
        .collect();
    assert!(pods.len() <= 1, "{kind:?} held by pods {pods:?}");
    h.into_iter().next()
}

/// Whether record `id` uses the device as a sibling's sharer.
fn shares(e: &Engine<Allocator>, id: &str, kind: Kind) -> bool {
    let r = &e.records().containers[id];
    let key = match kind {
        Kind::Nic => NIC,
        Kind::Generic => FN_BUS,
    };
    r.shared_devices.iter().any(|d| d == key)
}

fn hand_over(kind: Kind) {
    let mut e = with_nic();
    let p = kpod("ml", "pair", &[]);
    let a = kind_claimer(&p, "a-1", "trainer", "c1", kind);
    let b = kind_claimer(&p, "b-1", "sidecar", "c1", kind);
    create(&mut e, &p, &a);
    assert_eq!(sole_holder(&e, kind).as_deref(), Some("a-1"));
    create(&mut e, &p, &b);
    assert_eq!(
        sole_holder(&e, kind).as_deref(),
        Some("a-1"),
        "not held twice"
    );
    assert!(shares(&e, "b-1", kind) && !shares(&e, "a-1", kind));
    // A CRI update of the sharer re-makes its decision: still a sharer, still aligned.
    let mut bigger = b.resources.clone();
    bigger.memory_limit = Some(2 << 30);
    e.update_container(&p, &b, &bigger).expect("update");
    assert!(shares(&e, "b-1", kind));
    assert_eq!(sole_holder(&e, kind).as_deref(), Some("a-1"));
    for id in ["a-1", "b-1"] {
        let a = &e.records().containers[id].assignment;
        assert_eq!(
            a.numa_nodes.to_string(),
            "1",
            "{id} aligned to the device: {a:?}"
        );
    }
    // The holder goes: the sibling holds it, as the claim's last user.
    e.release_container("a-1");
    assert_eq!(sole_holder(&e, kind).as_deref(), Some("b-1"));
    assert!(!shares(&e, "b-1", kind));
    if kind == Kind::Nic {
        let b = &e.records().containers["b-1"].assignment;
        assert_eq!(b.nics, [NIC]);
        assert!(b.generic_devices.is_empty(), "{b:?}");
    }
    // The last one goes: nobody holds it, and the next pod's claim holds it alone.
    e.release_container("b-1");
    assert_eq!(sole_holder(&e, kind), None);
    let q = kpod("ml", "next", &[]);
    let x = kind_claimer(&q, "x-1", "trainer", "c2", kind);
    let y = kind_claimer(&q, "y-1", "sidecar", "c2", kind);
    create(&mut e, &q, &x);
    create(&mut e, &q, &y);
    assert_eq!(sole_holder(&e, kind).as_deref(), Some("x-1"));
    assert!(shares(&e, "y-1", kind));
}

#[test]
fn a_claims_nic_passes_to_the_sibling_and_is_never_held_twice() {
    hand_over(Kind::Nic);
}

#[test]
fn a_claims_generic_device_passes_to_the_sibling_and_is_never_held_twice() {
    hand_over(Kind::Generic);
}

fn restarts(kind: Kind) {
    let mut e = with_nic();
    let p = kpod("ml", "pair", &[]);
    let a = kind_claimer(&p, "a-1", "trainer", "c1", kind);
    let b = kind_claimer(&p, "b-1", "sidecar", "c1", kind);
    create(&mut e, &p, &a);
    create(&mut e, &p, &b);
    // The sharer restarts: same CPUs, still a sharer.
    let before = e.records().containers["b-1"].assignment.clone();
    e.container_stopped("b-1");
    create(
        &mut e,
        &p,
        &ContainerView {
            id: "b-2".into(),
            ..b.clone()
        },
    );
    assert_eq!(e.records().containers["b-2"].assignment.cpus, before.cpus);
    assert!(shares(&e, "b-2", kind));
    assert_eq!(sole_holder(&e, kind).as_deref(), Some("a-1"));
    // The holder restarts: it takes its predecessor's decision, hold and CPUs.
    let held = e.records().containers["a-1"].assignment.clone();
    e.container_stopped("a-1");
    create(
        &mut e,
        &p,
        &ContainerView {
            id: "a-2".into(),
            ..a.clone()
        },
    );
    assert_eq!(e.records().containers["a-2"].assignment.cpus, held.cpus);
    assert!(!shares(&e, "a-2", kind));
    assert_eq!(sole_holder(&e, kind).as_deref(), Some("a-2"));
    // And the hold still passes on when it goes.
    e.release_container("a-2");
    assert_eq!(sole_holder(&e, kind).as_deref(), Some("b-2"));
}

#[test]
fn restarted_holders_and_sharers_of_a_claims_nic_keep_their_part() {
    restarts(Kind::Nic);
}

#[test]
fn restarted_holders_and_sharers_of_a_claims_generic_device_keep_their_part() {
    restarts(Kind::Generic);
}

#[test]
fn the_record_keeps_the_kubelets_claim_devices_across_a_restart() {
    let mut e = real(Config::default(), "");
    let p = kpod("ml", "one", &[]);
    let mut a = claimer(&p, "a-1", "trainer");
    let device = crate::enforce::container::KubeletClaimDevice {
        claim: "ml/gpu-claim".into(),
        driver: "gpu.nvidia.com".into(),
        pool: "node-a".into(),
        device: "gpu-1".into(),
        cdi_names: vec![CLAIM_GPU.into()],
    };
    a.kubelet_claims = vec![device.clone()];
    create(&mut e, &p, &a);
    assert_eq!(
        e.records().containers["a-1"].dra_claims,
        std::slice::from_ref(&device)
    );
    e.container_stopped("a-1");
    let again = ContainerView {
        id: "a-2".into(),
        ..a.clone()
    };
    create(&mut e, &p, &again);
    assert_eq!(e.records().containers["a-2"].dra_claims, [device]);
}

/// How many users the ledger counts on the claim's NIC (the host's only one).
fn nic_users(e: &Engine<Allocator>) -> u32 {
    e.placer().ledger().nic_users(0)
}

/// `c` as the runtime lists it at Synchronize: running, with the CPUs nri-align recorded (or
/// every CPU), its claim's CDI devices resolved as the plugin resolves them before the
/// engine is asked, and without nri-align's decision env (so the devices it runs with are
/// compared with the record).
fn listed(e: &Engine<Allocator>, c: &ContainerView) -> ContainerView {
    let mut l = c.clone();
    l.state = crate::enforce::container::ContainerState::Running;
    l.resources.cpuset_cpus = e
        .records()
        .containers
        .get(&c.id)
        .map_or_else(|| "0-7".to_string(), |r| r.applied_cpus.to_string())
        .into();
    l
}

#[test]
fn after_a_restart_from_the_state_file_a_claims_nic_is_counted_once_and_passes_on() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = || Some(StateStore::open(dir.path()).expect("store"));
    let p = kpod("ml", "pair", &[]);
    let a = kind_claimer(&p, "a-1", "trainer", "c1", Kind::Nic);
    let b = kind_claimer(&p, "b-1", "sidecar", "c1", Kind::Nic);
    let (la, lb) = {
        let mut first = with_nic_stored(store());
        create(&mut first, &p, &a);
        create(&mut first, &p, &b);
        assert_eq!(nic_users(&first), 1);
        (listed(&first, &a), listed(&first, &b))
    };
    // nri-align restarts: the state file brings both records back, then Synchronize.
    let mut e = with_nic_stored(store());
    e.start();
    assert!(
        shares(&e, "b-1", Kind::Nic),
        "the sharer's part is in the state file"
    );
    e.synchronize(std::slice::from_ref(&p), &[la, lb]);
    assert_eq!(sole_holder(&e, Kind::Nic).as_deref(), Some("a-1"));
    assert!(shares(&e, "b-1", Kind::Nic));
    assert_eq!(nic_users(&e), 1, "the claim's NIC counted once");
    // The holder goes: the sharer holds it, still counted once.
    e.release_container("a-1");
    assert_eq!(sole_holder(&e, Kind::Nic).as_deref(), Some("b-1"));
    assert!(!shares(&e, "b-1", Kind::Nic));
    assert_eq!(nic_users(&e), 1);
    e.release_container("b-1");
    assert_eq!(nic_users(&e), 0);
}

#[test]
fn after_a_restart_without_state_the_second_container_naming_a_claims_nic_shares_it() {
    let p = kpod("ml", "pair", &[]);
    let a = kind_claimer(&p, "a-1", "trainer", "c1", Kind::Nic);
    let b = kind_claimer(&p, "b-1", "sidecar", "c1", Kind::Nic);
    // Another pod's container naming its own claim of the same NIC is not a sibling.
    let q = kpod("ml", "other", &[]);
    let x = kind_claimer(&q, "x-1", "trainer", "c2", Kind::Nic);
    let mut e = with_nic();
    let listing = [listed(&e, &a), listed(&e, &b)];
    e.synchronize(std::slice::from_ref(&p), &listing);
    assert_eq!(sole_holder(&e, Kind::Nic).as_deref(), Some("a-1"));
    assert!(shares(&e, "b-1", Kind::Nic) && !shares(&e, "a-1", Kind::Nic));
    assert_eq!(nic_users(&e), 1, "not counted twice");
    let rb = &e.records().containers["b-1"];
    assert!(rb.assignment.nics.is_empty(), "{rb:?}");
    assert_eq!(rb.cdi_names, ["example.com/claim=c1-dev"]);
    // A later Synchronize keeps the parts as they are.
    e.synchronize(std::slice::from_ref(&p), &listing);
    assert_eq!(nic_users(&e), 1);
    assert!(shares(&e, "b-1", Kind::Nic));
    // The holder goes: the sharer becomes the holder.
    e.release_container("a-1");
    assert_eq!(sole_holder(&e, Kind::Nic).as_deref(), Some("b-1"));
    assert_eq!(nic_users(&e), 1);
    assert_eq!(e.records().containers["b-1"].assignment.nics, [NIC]);
    // A container of another pod is rebuilt as its own user, not as a sharer.
    let mut f = with_nic();
    let lx = listed(&f, &x);
    f.synchronize(&[p.clone(), q], &[listed(&f, &a), lx]);
    assert!(!shares(&f, "x-1", Kind::Nic));
    assert_eq!(nic_users(&f), 2);
}
