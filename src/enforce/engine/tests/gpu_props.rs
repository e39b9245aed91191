//! No GPU is ever used by two live containers, whatever the kubelet's PodResources does
//! (answers, times out, is in backoff, is absent), in every `gpu_mode`: random pod sequences
//! against a model of the kubelet's own GPU bookkeeping, which gives each new pod a GPU it
//! believes free, knowing nothing of nri-align's remaps, and keeps it until the pod is removed.
//! A GPU the device plugin reports unhealthy is in no allocatable list and given to no pod: no
//! remap may choose it either.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::kubernetes::{kctr, kpod, real, BUS};
use super::*;
use crate::enforce::container::KubeletDevices;
use crate::placement::{Allocator, GpuMode};

#[derive(Debug, Clone)]
enum Event {
    /// A pod the kubelet admits: `cpus` exclusive CPUs and, with `gpu`, one GPU the kubelet
    /// picks among those it believes free (`pick`), read by nri-align from PodResources only
    /// when `answered`.
    Admit {
        cpus: u64,
        gpu: bool,
        pick: u8,
        answered: bool,
    },
    /// The kubelet retries the container of a pod nri-align refused.
    Retry { pick: u8, answered: bool },
    /// StopPodSandbox and RemovePodSandbox: the kubelet frees what it gave the pod.
    Remove { pick: u8 },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (1u64..=3, any::<bool>(), any::<u8>(), any::<bool>())
            .prop_map(|(cpus, gpu, pick, answered)| Event::Admit { cpus, gpu, pick, answered }),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(pick, answered)| Event::Retry { pick, answered }),
        2 => any::<u8>().prop_map(|pick| Event::Remove { pick }),
    ]
}

/// A pod as the kubelet sees it: the GPU it gave, whether its container runs, and which GPU
/// (if any) its device plugin reports unhealthy.
struct KubeletPod {
    pod: PodView,
    gpu: Option<usize>,
    cpus: u64,
    live: bool,
    unhealthy: Option<usize>,
}

/// The kubelet's allocatable GPUs: every GPU but the unhealthy one.
fn allocatable(unhealthy: Option<usize>) -> Vec<KubeletDevices> {
    vec![KubeletDevices {
        resource: "nvidia.com/gpu".into(),
        ids: (0..BUS.len())
            .filter(|g| Some(*g) != unhealthy)
            .map(|g| format!("GPU-{g}aaa"))
            .collect(),
    }]
}

fn container(k: &KubeletPod, answered: bool) -> ContainerView {
    let milli = k.cpus * 1000;
    let mut c = kctr(&k.pod, &k.pod.name, "app", milli, Some(milli));
    if let Some(g) = k.gpu {
        // The device plugin's way: the env names the GPU, PodResources lists it.
        c.env = vec![format!("NVIDIA_VISIBLE_DEVICES=GPU-{g}aaa")];
        c.kubelet_devices = answered.then(|| {
            vec![KubeletDevices {
                resource: "nvidia.com/gpu".into(),
                ids: vec![format!("GPU-{g}aaa")],
            }]
        });
    }
    c.kubelet_allocatable = answered.then(|| allocatable(k.unhealthy));
    c
}

/// No live container holds or uses the GPU the device plugin reports unhealthy.
fn unhealthy_gpu_unused(
    e: &Engine<Allocator>,
    unhealthy: Option<usize>,
) -> Result<(), TestCaseError> {
    let Some(g) = unhealthy else {
        return Ok(());
    };
    for (id, r) in &e.records().containers {
        let a = &r.assignment;
        prop_assert!(
            !a.gpus.iter().chain(&a.shared_gpus).any(|b| b == BUS[g]),
            "{id} was given unhealthy GPU {g}"
        );
    }
    Ok(())
}

/// Every GPU a live container uses (held, or used shared through its env), by container.
fn no_gpu_used_twice(e: &Engine<Allocator>) -> Result<(), TestCaseError> {
    let mut used: BTreeMap<String, String> = BTreeMap::new();
    for (id, r) in &e.records().containers {
        for g in r.assignment.gpus.iter().chain(&r.assignment.shared_gpus) {
            if let Some(other) = used.insert(g.clone(), id.clone()) {
                prop_assert!(false, "GPU {g} used by both {other} and {id}");
            }
        }
    }
    Ok(())
}

