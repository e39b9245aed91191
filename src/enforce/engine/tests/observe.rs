//! What the engine tells its observer (the NodeResourceTopology feed): the free resources after
//! each admission and release, the pod set once it is complete, and new configurations.
use std::sync::Mutex;

use super::*;
use crate::nrt::fingerprint::PodId;
use crate::placement::NodeFree;

/// What the observer saw: per call, free CPUs per node and the pod names (None: unknown).
#[derive(Default)]
struct Seen {
    states: Vec<(Vec<usize>, Option<Vec<String>>)>,
    policies: Vec<Policy>,
    refusals: usize,
}

struct Recorder(Arc<Mutex<Seen>>);

impl StateObserver for Recorder {
    fn state_changed(&self, free: &[NodeFree], pods: Option<&Arc<[PodId]>>) {
        let cpus = free.iter().map(|n| n.cpus.len()).collect();
        let pods = pods.map(|p| {
            p.iter()
                .map(|x| format!("{}/{}", x.namespace, x.name))
                .collect()
        });
        self.0.lock().expect("lock").states.push((cpus, pods));
    }
    fn config_changed(&self, config: &Config) {
        self.0
            .lock()
            .expect("lock")
            .policies
            .push(config.placement.policy);
    }
    fn placement_refused(&self) {
        self.0.lock().expect("lock").refusals += 1;
    }
}

fn observed() -> (Engine<FakePlacer>, Arc<Mutex<Seen>>) {
    let mut e = engine(None, Config::default());
    let seen = Arc::new(Mutex::new(Seen::default()));
    e.set_observer(Box::new(Recorder(seen.clone())));
    (e, seen)
}

fn last(seen: &Arc<Mutex<Seen>>) -> (Vec<usize>, Option<Vec<String>>) {
    seen.lock()
        .expect("lock")
        .states
        .last()
        .cloned()
        .expect("a state")
}

#[test]
fn every_admission_and_release_reaches_the_observer_with_what_the_gauges_say() {
    let (mut e, seen) = observed();
    // At once: the state now and the configuration in force.
    assert_eq!(last(&seen), (vec![4, 4], None));
    assert_eq!(
        seen.lock().expect("lock").policies,
        vec![Policy::BestEffort]
    );
    let p = pod("ml");
    e.create_container(&p, &ctr("x1", "ml", 2, &[]))
        .expect("x1");
    assert_eq!(last(&seen).0, vec![2, 4]);
    let metrics = e.metrics.clone().expect("metrics").encode();
    assert!(
        metrics.contains("nri_align_free_cpus{numa_node=\"0\"} 2"),
        "{metrics}"
    );
    e.release_container("x1");
    assert_eq!(last(&seen).0, vec![4, 4]);
    // A refused container changes nothing, so no state is sent; the observer is told of the
    // refusal (the publisher then checks the server's copy).
    let before = seen.lock().expect("lock").states.len();
    assert_eq!(seen.lock().expect("lock").refusals, 0);
    assert!(e.create_container(&p, &ctr("big", "ml", 6, &[])).is_err());
    assert_eq!(seen.lock().expect("lock").states.len(), before);
    assert_eq!(seen.lock().expect("lock").refusals, 1);
}

#[test]
fn pods_are_known_after_synchronize_and_follow_sandbox_events() {
    let (mut e, seen) = observed();
    e.pod_started(&pod("a"));
    // Before Synchronize the pods that started earlier are unknown: no pod list.
    assert_eq!(last(&seen).1, None);
    e.synchronize(&[pod("a"), pod("b")], &[]);
    assert_eq!(last(&seen).1, Some(vec!["a/p".into(), "b/p".into()]));
    e.pod_started(&pod("c"));
    assert_eq!(
        last(&seen).1,
        Some(vec!["a/p".into(), "b/p".into(), "c/p".into()])
    );
    // The same sandbox again (CreateContainer carries its pod) is no change.
    let before = seen.lock().expect("lock").states.len();
    e.pod_started(&pod("c"));
    assert_eq!(seen.lock().expect("lock").states.len(), before);
    e.release_pod("sb-b");
    assert_eq!(last(&seen).1, Some(vec!["a/p".into(), "c/p".into()]));
    // A reconnection's Synchronize replaces the set: pods removed meanwhile go.
    e.synchronize(&[pod("c")], &[]);
    assert_eq!(last(&seen).1, Some(vec!["c/p".into()]));
}

#[test]
fn a_reload_tells_the_observer_the_new_configuration() {
    let (mut e, seen) = observed();
    let cfg = Config::parse("policy: single-numa-node\nreserved_cpus: \"0\"\n", "t").expect("cfg");
    e.reload(cfg).expect("reload");
    assert_eq!(
        seen.lock().expect("lock").policies,
        vec![Policy::BestEffort, Policy::SingleNumaNode]
    );
    // The reserved CPU leaves node 0's free CPUs.
    assert_eq!(last(&seen).0, vec![3, 4]);
}

/// What the refusal observer heard, in order.
pub(super) struct Refusals(pub(super) Arc<Mutex<Vec<String>>>);

impl RefusalObserver for Refusals {
    fn refused(&self, namespace: &str, name: &str, uid: &str) {
        self.0
            .lock()
            .expect("lock")
            .push(format!("refused {namespace}/{name} {uid}"));
    }
    fn admitted(&self, namespace: &str, name: &str) {
        self.0
            .lock()
            .expect("lock")
            .push(format!("admitted {namespace}/{name}"));
    }
    fn removed(&self, namespace: &str, name: &str) {
        self.0
            .lock()
            .expect("lock")
            .push(format!("removed {namespace}/{name}"));
    }
    fn refused_for_another(&self, namespace: &str, name: &str) {
        self.0
            .lock()
            .expect("lock")
            .push(format!("refused-for-another {namespace}/{name}"));
    }
}

#[test]
fn refusals_admissions_and_pod_removals_reach_the_refusal_observer_by_pod() {
    let mut e = engine(None, Config::default());
    let heard = Arc::new(Mutex::new(Vec::new()));
    e.set_refusal_observer(Box::new(Refusals(heard.clone())));
    let p = pod("ml");
    assert!(e.create_container(&p, &ctr("big", "ml", 6, &[])).is_err());
    e.create_container(&p, &ctr("x1", "ml", 2, &[]))
        .expect("x1");
    e.release_pod(&p.id);
    // A sandbox nri-align never saw tells nothing.
    e.release_pod("sb-unknown");
    let uid = &p.uid;
    assert_eq!(
        *heard.lock().expect("lock"),
        vec![
            format!("refused ml/p {uid}"),
            "admitted ml/p".to_string(),
            "removed ml/p".to_string(),
        ]
    );
}
