//! Rescanning the spec directories when they change.
//!
//! A DRA driver writes a claim's spec when the claim is prepared, just before the kubelet
//! creates the pod's containers, and removes it when the claim is unprepared: the index must
//! follow within a second. Each existing directory has an inotify watch (nix); this thread
//! sleeps in `poll` on it and wakes when an event comes, then waits [`SETTLE`] and reads
//! every event queued, so a burst (a driver writing several files, an editor's
//! write-and-rename) costs one rescan. A directory that appears later (`/var/run/cdi` is made
//! by the first driver that writes there) or that is removed and made again is noticed by a
//! check every second while one is missing. With every directory watched and nothing
//! changing, the thread wakes once per [`IDLE_CHECK`] only (to end once the registry is
//! dropped): reading the queue every 100 ms, as it once did, woke an idle daemon ten times a
//! second for nothing.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use super::CdiRegistry;

/// How long after the first event of a burst the queue is read (the rest of it comes meanwhile).
const SETTLE: Duration = Duration::from_millis(100);
/// How often a missing directory is looked for.
const DIR_CHECK: Duration = Duration::from_secs(1);
/// How often the thread wakes with every directory watched and no event: only to notice that
/// the registry was dropped (never, in the daemon) and to show it is alive.
const IDLE_CHECK: Duration = Duration::from_secs(60);

/// How the watcher and its guard keep time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchTiming {
    /// How long the watcher sleeps with nothing to do; it shows it is alive at each wake.
    pub idle_check: Duration,
    /// How long without a sign of life before the guard counts the watcher stalled.
    pub stall_after: Duration,
    /// How often the guard looks.
    pub check_every: Duration,
}

impl Default for WatchTiming {
    /// Stalled after three idle wakes missed (a rescan itself takes well under a second with
    /// the total caps), looked at every ten seconds.
    fn default() -> Self {
        WatchTiming {
            idle_check: IDLE_CHECK,
            stall_after: IDLE_CHECK * 3,
            check_every: Duration::from_secs(10),
        }
    }
}

fn flags() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

/// Starts the watcher thread of `registry`; it ends once the registry is dropped elsewhere,
/// or once another watcher replaced it (the registry's generation moved on).
pub(super) fn spawn(
    registry: Arc<CdiRegistry>,
    timing: WatchTiming,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    let dirs = registry.watched_dirs();
    let generation = registry.generation.load(Ordering::Relaxed);
    registry.beat();
    let weak = Arc::downgrade(&registry);
    drop(registry);
    std::thread::Builder::new()
        .name("cdi-watch".into())
        .spawn(move || run(&inotify, &dirs, &weak, timing.idle_check, generation))
}

fn run(
    inotify: &Inotify,
    dirs: &[PathBuf],
    registry: &Weak<CdiRegistry>,
    idle_check: Duration,
    generation: u64,
) {
    let mut watched: Vec<Option<WatchDescriptor>> = vec![None; dirs.len()];
    // A file written between the registry's first read and these watches would be missed:
    // one rescan once they are in place.
    let mut fresh = add_missing(inotify, dirs, &mut watched);
    let mut last_check = Instant::now();
    loop {
        let missing = watched.iter().any(Option::is_none);
        // The first rescan (for files written before the watches were in place) is not
        // held back behind a timeout.
        let wait = if fresh {
            Duration::ZERO
        } else if missing {
            DIR_CHECK.saturating_sub(last_check.elapsed())
        } else {
            idle_check
        };
        if wait_readable(inotify, wait.min(idle_check)) {
            std::thread::sleep(SETTLE);
        }
        let Some(r) = registry.upgrade() else {
            return;
        };
        if r.generation.load(Ordering::Relaxed) != generation {
            // Replaced by the guard after a stall: the newer watcher does the work.
            return;
        }
        r.beat();
        let mut changed = fresh;
        fresh = false;
        loop {
            match inotify.read_events() {
                Ok(events) if !events.is_empty() => {
                    changed = true;
                    for e in events {
                        if e.mask.intersects(
                            AddWatchFlags::IN_DELETE_SELF
                                | AddWatchFlags::IN_MOVE_SELF
                                | AddWatchFlags::IN_IGNORED,
                        ) {
                            for w in watched.iter_mut() {
                                if w.as_ref() == Some(&e.wd) {
                                    *w = None;
                                }
                            }
                        }
                    }
                }
                Ok(_) | Err(Errno::EAGAIN) => break,
                Err(e) => {
                    tracing::warn!(
                        "CDI spec watch failed ({e}); directories are checked every second"
                    );
                    break;
                }
            }
        }
        if last_check.elapsed() >= DIR_CHECK {
            last_check = Instant::now();
            changed |= add_missing(inotify, dirs, &mut watched);
        }
        if changed {
            r.rescan();
            r.beat();
        }
    }
}

/// Sleeps until `inotify` has events or `timeout` passed; whether it has events. A failed
/// `poll` (a signal) counts as a timeout: the caller reads the queue without blocking anyway.
fn wait_readable(inotify: &Inotify, timeout: Duration) -> bool {
    let timeout = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, timeout), Ok(n) if n > 0)
}

/// Adds a watch to each directory that exists and has none; whether any was added (its files
/// may be new to the index).
fn add_missing(
    inotify: &Inotify,
    dirs: &[PathBuf],
    watched: &mut [Option<WatchDescriptor>],
) -> bool {
    let mut added = false;
    for (dir, w) in dirs.iter().zip(watched.iter_mut()) {
        if w.is_none() && dir.is_dir() {
            if let Ok(wd) = inotify.add_watch(dir, flags()) {
                *w = Some(wd);
                added = true;
            }
        }
    }
    added
}
