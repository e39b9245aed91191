//! Random event sequences on the engine with the real allocator: create,
//! CRI update, stop, remove, restart of the same container, pod removal, Synchronize and
//! reload, with shared, exclusive, isolated, GPU (kubelet, env, replica) and exempt
//! containers. After every event: no CPU is both exclusive and shared, no empty cpuset is
//! sent, no GPU is held by two containers, no CPU by two, and the allocator's ledger holds
//! exactly the engine's records.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::kubernetes::{kctr, kpod, real, BUS};
use super::*;
use crate::enforce::container::KubeletDevices;
use crate::placement::Allocator;

#[derive(Debug, Clone)]
enum Kind {
    Shared,
    Exclusive(u64),
    Isolated,
    KubeletGpu(u32),
    EnvGpu(u32),
    Replica(u32),
}

#[derive(Debug, Clone)]
enum Event {
    Create { pod: u8, name: u8, kind: Kind },
    Update { pick: u8, milli: u64 },
    Stop { pick: u8 },
    Remove { pick: u8 },
    Restart { pick: u8 },
    RemovePod { pod: u8 },
    Synchronize,
    Reload { reserved: u8, exempt: bool },
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Shared),
        (1u64..=4).prop_map(Kind::Exclusive),
        Just(Kind::Isolated),
        (0u32..2).prop_map(Kind::KubeletGpu),
        (0u32..2).prop_map(Kind::EnvGpu),
        (0u32..2).prop_map(Kind::Replica),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0u8..4, 0u8..3, kind()).prop_map(|(pod, name, kind)| Event::Create { pod, name, kind }),
        1 => (any::<u8>(), prop_oneof![Just(100u64), Just(1000), Just(2000), Just(3000)])
            .prop_map(|(pick, milli)| Event::Update { pick, milli }),
        1 => any::<u8>().prop_map(|pick| Event::Stop { pick }),
        1 => any::<u8>().prop_map(|pick| Event::Remove { pick }),
        1 => any::<u8>().prop_map(|pick| Event::Restart { pick }),
        1 => (0u8..4).prop_map(|pod| Event::RemovePod { pod }),
        1 => Just(Event::Synchronize),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(reserved, exempt)| Event::Reload { reserved, exempt }),
    ]
}

/// Namespace 3 is the one reloads may make exempt.
fn pod_of(i: u8) -> PodView {
    kpod(&format!("ns{}", i % 4), &format!("p{i}"), &[])
}

fn container(pod: &PodView, id: &str, name: &str, kind: &Kind) -> (PodView, ContainerView) {
    let mut pod = pod.clone();
    let mut c = match kind {
        Kind::Shared => kctr(&pod, id, name, 250, None),
        Kind::Exclusive(n) => kctr(&pod, id, name, n * 1000, Some(n * 1000)),
        Kind::Isolated => {
            pod.annotations.insert(
                format!("cpus.nri-align.io/container.{name}"),
                "isolated".into(),
            );
            kctr(&pod, id, name, 1000, Some(1000))
        }
        Kind::KubeletGpu(_) | Kind::EnvGpu(_) | Kind::Replica(_) => {
            kctr(&pod, id, name, 1000, Some(1000))
        }
    };
    match kind {
        Kind::KubeletGpu(g) | Kind::Replica(g) => {
            let suffix = if matches!(kind, Kind::Replica(_)) {
                "::1"
            } else {
                ""
            };
            c.env = vec![format!("NVIDIA_VISIBLE_DEVICES=GPU-{g}aaa")];
            c.kubelet_devices = Some(vec![KubeletDevices {
                resource: "nvidia.com/gpu".into(),
                ids: vec![format!("GPU-{g}aaa{suffix}")],
            }]);
        }
        Kind::EnvGpu(g) => c.env = vec![format!("NVIDIA_VISIBLE_DEVICES=GPU-{g}aaa")],
        _ => {}
    }
    (pod, c)
}

fn check(
    e: &Engine<Allocator>,
    sent: &[CpusetUpdate],
    adj: Option<&CpuSet>,
) -> Result<(), TestCaseError> {
    if let Some(cpus) = adj {
        prop_assert!(!cpus.is_empty(), "an adjustment with an empty cpuset");
    }
    for u in sent {
        prop_assert!(
            !u.cpus.is_empty(),
            "an empty cpuset sent to {}",
            u.container_id
        );
    }
    let recs = &e.records().containers;
    let mut exclusive = CpuSet::new();
    let mut gpus: BTreeSet<String> = BTreeSet::new();
    for (id, r) in recs {
        prop_assert!(!r.applied_cpus.is_empty(), "{id} recorded on no CPU");
        if r.assignment.exclusive {
            prop_assert!(
                r.assignment.cpus.intersection(&exclusive).is_empty(),
                "{id}: an exclusive CPU held twice"
            );
            exclusive.extend_from(&r.assignment.cpus);
        }
        for g in &r.assignment.gpus {
            prop_assert!(gpus.insert(g.clone()), "{id}: GPU {g} held twice");
        }
    }
    for (id, r) in recs.iter().filter(|(_, r)| !r.assignment.exclusive) {
        prop_assert!(
            r.applied_cpus.intersection(&exclusive).is_empty(),
            "{id} shares {} with exclusive CPUs {exclusive}",
            r.applied_cpus
        );
    }
    let held: BTreeMap<String, crate::placement::Assignment> = e
        .placer()
        .held()
        .into_iter()
        .map(|a| (a.container_id.clone(), a))
        .collect();
    let recorded: BTreeMap<String, crate::placement::Assignment> = recs
        .iter()
        .map(|(id, r)| (id.clone(), r.assignment.clone()))
        .collect();
    prop_assert_eq!(held, recorded, "ledger != records");
    Ok(())
}

