//! What the engine tells observers outside it (the NodeResourceTopology publisher): the free
//! resources per NUMA node after every change, the pods on the node for the scheduler's pod-set
//! fingerprint, and each new configuration. The engine calls observers with its lock held, on
//! the request path, so an observer only hands the data over (a watch channel) and returns.
//!
//! The pod set changes only with pod sandbox events (RunPodSandbox, StopPodSandbox,
//! RemovePodSandbox, Synchronize), so its list is built once per change and shared, not on
//! every CreateContainer.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Engine, EngineError, Placer};
use crate::config::Config;
use crate::enforce::container::PodView;
use crate::metrics::NodeFreeSample;
use crate::nrt::fingerprint::PodId;
use crate::placement::NodeFree;
use crate::topology::Topology;

/// Told about every change of what is free, of the pods and of the configuration.
pub trait StateObserver: Send {
    /// Free resources per NUMA node now; the pods on the node when they are known (after the
    /// runtime's Synchronize: before it, pods that started earlier are missing).
    fn state_changed(&self, free: &[NodeFree], pods: Option<&Arc<[PodId]>>);
    /// A new configuration is in force (SIGHUP, the runtime's drop-in).
    fn config_changed(&self, config: &Config);
    /// A container was refused: nothing changed here, but a scheduler sent a pod this node
    /// could not take, so what it read of the node may be stale (an update lost, an object
    /// edited) and is worth checking now rather than at the next resync.
    fn placement_refused(&self) {}
}

/// Told about every refused container, every admitted one and every pod removed, by pod: the
/// eviction task's clock (`src/evict`). Called on the request path with the engine's lock
/// held: it only hands the message over and returns.
pub trait RefusalObserver: Send {
    /// A container of the pod was refused.
    fn refused(&self, namespace: &str, name: &str, uid: &str);
    /// A container of the pod was admitted (or left alone).
    fn admitted(&self, namespace: &str, name: &str);
    /// A container of the pod was refused because another container holds what it needs (a
    /// device another pod claimed, a CPU a scheduler promised twice): the pod is not at fault,
    /// and an eviction would punish it for another's claim.
    fn refused_for_another(&self, namespace: &str, name: &str);
    /// The pod's sandbox was removed.
    fn removed(&self, namespace: &str, name: &str);
}

/// The pods the engine knows (pod sandbox id -> namespace and name) and the shared list
/// observers get. Only what is read later is kept: a pod's annotations and labels (a
/// `last-applied-configuration` alone is often kilobytes) come with every request that needs
/// them.
#[derive(Default)]
pub(super) struct PodSet {
    pods: std::collections::HashMap<String, PodId>,
    /// The list of `pods`, built on first use after a change.
    ids: std::cell::OnceCell<Arc<[PodId]>>,
    /// Whether `pods` holds every pod of the node (a Synchronize was seen).
    complete: bool,
    /// Sandboxes whose untrusted scheduler annotations were logged: one line per pod, not one
    /// per container or restart. Forgotten with the pod.
    untrusted_noted: std::collections::HashSet<String>,
}

impl PodSet {
    /// The pod of sandbox `id`.
    pub(super) fn get(&self, id: &str) -> Option<&PodId> {
        self.pods.get(id)
    }

    /// Adds or replaces `pod`; `true` when the set of pod names changed.
    pub(super) fn insert(&mut self, pod: &PodView) -> bool {
        let old = self.pods.insert(pod.id.clone(), pod_id(pod));
        let same = old.is_some_and(|p| p.namespace == pod.namespace && p.name == pod.name);
        if !same {
            self.ids = Default::default();
        }
        !same
    }

    /// Adds `pod` unless its sandbox is known.
    pub(super) fn insert_new(&mut self, pod: &PodView) -> bool {
        !self.pods.contains_key(&pod.id) && self.insert(pod)
    }

    /// Whether sandbox `id`'s untrusted scheduler annotations are yet to be logged (`true` the
    /// first time only).
    pub(super) fn first_untrusted_note(&mut self, id: &str) -> bool {
        self.untrusted_noted.insert(id.to_string())
    }

    /// Forgets sandbox `id`; `true` when it was known.
    pub(super) fn remove(&mut self, id: &str) -> bool {
        self.untrusted_noted.remove(id);
        let had = self.pods.remove(id).is_some();
        if had {
            self.ids = Default::default();
        }
        had
    }

