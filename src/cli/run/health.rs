//! What the running daemon tells the world about itself, besides its log: readiness and
//! liveness for `/readyz` and `/healthz` (the kubelet's probes), the connection metrics, and
//! systemd's notifications (`Type=notify`: `READY=1` once first ready, `STATUS=` on every
//! change, `WATCHDOG=1` while alive when the unit sets `WatchdogSec=`, `STOPPING=1`).
//!
//! Readiness follows the NRI stub's connection state, so every way a connection ends (the
//! runtime restarting, a dead stream noticed by the stub) reaches all three the same way.
//! systemd's notifications go through the `sd-notify` crate: small, no dependencies beyond
//! libc, handles the abstract-namespace sockets systemd uses in containers, and is a no-op
//! without `NOTIFY_SOCKET`, so the same binary runs under systemd, in a DaemonSet and
//! launched by a runtime.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sd_notify::NotifyState;
use tokio::sync::watch;

use crate::enforce::nri::{Link, LinkWatch};
use crate::metrics::{serve, Health, Metrics, ServeLimits};
use crate::nrt::PublishStatus;

/// How often the heartbeat runs.
const BEAT_EVERY: Duration = Duration::from_secs(1);
/// How long the heartbeat waits for the engine lock before counting a missed beat.
const ENGINE_WAIT: Duration = Duration::from_secs(2);

/// How long the NRI socket must have been missing, with no registration since start, before
/// `/readyz` takes the node for one where NRI is off and answers 200 (degraded). A runtime
/// restart removes and recreates the socket within seconds; a runtime with NRI off never makes
/// one, and a DaemonSet pod there that never turned ready would hold the rollout's one
/// unavailable slot for ever. The connection gauge, the log and systemd still say not
/// connected: only the kubelet's readiness changes.
pub const NRI_OFF_READY_AFTER: Duration = Duration::from_secs(30);

/// Whether `link` looks like a node where NRI is off: no socket, never registered since start.
/// A socket lost after a registration is the runtime going away, which readiness reports.
fn nri_off(link: &Link) -> bool {
    link.socket_missing && link.registrations == 0 && !link.ready
}

/// What `/readyz` says for `link`, with NRI off for `off_for` (see [`nri_off`]): readiness, its
/// line, and the `nri` degraded line.
fn readiness(link: &Link, off_for: Option<Duration>) -> (bool, String, Option<String>) {
    match off_for {
        Some(d) if d >= NRI_OFF_READY_AFTER => (
            true,
            "NRI is off on this node, nothing is aligned here (ready only so that a rollout \
             does not wait for this node; nri_align_runtime_connected is 0)"
                .into(),
            Some(
                link.description
                    .strip_prefix("nri: ")
                    .unwrap_or(&link.description)
                    .to_string(),
            ),
        ),
        _ => (link.ready, link.description.clone(), None),
    }
}

/// Sends `states` to systemd, when it is listening; a failure is logged, never fatal.
fn notify(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!("systemd notification failed: {e}");
    }
}

/// Follows the runtime connection until the stub is gone: readiness (ready also on a node where
/// NRI is off, after [`NRI_OFF_READY_AFTER`]), the connection gauge and counter, and systemd's
/// `READY=1` (once, when registered) and `STATUS=`.
pub fn spawn_link_follower(
    mut link: LinkWatch,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut told_ready = false;
        let mut state = link.current();
        let mut off_since: Option<tokio::time::Instant> = None;
        loop {
            off_since =
                nri_off(&state).then(|| off_since.unwrap_or_else(tokio::time::Instant::now));
            let (ready, line, nri) = readiness(&state, off_since.map(|t| t.elapsed()));
            health.set_readiness(ready, line);
            health.set_degraded("nri", nri);
            metrics.set_runtime_link(state.ready, state.registrations);
            // One line: a newline would end the STATUS= assignment.
            let line = state.description.replace('\n', " ");
            let status = NotifyState::Status(&line);
            if state.ready && !told_ready {
                told_ready = true;
                notify(&[NotifyState::Ready, status]);
            } else {
                notify(&[status]);
            }
            // While NRI looks off but not yet for long enough, wake when it has been.
            let due = off_since
                .map(|t| t + NRI_OFF_READY_AFTER)
                .filter(|due| *due > tokio::time::Instant::now());
            let next = match due {
                Some(due) => tokio::select! {
                    next = link.changed() => next,
                    () = tokio::time::sleep_until(due) => Some(state.clone()),
                },
                None => link.changed().await,
            };
            match next {
                Some(next) => state = next,
                None => return,
            }
        }
    })
}