fn try_create(e: &mut Engine<Allocator>, k: &mut KubeletPod, answered: bool) {
    k.live = matches!(
        e.create_container(&k.pod, &container(k, answered)),
        Ok(Some(_))
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_gpu_is_ever_used_by_two_live_containers(
        events in prop::collection::vec(event(), 1..30),
        remap in any::<bool>(),
        trust_env in any::<bool>(),
        unhealthy in proptest::option::of(0..BUS.len()),
    ) {
        let mut cfg = Config::default();
        cfg.placement.gpu_mode = if remap { GpuMode::Remap } else { GpuMode::Keep };
        // One NUMA node per container, so that a GPU whose node's CPUs are taken is remapped.
        cfg.placement.policy = Policy::SingleNumaNode;
        cfg.trust_visible_devices_env = trust_env;
        let mut e = real(cfg, "");
        let mut pods: Vec<KubeletPod> = Vec::new();
        let mut next = 0u32;
        for ev in events {
            match ev {
                Event::Admit { cpus, gpu, pick, answered } => {
                    // The kubelet's view: a GPU is free when no pod it admitted was given it.
                    let free: Vec<usize> = (0..BUS.len())
                        .filter(|g| Some(*g) != unhealthy)
                        .filter(|g| !pods.iter().any(|k| k.gpu == Some(*g)))
                        .collect();
                    let gpu = match (gpu, free.is_empty()) {
                        (false, _) => None,
                        (true, true) => continue,
                        (true, false) => Some(free[pick as usize % free.len()]),
                    };
                    next += 1;
                    let mut k = KubeletPod {
                        pod: kpod("ns", &format!("p{next}"), &[]),
                        gpu,
                        cpus,
                        live: false,
                        unhealthy,
                    };
                    try_create(&mut e, &mut k, answered);
                    pods.push(k);
                }
                Event::Retry { pick, answered } => {
                    let waiting: Vec<usize> = (0..pods.len()).filter(|i| !pods[*i].live).collect();
                    if let Some(i) = waiting.get(pick as usize % waiting.len().max(1)) {
                        try_create(&mut e, &mut pods[*i], answered);
                    }
                }
                Event::Remove { pick } => {
                    if !pods.is_empty() {
                        let k = pods.remove(pick as usize % pods.len());
                        e.pod_stopped(&k.pod.id);
                        e.release_pod(&k.pod.id);
                    }
                }
            }
            no_gpu_used_twice(&e)?;
            unhealthy_gpu_unused(&e, unhealthy)?;
        }
    }
}

/// The sequence the property found on a remapping node, spelled out: pod A's GPU is remapped
/// off the node whose CPUs are taken; the kubelet, which still believes A's new GPU free, gives
/// it to pod B, whose PodResources lookup times out. B is refused, never run beside A.
#[test]
fn a_gpu_held_by_remap_is_never_handed_to_a_pod_the_kubelet_could_not_be_asked_about() {
    let mut cfg = Config::default();
    cfg.placement.gpu_mode = GpuMode::Remap;
    cfg.placement.policy = Policy::SingleNumaNode;
    let mut e = real(cfg, "");
    // Node 1's CPUs are taken: a GPU-1 container cannot be aligned there.
    let cpu = kpod("ns", "cpu", &[]);
    e.create_container(&cpu, &kctr(&cpu, "cpu", "app", 4000, Some(4000)))
        .expect("cpu pod")
        .expect("not exempt");
    let node1: crate::topology::CpuSet = "4-7".parse().expect("set");
    // The kubelet gives A the GPU of the node whose CPUs the CPU pod took.
    let taken_node = if e.records().containers["cpu"]
        .assignment
        .cpus
        .is_subset(&node1)
    {
        1
    } else {
        0
    };
    let mut a = KubeletPod {
        pod: kpod("ns", "a", &[]),
        gpu: Some(taken_node),
        cpus: 2,
        live: false,
        unhealthy: None,
    };
    try_create(&mut e, &mut a, true);
    assert!(a.live);
    let held = &e.records().containers["a"].assignment;
    assert_eq!(held.gpus, vec![BUS[1 - taken_node]], "remapped: {held:?}");
    // The kubelet still believes GPU `1 - taken_node` free and gives it to B; PodResources
    // does not answer in time.
    let mut b = KubeletPod {
        pod: kpod("ns", "b", &[]),
        gpu: Some(1 - taken_node),
        cpus: 1,
        live: false,
        unhealthy: None,
    };
    let err = e
        .create_container(&b.pod, &container(&b, false))
        .expect_err("B would share A's GPU");
    assert!(err.to_string().contains(BUS[1 - taken_node]), "{err}");
    // Answered, it is no better: the kubelet's GPU is A's.
    try_create(&mut e, &mut b, true);
    no_gpu_used_twice(&e).expect("never used twice");
}

/// A GPU in MIG mode is handed out only as its MIG devices: a remap never lands on it, even
/// when no MIG device of it is in use.
#[test]
fn a_remap_never_lands_on_a_gpu_in_mig_mode() {
    let mut t = super::kubernetes::host("");
    t.gpus[1].mig_enabled = Some(true);
    let mut cfg = Config::default();
    cfg.placement.gpu_mode = GpuMode::Remap;
    let a = Allocator::new(std::sync::Arc::new(t), cfg.placement.clone());
    let mut e = Engine::new(
        a,
        cfg,
        None,
        None,
        Box::new(crate::enforce::testing::AllDevices),
    );
    let mut first = KubeletPod {
        pod: kpod("ns", "a", &[]),
        gpu: Some(0),
        cpus: 1,
        live: false,
        unhealthy: None,
    };
    try_create(&mut e, &mut first, true);
    assert!(first.live);
    // The device plugin's view lags and hands GPU 0 out again: the only other GPU is in MIG
    // mode, so there is nowhere to remap to.
    let second = KubeletPod {
        pod: kpod("ns", "b", &[]),
        gpu: Some(0),
        cpus: 1,
        live: false,
        unhealthy: None,
    };
    let err = e
        .create_container(&second.pod, &container(&second, true))
        .expect_err("no GPU to remap to");
    assert!(!err.to_string().is_empty());
    assert!(!e.records().containers.contains_key("b"));
    no_gpu_used_twice(&e).expect("never used twice");
}

/// The remap the sequence above makes, with the GPU it would move A onto reported unhealthy
/// (left out of the kubelet's allocatable devices): A is never moved onto it. And with no
/// allocatable answer at all, A is kept where the kubelet put it, never remapped on a guess.
#[test]
fn a_remap_never_chooses_a_gpu_the_kubelet_does_not_list_as_allocatable() {
    for allocatable_answered in [true, false] {
        let mut cfg = Config::default();
        cfg.placement.gpu_mode = GpuMode::Remap;
        cfg.placement.policy = Policy::SingleNumaNode;
        let mut e = real(cfg, "");
        let cpu = kpod("ns", "cpu", &[]);
        e.create_container(&cpu, &kctr(&cpu, "cpu", "app", 4000, Some(4000)))
            .expect("cpu pod")
            .expect("not exempt");
        let node1: crate::topology::CpuSet = "4-7".parse().expect("set");
        let taken_node = usize::from(
            e.records().containers["cpu"]
                .assignment
                .cpus
                .is_subset(&node1),
        );
        let other = 1 - taken_node;
        let a = KubeletPod {
            pod: kpod("ns", "a", &[]),
            gpu: Some(taken_node),
            cpus: 2,
            live: false,
            unhealthy: Some(other),
        };
        let mut c = container(&a, true);
        if !allocatable_answered {
            c.kubelet_allocatable = None;
        }
        // Kept on its GPU, whose node's CPUs are taken: single-numa-node refuses it.
        let refused = e.create_container(&a.pod, &c);
        assert!(refused.is_err(), "{refused:?}");
        assert!(e.records().containers.len() == 1, "only the CPU pod runs");
        // The same container, the other GPU allocatable again: remapped onto it.
        c.kubelet_allocatable = Some(allocatable(None));
        e.create_container(&a.pod, &c)
            .expect("remapped")
            .expect("not exempt");
        assert_eq!(
            e.records().containers[&c.id].assignment.gpus,
            vec![BUS[other]]
        );
    }
}

/// An allocatable list that leaves out the container's own GPU (empty while a device plugin
/// re-registers, or lagging behind it) never refuses the container: the GPUs its device plugin
/// gave it are the kubelet's word too, so it keeps them.
#[test]
fn a_remap_keeps_the_containers_own_gpu_when_the_allocatable_list_lacks_it() {
    let mut cfg = Config::default();
    cfg.placement.gpu_mode = GpuMode::Remap;
    cfg.placement.policy = Policy::SingleNumaNode;
    let mut e = real(cfg, "");
    let a = KubeletPod {
        pod: kpod("ns", "a", &[]),
        gpu: Some(0),
        cpus: 2,
        live: false,
        unhealthy: None,
    };
    let mut c = container(&a, true);
    c.kubelet_allocatable = Some(vec![KubeletDevices {
        resource: "nvidia.com/gpu".into(),
        ids: Vec::new(),
    }]);
    e.create_container(&a.pod, &c)
        .expect("placed on its own GPU")
        .expect("not exempt");
    assert_eq!(e.records().containers[&c.id].assignment.gpus, vec![BUS[0]]);
}
