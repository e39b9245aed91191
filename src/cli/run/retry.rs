//! The state write retry of a quiet node. While the state dir cannot be written (full,
//! read-only, not created yet), the store tries again only when an event writes; without
//! events nothing would be persisted once the disk is back, and a crash then would lose every
//! decision made since the outage began. This task sleeps on a [`Notify`] the engine wakes
//! when an outage starts, then retries under the engine lock until writes succeed: after
//! [`RETRY_AFTER`], then at pauses doubling up to [`RETRY_AFTER_MAX`] (a rewrite that fails
//! costs the serialisation of every record; a long outage then costs one every 5 s). It has
//! no timer at all while writes succeed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::enforce::engine::{Engine, Placer};
use crate::enforce::state::{RETRY_AFTER, RETRY_AFTER_MAX};
use crate::metrics::Health;

/// The wake-up the engine's outage hook sends ([`Engine::set_outage_hook`]). A wake-up sent
/// before the task waits (an outage found at start) is kept for it.
pub fn outage_signal<P: Placer>(engine: &mut Engine<P>) -> Arc<Notify> {
    let wake = Arc::new(Notify::new());
    let hook = wake.clone();
    engine.set_outage_hook(Box::new(move || hook.notify_one()));
    wake
}

/// Retries the state writes after each wake-up until they succeed; meanwhile `/readyz` lists
/// the state as degraded (refreshed at every try).
pub fn spawn_state_retry<P: Placer + Send + 'static>(
    engine: Arc<Mutex<Engine<P>>>,
    wake: Arc<Notify>,
    health: Arc<Health>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            wake.notified().await;
            let mut pause = RETRY_AFTER;
            while let Some(due) = retry(&engine, &health) {
                tokio::time::sleep(due.max(pause)).await;
                pause = (pause * 2).min(RETRY_AFTER_MAX);
            }
        }
    })
}

fn retry<P: Placer>(engine: &Mutex<Engine<P>>, health: &Health) -> Option<Duration> {
    // A poisoned lock is the plugin's to recover (it resyncs the placer); the records and
    // the store are whole either way.
    let mut engine = engine.lock().unwrap_or_else(|p| p.into_inner());
    let due = engine.retry_persist();
    health.set_degraded("state", engine.state_outage());
    due
}
