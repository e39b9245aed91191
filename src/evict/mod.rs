//! Opt-in recovery of pods nri-align keeps refusing (`evict_refused_after`): a pod whose
//! container has been refused without a break for that long is evicted through the Eviction
//! API, so its PodDisruptionBudgets are respected, its controller recreates it and the
//! scheduler, reading the refreshed NodeResourceTopology, places it elsewhere.
//!
//! - [`tracker`]: which pods are due (pure);
//! - [`api`]: reading the pod's controller owner and creating the `Eviction`;
//! - [`metrics`]: its counters, `nri_align_evictions_total{outcome}` among them.
//!
//! Off the create path: the engine's refusals, admissions and pod removals reach the task here
//! through a bounded channel with `try_send` ([`Evictor`] as the engine's
//! [`RefusalObserver`]); a full channel drops the message and restarts every clock, so a lost
//! admission can only delay an eviction, never cause one. docs/scheduler.md says what it does
//! and its risks.
//!
//! May use: `enforce` (the observer seam), `nrt` (the API client and name checks).

pub mod api;
pub mod metrics;
pub mod tracker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use api::{ApiPaths, Outcome};
pub use metrics::EvictMetrics;
pub use tracker::{PodRef, Tracker};

use crate::enforce::engine::RefusalObserver;

/// Messages the channel holds: many times the pods of a node, each a few short strings.
pub const CHANNEL_CAPACITY: usize = 1024;

#[derive(Debug)]
enum Msg {
    Refused(PodRef),
    Admitted(String, String),
    Removed(String, String),
}

/// The engine's side of the eviction task; dropping it stops the task.
#[derive(Debug)]
pub struct Evictor {
    tx: mpsc::Sender<Msg>,
    /// Set when a message was dropped; the task then restarts every clock.
    overflow: Arc<AtomicBool>,
    metrics: EvictMetrics,
    task: JoinHandle<()>,
}

impl Drop for Evictor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Evictor {
    /// Starts the task (inside a tokio runtime): pods refused for `window` are evicted with
    /// `client`, at `paths`.
    pub fn spawn(
        client: kube::Client,
        paths: ApiPaths,
        window: Duration,
        metrics: EvictMetrics,
    ) -> Evictor {
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let overflow = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(run(
            rx,
            Tracker::new(window),
            client,
            paths,
            Arc::clone(&overflow),
            metrics.clone(),
        ));
        Evictor {
            tx,
            overflow,
            metrics,
            task,
        }
    }

    fn send(&self, msg: Msg) {
        if self.tx.try_send(msg).is_err() {
            self.overflow.store(true, Ordering::Relaxed);
            self.metrics.dropped();
        }
    }
}

impl RefusalObserver for Evictor {
    fn refused(&self, namespace: &str, name: &str, uid: &str) {
        self.send(Msg::Refused(PodRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
        }));
    }

    fn admitted(&self, namespace: &str, name: &str) {
        self.send(Msg::Admitted(namespace.to_string(), name.to_string()));
    }

    fn removed(&self, namespace: &str, name: &str) {
        self.send(Msg::Removed(namespace.to_string(), name.to_string()));
    }

    /// Restarts the pod's clock, as an admission does: a refusal another pod's claim caused
    /// never counts towards an eviction.
    fn refused_for_another(&self, namespace: &str, name: &str) {
        self.send(Msg::Admitted(namespace.to_string(), name.to_string()));
    }
}

async fn run(
    mut rx: mpsc::Receiver<Msg>,
    mut tracker: Tracker,
    client: kube::Client,
    paths: ApiPaths,
    overflow: Arc<AtomicBool>,
    metrics: EvictMetrics,
) {
    loop {
        let next = tracker.next_due().map(tokio::time::Instant::from_std);
        let msg = match next {
            Some(at) => tokio::select! {
                m = rx.recv() => Some(m),
                _ = tokio::time::sleep_until(at) => None,
            },
            None => Some(rx.recv().await),
        };
        let now = std::time::Instant::now();
        match msg {
            Some(None) => return, // the Evictor is gone
            Some(Some(Msg::Refused(p))) => tracker.refused(p, now),
            Some(Some(Msg::Admitted(ns, name))) => tracker.admitted(&ns, &name),
            Some(Some(Msg::Removed(ns, name))) => tracker.removed(&ns, &name),
            None => {}
        }
        if overflow.swap(false, Ordering::Relaxed) {
            tracing::warn!("eviction messages were dropped: every refused pod's clock restarts");
            tracker.restart_all(now);
        }
        for pod in tracker.take_due(now) {
            let outcome = api::evict(&client, paths, &pod).await;
            metrics.outcome(outcome.label());
            log(&pod, &outcome);
            if outcome == Outcome::Gone {
                // Removed while nri-align was not connected, or replaced: nothing to look at
                // again (a refused pod of that name starts a clock of its own).
                tracker.removed(&pod.namespace, &pod.name);
            }
        }
    }
}

fn log(pod: &PodRef, outcome: &Outcome) {
    let pod = format!("{}/{}", pod.namespace, pod.name);
    match outcome {
        Outcome::Evicted => tracing::warn!(%pod,
            "evicted: nri-align refused its container for evict_refused_after; its controller recreates it elsewhere"),
        Outcome::NoController => tracing::info!(%pod,
            "not evicted: no controller owner would recreate it; it waits in CreateContainerError"),
        Outcome::PdbBlocked(m) => tracing::info!(%pod,
            "not evicted now: a PodDisruptionBudget forbids it ({m}); tried again after evict_refused_after"),
        Outcome::Gone => tracing::debug!(%pod, "not evicted: the pod is gone"),
        Outcome::Failed(m) => tracing::warn!(%pod,
            "eviction failed: {m}; tried again after evict_refused_after"),
    }
}
