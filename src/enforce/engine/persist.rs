//! Persisting the records, and what happens while it fails: the engine writes after every
//! event ([`Engine::persist`]), logs an outage once when it starts and once when it ends, and
//! keeps the metrics. While writes fail, the store retries only when a write is asked for;
//! on a quiet node that would be never, so the daemon arms a timer when an outage starts
//! ([`Engine::set_outage_hook`]) that calls [`Engine::retry_persist`] until it ends: a node
//! whose disk got space back persists within seconds, not at its next container event, and
//! a crash meanwhile loses nothing decided. No timer runs while writes succeed.

use std::time::Duration;

use super::{Engine, Placer};
use crate::enforce::state::{
    Loaded, Records, StateError, StateStore, RETRY_AFTER, RETRY_AFTER_MAX,
};
use crate::metrics::Metrics;

/// Where the records are written and who hears of an outage: owned by this file.
pub(super) struct Persistence {
    /// The state file's store; `None`: decisions are not persisted.
    store: Option<StateStore>,
    /// Called when state writes start failing: the daemon's retry timer.
    on_outage: Option<Box<dyn Fn() + Send>>,
}

impl Persistence {
    /// Writes to `store` (when given), fsyncing as `fsync` says.
    pub(super) fn new(mut store: Option<StateStore>, fsync: bool) -> Self {
        if let Some(s) = store.as_mut() {
            s.set_fsync(fsync);
        }
        Self {
            store,
            on_outage: None,
        }
    }

    /// Whether each write is fsynced (`state_fsync`, changed by a reload).
    pub(super) fn set_fsync(&mut self, fsync: bool) {
        if let Some(s) = self.store.as_mut() {
            s.set_fsync(fsync);
        }
    }

    /// Reads the state file; `None` without a store. An outage the load found (a log it could
    /// not rewrite, a dir it could not open) is counted and the outage hook called.
    pub(super) fn load(&mut self, metrics: Option<&Metrics>) -> Option<Loaded> {
        let store = self.store.as_mut()?;
        let loaded = store.load();
        if store.outage().is_some() {
            // The store said why; the gauge says it until a write succeeds, and the daemon's
            // timer retries meanwhile.
            if let Some(m) = metrics {
                m.state_write_failed();
            }
            self.outage_started();
        }
        Some(loaded)
    }

    fn outage_started(&self) {
        if let Some(hook) = &self.on_outage {
            hook();
        }
    }

    /// How long until the next try of a failing write is due; `None` while writes succeed.
    fn retry_in(&self) -> Option<Duration> {
        self.store.as_ref()?.retry_in()
    }

    /// While state writes fail, what is wrong, in one line.
    fn outage_line(&self) -> Option<String> {
        let o = self.store.as_ref()?.outage()?;
        let first = if o.latest == o.error {
            String::new()
        } else {
            format!(" (first: {})", o.error)
        };
        Some(format!(
            "writes failing for {}s ({} tries): {}{first}; decisions are kept in memory and \
             written whole once a write succeeds",
            o.since.elapsed().as_secs(),
            o.attempts,
            o.latest
        ))
    }

    /// Writes the records changed since the last call, logging and counting an outage once
    /// when it starts and once when it ends (see [`Engine::persist`]).
    fn write(&mut self, records: &mut Records, metrics: Option<&Metrics>) {
        let Some(store) = self.store.as_mut() else {
            records.clear_dirty();
            return;
        };
        match store.write(records) {
            Ok(()) => {}
            // Waiting to retry: the outage is already logged and counted.
            Err(StateError::Deferred { .. }) => {}
            Err(e) => {
                if let Some(m) = metrics {
                    m.state_write_failed();
                }
                match store.outage() {
                    Some(o) if o.attempts == 1 => {
                        tracing::error!(
                            "decision not persisted: {e}; containers are still placed, the \
                             state is rewritten whole once a write succeeds (tried again at \
                             most every {}s, without an event every {}-{}s; logged again when \
                             it succeeds)",
                            RETRY_AFTER.as_secs(),
                            RETRY_AFTER.as_secs(),
                            RETRY_AFTER_MAX.as_secs()
                        );
                        if let Some(hook) = &self.on_outage {
                            hook();
                        }
                    }
                    // The dir itself went wrong while it was failing (a symlink planted in
                    // its place, its permissions changed): no amount of waiting ends that.
                    Some(o) if o.kind_changed && !o.latest_passes => tracing::error!(
                        "state still not persisted, now for a reason that does not pass by \
                         itself: {e}; fix the state dir (docs/failure-behaviour.md); tries go \
                         on every {}s",
                        RETRY_AFTER_MAX.as_secs()
                    ),
                    Some(o) if o.kind_changed => tracing::warn!(
                        "state still not persisted, again for the filesystem's condition: {e}"
                    ),
                    _ => tracing::debug!("state still not persisted: {e}"),
                }
            }
        }
        if let Some(o) = store.take_recovered() {
            if let Some(m) = metrics {
                m.state_write_recovered();
            }
            tracing::warn!(
                lost_writes = o.lost_writes,
                failed_attempts = o.attempts,
                down_s = o.since.elapsed().as_secs(),
                records = records.len(),
                "state persisted again: every live record rewritten (writes had failed: {})",
                o.error
            );
        }
    }
}

impl<P: Placer> Engine<P> {
    /// Sets what to call when state writes start failing (once per outage, an outage the
    /// load or the opening of the state dir found included): the daemon wakes its retry
    /// timer with it.
    pub fn set_outage_hook(&mut self, hook: Box<dyn Fn() + Send>) {
        self.persistence.on_outage = Some(hook);
    }

    /// While state writes fail: tries the whole rewrite when it is due (the store's
    /// [`RETRY_AFTER`] since the last failure), as the next event's write would, opening the
    /// state dir first when it could not be so far. Logs and counts as an event's write does
    /// (the recovery once). Returns how long until the next try is due, `None` once writes
    /// succeed (or there is no store).
    pub fn retry_persist(&mut self) -> Option<Duration> {
        if self.persistence.retry_in()?.is_zero() {
            self.persist();
        }
        self.persistence.retry_in()
    }

    /// While state writes fail, what is wrong, in one line for `/readyz`.
    pub fn state_outage(&self) -> Option<String> {
        self.persistence.outage_line()
    }

    /// Writes the records changed since the last call (all of them only when the store
    /// compacts its log).
    ///
    /// A failure is not fatal: the decision stands (the runtime's CreateContainer must not
    /// fail because nri-align's disk is full), and Synchronize rebuilds from the running
    /// containers after a restart. It is logged once when the writes start failing and once
    /// when one succeeds again, not per event: a busy node with a full `/var` would otherwise
    /// add a log line per container to the disk that is full. The metrics follow it.
    pub(super) fn persist(&mut self) {
        // Every change of the records is persisted: the one place to drop what only removed
        // containers kept on the at-risk device list.
        self.forget_gone_device_holders();
        self.persistence
            .write(&mut self.doc.containers, self.metrics.as_deref());
    }
}
