//! The kubelet's semantics for DRA devices on the real allocator: a claim's GPU named by two
//! containers of one pod is shared, not allocated twice nor refused; it stays held until the
//! last of them is removed; a restarted container keeps its CPUs.

use super::kubernetes::{kctr, kpod, real, BUS};
use super::*;
use crate::host::cdi::{CdiDevice, CdiTarget};
use crate::placement::Allocator;

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