    /// Makes the set exactly `pods` (the runtime's Synchronize: pods removed while nri-align
    /// was away go too), and complete from now on.
    pub(super) fn replace(&mut self, pods: &[PodView]) {
        self.pods = pods.iter().map(|p| (p.id.clone(), pod_id(p))).collect();
        let live = &self.pods;
        self.untrusted_noted.retain(|id| live.contains_key(id));
        self.ids = Default::default();
        self.complete = true;
    }

    /// Namespace and name of every pod, each once (a pod whose sandbox is being replaced can
    /// have two), sorted; `None` until the set is complete.
    pub(super) fn ids(&self) -> Option<&Arc<[PodId]>> {
        if !self.complete {
            return None;
        }
        Some(self.ids.get_or_init(|| {
            let set: BTreeSet<PodId> = self.pods.values().cloned().collect();
            set.into_iter().collect()
        }))
    }
}

fn pod_id(pod: &PodView) -> PodId {
    PodId::new(pod.namespace.clone(), pod.name.clone())
}

/// Who hears of the engine's changes and answers: owned by this file.
#[derive(Default)]
pub(super) struct Observers {
    /// Told what is free, the pods and the configuration (the NodeResourceTopology publisher).
    state: Option<Box<dyn StateObserver>>,
    /// Told about refusals and admissions by pod (`src/evict`).
    refusals: Option<Box<dyn RefusalObserver>>,
}

impl Observers {
    /// Tells the refusal observer how a creation in `pod` was answered, and the state
    /// observer of a refusal.
    pub(super) fn heard_create<T>(&self, pod: &PodView, answer: &Result<T, EngineError>) {
        if let Some(o) = &self.refusals {
            match answer {
                Ok(_) => o.admitted(&pod.namespace, &pod.name),
                Err(EngineError::Rejected(r)) if r.another_holds => {
                    o.refused_for_another(&pod.namespace, &pod.name)
                }
                Err(_) => o.refused(&pod.namespace, &pod.name, &pod.uid),
            }
        }
        if let (Err(_), Some(o)) = (answer, &self.state) {
            o.placement_refused();
        }
    }

    /// Tells the refusal observer that `pod`'s sandbox was removed.
    pub(super) fn pod_removed(&self, pod: &PodId) {
        if let Some(o) = &self.refusals {
            o.removed(&pod.namespace, &pod.name);
        }
    }
}

impl<P: Placer> Engine<P> {
    /// Hands the observer every later change, starting with the state now.
    pub fn set_observer(&mut self, observer: Box<dyn StateObserver>) {
        observer.config_changed(&self.config);
        self.observers.state = Some(observer);
        self.refresh_free();
    }

    /// Tells `observer` about every later refusal, admission and pod removal.
    pub fn set_refusal_observer(&mut self, observer: Box<dyn RefusalObserver>) {
        self.observers.refusals = Some(observer);
    }

    /// Refreshes the free gauges and tells the observer what is free now.
    pub(super) fn refresh_free(&self) {
        let observer = self.observers.state.as_ref();
        if self.metrics.is_none() && observer.is_none() {
            return;
        }
        let free = self.placer.free_by_node();
        if let Some(m) = &self.metrics {
            m.set_free(&samples(self.placer.topology(), &free));
        }
        if let Some(o) = observer {
            o.state_changed(&free, self.pods.ids());
        }
    }

    /// Tells the observer about a new configuration.
    pub(super) fn config_changed(&self) {
        if let Some(o) = &self.observers.state {
            o.config_changed(&self.config);
        }
    }
}

/// The free gauges of `free`: counts, RDMA NICs only (NICs without an RDMA device are never
/// allocated to containers).
pub fn samples(topo: &Topology, free: &[NodeFree]) -> Vec<NodeFreeSample> {
    free.iter()
        .map(|n| NodeFreeSample {
            node: n.node,
            cpus: n.cpus.len() as u64,
            headroom_cpus: n.headroom_cpus.len() as u64,
            memory_bytes: n.memory_bytes,
            gpus: n.gpus.len() as u64,
            rdma_nics: n
                .nics
                .iter()
                .filter(|name| {
                    topo.nics
                        .iter()
                        .any(|x| &x.name == *name && x.rdma_device.is_some())
                })
                .count() as u64,
        })
        .collect()
}