fn nth(e: &Engine<Allocator>, pick: u8) -> Option<String> {
    let ids: Vec<&String> = e.records().containers.keys().collect();
    (!ids.is_empty()).then(|| ids[pick as usize % ids.len()].clone())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn random_kubelet_event_sequences_keep_the_invariants(events in prop::collection::vec(event(), 1..40)) {
        let mut cfg = Config::default();
        // The sequences were written for remapping (the kubelet gives GPU 0 over and over).
        cfg.placement.gpu_mode = crate::placement::GpuMode::Remap;
        // Isolated requests come from every namespace the events use.
        cfg.placement.isolated_namespaces = (0..4).map(|i| format!("ns{i}")).collect();
        let base = cfg.clone();
        let mut e = real(cfg, "7");
        let mut next = 0u32;
        let mut specs: BTreeMap<String, (PodView, ContainerView)> = BTreeMap::new();
        for ev in events {
            let mut sent = Vec::new();
            let mut adj = None;
            match ev {
                Event::Create { pod, name, kind } => {
                    next += 1;
                    let id = format!("c{next}");
                    let (p, c) = container(&pod_of(pod), &id, &format!("n{name}"), &kind);
                    if let Ok(Some(out)) = e.create_container(&p, &c) {
                        adj = Some(out.adjustment.cpuset_cpus.clone());
                        sent = out.updates;
                        specs.insert(id, (p, c));
                    }
                }
                Event::Update { pick, milli } => {
                    if let Some(id) = nth(&e, pick) {
                        if let Some((p, c)) = specs.get(&id) {
                            let mut r = c.resources.clone();
                            r.cpu_shares = Some(milli * 1024 / 1000);
                            r.cpu_quota = Some((milli * 100) as i64);
                            if let Ok(u) = e.update_container(p, c, &r) {
                                sent = u;
                            }
                        }
                    }
                }
                Event::Stop { pick } => {
                    if let Some(id) = nth(&e, pick) {
                        e.container_stopped(&id);
                    }
                }
                Event::Remove { pick } => {
                    if let Some(id) = nth(&e, pick) {
                        sent = e.release_container(&id);
                        specs.remove(&id);
                    }
                }
                Event::Restart { pick } => {
                    if let Some(id) = nth(&e, pick) {
                        if let Some((p, c)) = specs.get(&id).cloned() {
                            let before = e.records().containers[&id].assignment.clone();
                            let asked = e.records().containers[&id].resources.clone();
                            e.container_stopped(&id);
                            next += 1;
                            let c = ContainerView { id: format!("c{next}"), ..c };
                            if let Ok(Some(out)) = e.create_container(&p, &c) {
                                adj = Some(out.adjustment.cpuset_cpus.clone());
                                sent = out.updates;
                                // The kubelet's semantics: a restart gets its exclusive CPUs
                                // and its GPUs back.
                                let after = &e.records().containers[&c.id].assignment;
                                // (Unless a reload made its namespace exempt since, or a CRI
                                // update changed what the predecessor had asked for.)
                                let now = &e.records().containers[&c.id];
                                if e.config().is_exempt(&p.namespace) {
                                    prop_assert!(!after.exclusive);
                                } else if before.exclusive && now.resources == asked {
                                    prop_assert_eq!(&before.cpus, &after.cpus, "{} restarted elsewhere", c.name);
                                    prop_assert_eq!(&before.gpus, &after.gpus);
                                }
                                specs.insert(c.id.clone(), (p, c));
                            }
                        }
                    }
                }
                Event::RemovePod { pod } => {
                    let p = pod_of(pod);
                    sent = e.release_pod(&p.id);
                }
                Event::Synchronize => {
                    let live: Vec<ContainerView> = e
                        .records()
                        .containers
                        .iter()
                        .filter_map(|(id, r)| {
                            let (_, c) = specs.get(id)?;
                            let mut c = c.clone();
                            c.resources.cpuset_cpus = r.applied_cpus.to_string().into();
                            c.env.push(format!("NRI_ALIGN_DECISION={}", r.assignment.cpus));
                            c.state = if r.stopped { ContainerState::Stopped } else { ContainerState::Running };
                            Some(c)
                        })
                        .collect();
                    let pods: Vec<PodView> = specs.values().map(|(p, _)| p.clone()).collect();
                    sent = e.synchronize(&pods, &live);
                }
                Event::Reload { reserved, exempt } => {
                    let mut cfg = base.clone();
                    cfg.placement.reserved_cpus = (0..8u32).filter(|i| reserved & (1 << i) != 0).collect();
                    if exempt {
                        cfg.exempt_namespaces = vec!["ns3".into()];
                    }
                    if let Ok(u) = e.reload(cfg) {
                        sent = u;
                    }
                }
            }
            specs.retain(|id, _| e.records().containers.contains_key(id));
            check(&e, &sent, adj.as_ref())?;
        }
        let _ = BUS;
    }
}