/// Publishing failures in a row before `/readyz` lists NodeResourceTopology as degraded: one
/// or two are an API server restart, retried with backoff.
const NRT_FAILURES_SHOWN: u32 = 3;

/// Lists NodeResourceTopology publishing among `/readyz`'s degraded parts while the node's
/// object is left alone (another producer's) or publishing keeps failing, until the
/// publisher is gone.
pub fn spawn_nrt_follower(
    mut status: watch::Receiver<PublishStatus>,
    health: Arc<Health>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let why = nrt_degraded(&status.borrow_and_update());
            health.set_degraded("nrt", why);
            if status.changed().await.is_err() {
                health.set_degraded("nrt", None);
                return;
            }
        }
    })
}

/// What `/readyz` says of publishing in `s`, when it is degraded.
fn nrt_degraded(s: &PublishStatus) -> Option<String> {
    if s.crd_missing {
        // At once, not after a few failures: no retry fixes it.
        return Some(
            "CRD not installed (noderesourcetopologies.topology.node.k8s.io): nothing is \
             published for this node; retried every few minutes"
                .into(),
        );
    }
    if let Some(n) = &s.not_owned {
        return Some(format!(
            "{} is left alone ({}): nri-align publishes nothing for this node; the log's \
             error line says what to do",
            n.summary(),
            n.reason()
        ));
    }
    (s.consecutive_failures >= NRT_FAILURES_SHOWN).then(|| {
        format!(
            "publishing failed {} times in a row, retrying: {}",
            s.consecutive_failures,
            s.last_error.as_deref().unwrap_or("no error recorded")
        )
    })
}

/// Stamps the heartbeat every second while the event loop runs and `engine_free` (the engine
/// lock is not held right now) turns true within two seconds; sends systemd `WATCHDOG=1`
/// while alive, when the unit asked for it (`WATCHDOG_USEC`).
pub fn spawn_heartbeat<F>(health: Arc<Health>, engine_free: F) -> tokio::task::JoinHandle<()>
where
    F: Fn() -> bool + Send + Sync + 'static,
{
    let watchdog = sd_notify::watchdog_enabled();
    if let Some(every) = watchdog {
        tracing::info!(timeout = ?every, "systemd watchdog enabled: pinging while healthy");
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(BEAT_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if wait_for(&engine_free, ENGINE_WAIT).await {
                health.beat();
            } else {
                health.missed_beat(format!(
                    "the engine lock was held for more than {}s",
                    ENGINE_WAIT.as_secs()
                ));
            }
            if watchdog.is_some() && health.liveness().is_ok() {
                notify(&[NotifyState::Watchdog]);
            }
        }
    })
}

/// Polls `free` every 20 ms for at most `limit`: the engine lock is a plain mutex held for
/// microseconds per event, so waiting on it from the event loop would be wrong and a blocking
/// thread per beat wasteful.
async fn wait_for(free: &impl Fn() -> bool, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if free() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` from a thread of its own, and returns
/// the address bound (or why it could not be). Apart from the event loop so that a scrape
/// never delays a container event, and so that `/healthz` still answers, with the age of the
/// last heartbeat, when the event loop has stopped.
pub fn spawn_endpoints(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> std::io::Result<SocketAddr> {
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("nri-align-http".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = bound_tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                match serve(addr, metrics, health, ServeLimits::default()).await {
                    Ok((bound, task)) => {
                        let _ = bound_tx.send(Ok(bound));
                        // Serves until the process exits.
                        let _ = task.await;
                    }
                    Err(e) => {
                        let _ = bound_tx.send(Err(e));
                    }
                }
            });
        })?;
    bound_rx.recv().unwrap_or_else(|_| {
        Err(std::io::Error::other(
            "the endpoints' thread ended before binding",
        ))
    })
}

/// Tells systemd the daemon is stopping (SIGTERM), so `systemctl status` says so at once.
pub fn notify_stopping() {
    notify(&[
        NotifyState::Stopping,
        NotifyState::Status("stopping on request"),
    ]);
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
