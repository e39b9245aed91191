//! The guard of the spec watcher: a watcher that ended (a panic in a rescan) or stalled (a
//! rescan that never returns) would leave the index as it was, silently, until the daemon
//! restarts. The guard looks every [`WatchTiming::check_every`]: it notices either, says so
//! (`/readyz` degraded through the caller's callback, `nri_align_cdi_watcher_up` 0, a log
//! line) and starts another watcher, counted in `nri_align_cdi_watcher_restarts_total`. A
//! stalled thread cannot be stopped from outside; it ends by itself once it wakes and sees it
//! was replaced, and while [`MAX_STUCK`] of them wait, no further one is started.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use super::watch::{spawn, WatchTiming};
use super::CdiRegistry;

/// Replaced watchers still running (stalled) beyond which no new one is started: each holds a
/// thread and an inotify descriptor.
const MAX_STUCK: usize = 4;

/// What the guard tells the caller: the reason the watcher is degraded, or `None` once well.
pub(super) type Degraded = Box<dyn Fn(Option<String>) + Send>;

/// Starts a watcher of `registry` and its guard.
pub(super) fn spawn_guarded(
    registry: Arc<CdiRegistry>,
    timing: WatchTiming,
    degraded: Degraded,
) -> std::io::Result<()> {
    let first = spawn(Arc::clone(&registry), timing)?;
    registry.metrics.watcher_up.set(1);
    let weak = Arc::downgrade(&registry);
    drop(registry);
    std::thread::Builder::new()
        .name("cdi-watch-guard".into())
        .spawn(move || guard(&weak, timing, first, &degraded))?;
    Ok(())
}

fn guard(registry: &Weak<CdiRegistry>, timing: WatchTiming, first: JoinHandle<()>, say: &Degraded) {
    let mut current = first;
    let mut stuck: Vec<JoinHandle<()>> = Vec::new();
    let mut is_degraded = false;
    loop {
        std::thread::sleep(timing.check_every);
        let Some(r) = registry.upgrade() else {
            return;
        };
        stuck.retain(|h| !h.is_finished());
        let why = if current.is_finished() {
            Some("the CDI spec watcher ended".to_string())
        } else if r.since_beat() > timing.stall_after {
            Some(format!(
                "the CDI spec watcher made no progress for {}s",
                r.since_beat().as_secs()
            ))
        } else {
            None
        };
        let Some(why) = why else {
            if is_degraded {
                tracing::info!("CDI spec watcher running again");
                r.metrics.watcher_up.set(1);
                say(None);
                is_degraded = false;
            }
            continue;
        };
        r.metrics.watcher_up.set(0);
        is_degraded = true;
        if stuck.len() >= MAX_STUCK {
            say(Some(format!(
                "{why}; {MAX_STUCK} replaced watchers are still stuck, no other is started"
            )));
            continue;
        }
        // The running one (if stalled) ends once it sees a later generation.
        r.generation.fetch_add(1, Ordering::Relaxed);
        match spawn(Arc::clone(&r), timing) {
            Ok(next) => {
                tracing::warn!("{why}: another was started");
                r.metrics.watcher_restarts.inc();
                say(Some(format!("{why}; another was started")));
                stuck.push(std::mem::replace(&mut current, next));
            }
            Err(e) => {
                tracing::warn!("{why}, and no other could be started ({e})");
                say(Some(format!("{why}; no other could be started: {e}")));
            }
        }
    }
}
