//! What `/healthz` and `/readyz` report.
//!
//! - **Liveness** (`/healthz`): the process can still do its job. A heartbeat task stamps
//!   [`Health::beat`] about every second, and only after it could take the engine lock (see
//!   `cli/run/health.rs`); `/healthz` fails once the last stamp is older than
//!   [`Health::stall_after`]: the async runtime is stalled, or a handler is wedged under the
//!   engine lock. It never depends on the runtime connection: a containerd restart must not
//!   make the kubelet kill nri-align, which reconnects by itself.
//! - **Readiness** (`/readyz`): registered with the runtime and caught up with it
//!   (Synchronize done on the current connection). Set from the NRI stub's connection state;
//!   the text says why not (`connecting to /var/run/nri/nri.sock, 3 failed attempt(s), ...`).
//! - **Degraded parts**: what still works but not fully, one line each after the readiness
//!   line (`degraded: nrt: ...`). They never turn readiness off: nri-align still aligns every
//!   container while its state cannot be written or its NodeResourceTopology is left alone,
//!   and a DaemonSet marked unready for that would tell the operator less, not more. The
//!   metrics carry the same facts for alerts; this is for the person with `curl`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

// tokio's clock: the same as std's, except that paused tests can move it.
use tokio::time::Instant;

/// How long without a heartbeat before `/healthz` fails, by default. The kubelet's liveness
/// probe (every 10 s, 3 failures) then restarts the container after 30-40 s.
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(10);

/// Liveness and readiness of the daemon, shared by the heartbeat, the connection watcher and
/// the HTTP responder.
#[derive(Debug)]
pub struct Health {
    origin: Instant,
    /// Milliseconds after `origin` of the last heartbeat (0: none yet, counted as at start).
    last_beat_ms: AtomicU64,
    stall_after: Duration,
    /// Why the last heartbeat attempt failed, if it did.
    stall_reason: Mutex<Option<String>>,
    /// `Ok(description)` when ready, `Err(why not)` otherwise.
    readiness: Mutex<Result<String, String>>,
    /// Degraded parts: name (`state`, `nrt`) to what is wrong.
    degraded: Mutex<BTreeMap<&'static str, String>>,
}

impl Default for Health {
    fn default() -> Self {
        Self::new(DEFAULT_STALL_AFTER)
    }
}

impl Health {
    /// Alive (the start counts as a heartbeat), not ready.
    pub fn new(stall_after: Duration) -> Self {
        Health {
            origin: Instant::now(),
            last_beat_ms: AtomicU64::new(0),
            stall_after,
            stall_reason: Mutex::new(None),
            readiness: Mutex::new(Err("starting".into())),
            degraded: Mutex::new(BTreeMap::new()),
        }
    }

    /// The threshold of [`Health::liveness`].
    pub fn stall_after(&self) -> Duration {
        self.stall_after
    }

    /// The event loop ran and the engine answered just now.
    pub fn beat(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_beat_ms.store(ms, Ordering::Relaxed);
        *lock(&self.stall_reason) = None;
    }

    /// A heartbeat could not be taken (`why`: the engine lock stayed busy...); liveness fails
    /// once this lasts longer than the threshold.
    pub fn missed_beat(&self, why: String) {
        *lock(&self.stall_reason) = Some(why);
    }

    /// Time since the last heartbeat.
    pub fn since_last_beat(&self) -> Duration {
        let last = Duration::from_millis(self.last_beat_ms.load(Ordering::Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }

    /// `Ok(text)` while alive, `Err(why)` once the heartbeat is older than the threshold.
    pub fn liveness(&self) -> Result<String, String> {
        let age = self.since_last_beat();
        if age <= self.stall_after {
            return Ok("ok".into());
        }
        let reason = lock(&self.stall_reason)
            .clone()
            .unwrap_or_else(|| "the event loop did not run".into());
        Err(format!(
            "no heartbeat for {:.1}s (limit {}s): {reason}",
            age.as_secs_f64(),
            self.stall_after.as_secs()
        ))
    }

    /// Sets readiness: `ready` with `detail` saying what the daemon is connected to, or why not.
    pub fn set_readiness(&self, ready: bool, detail: String) {
        *lock(&self.readiness) = if ready { Ok(detail) } else { Err(detail) };
    }

    /// `Ok(description)` when ready, `Err(why not)`.
    pub fn readiness(&self) -> Result<String, String> {
        lock(&self.readiness).clone()
    }

    /// Marks `part` degraded with `why` (one line), or, with `None`, whole again.
    pub fn set_degraded(&self, part: &'static str, why: Option<String>) {
        let mut d = lock(&self.degraded);
        match why {
            // One line each: the body is read line by line.
            Some(w) => d.insert(part, w.replace('\n', " ")),
            None => d.remove(part),
        };
    }

    /// The degraded parts as `part: why`, by part name.
    pub fn degraded(&self) -> Vec<String> {
        lock(&self.degraded)
            .iter()
            .map(|(part, why)| format!("{part}: {why}"))
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
