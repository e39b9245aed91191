//! Which pods are due for eviction (pure: times are given, nothing is sent). A pod is tracked
//! from its first refusal; an admitted container of it, or its removal, forgets it. It is due
//! once it has been refused without a break for the window, and again at most once per window
//! after each attempt (an eviction a PodDisruptionBudget blocked, a pod without a controller
//! looked at again in case one adopted it).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Most pods tracked at once: far above a node's pod limit (110 by default, a few hundred at
/// most), so only a flood of made-up pods reaches it, and then the newest are not tracked.
pub const MAX_TRACKED: usize = 4096;

/// A pod, as the runtime names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (the eviction names it, so a new pod of the same name is never evicted for it).
    pub uid: String,
}

#[derive(Debug, Clone)]
struct Entry {
    pod: PodRef,
    /// First refusal since the pod was last admitted.
    since: Instant,
    /// When the last attempt was made, if one was.
    attempted: Option<Instant>,
}

/// The refused pods and their clocks.
#[derive(Debug)]
pub struct Tracker {
    window: Duration,
    /// By namespace and name: what the engine knows at release time.
    pods: HashMap<(String, String), Entry>,
}

impl Tracker {
    /// A tracker evicting after `window` of refusals.
    pub fn new(window: Duration) -> Tracker {
        Tracker {
            window,
            pods: HashMap::new(),
        }
    }

    /// A container of `pod` was refused at `now`. A pod of the same name with another UID (a
    /// recreated pod) starts its own clock.
    pub fn refused(&mut self, pod: PodRef, now: Instant) {
        let key = (pod.namespace.clone(), pod.name.clone());
        let fresh = Entry {
            pod,
            since: now,
            attempted: None,
        };
        let full = self.pods.len() >= MAX_TRACKED;
        match self.pods.get_mut(&key) {
            Some(e) if e.pod.uid == fresh.pod.uid => {}
            Some(e) => *e = fresh,
            None if full => {}
            None => {
                self.pods.insert(key, fresh);
            }
        }
    }

    /// A container of the pod was admitted: its refusals are no longer continuous.
    pub fn admitted(&mut self, namespace: &str, name: &str) {
        self.pods.remove(&(namespace.to_string(), name.to_string()));
    }

    /// The pod's sandbox is gone (evicted, deleted).
    pub fn removed(&mut self, namespace: &str, name: &str) {
        self.admitted(namespace, name);
    }

    /// Restarts every clock at `now`: some admissions or removals may have been lost, so no
    /// refusal is known to be continuous any more (never evicts for a lost message).
    pub fn restart_all(&mut self, now: Instant) {
        for e in self.pods.values_mut() {
            e.since = now;
            e.attempted = None;
        }
    }

    /// The pods due at `now`, each marked attempted (at most one attempt per window), sorted.
    pub fn take_due(&mut self, now: Instant) -> Vec<PodRef> {
        let window = self.window;
        let mut out: Vec<PodRef> = self
            .pods
            .values_mut()
            .filter(|e| due_at(window, e) <= now)
            .map(|e| {
                e.attempted = Some(now);
                e.pod.clone()
            })
            .collect();
        out.sort();
        out
    }

    /// The next time a pod becomes due, if any is tracked.
    pub fn next_due(&self) -> Option<Instant> {
        self.pods.values().map(|e| due_at(self.window, e)).min()
    }

    /// Pods tracked.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether no pod is tracked.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

/// When `e` may be attempted next: a window after its first refusal, and a window after its
/// last attempt.
fn due_at(window: Duration, e: &Entry) -> Instant {
    let first = e.since + window;
    match e.attempted {
        Some(at) => first.max(at + window),
        None => first,
    }
}

#[cfg(test)]
#[path = "tracker_tests.rs"]
mod tests;
