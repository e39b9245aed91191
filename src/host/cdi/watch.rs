//! Rescanning the spec directories when they change.
//!
//! A DRA driver writes a claim's spec when the claim is prepared, just before the kubelet
//! creates the pod's containers, and removes it when the claim is unprepared: the index must
//! follow within a second. Each existing directory has an inotify watch, and this thread
//! blocks in `poll` on the inotify descriptor: an event wakes it at once, no period is waited.
//! A directory that appears later (`/var/run/cdi` is made by the first driver that writes
//! there) or that is removed and made again is noticed by a check every second, the longest
//! `poll` waits. A burst of events (a driver writing several files, an editor's
//! write-and-rename) costs one rescan: events are drained until none arrives for a few
//! milliseconds.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use super::CdiRegistry;

/// How long a burst of events may pause before the rescan: a driver's writes of one claim
/// come together, and one rescan reads them all.
const SETTLE: Duration = Duration::from_millis(10);
/// The longest a burst may delay its rescan.
const SETTLE_MAX: Duration = Duration::from_millis(200);
const DIR_CHECK: Duration = Duration::from_secs(1);

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

/// Starts the watcher thread of `registry`; it ends once the registry is dropped elsewhere.
pub(super) fn spawn(registry: Arc<CdiRegistry>) -> std::io::Result<std::thread::JoinHandle<()>> {
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    let dirs = registry.watched_dirs();
    let weak = Arc::downgrade(&registry);
    drop(registry);
    std::thread::Builder::new()
        .name("cdi-watch".into())
        .spawn(move || run(&inotify, &dirs, &weak))
}

fn run(inotify: &Inotify, dirs: &[PathBuf], registry: &Weak<CdiRegistry>) {
    let mut watched: Vec<Option<WatchDescriptor>> = vec![None; dirs.len()];
    // A file written between the registry's first read and these watches would be missed:
    // one rescan once they are in place.
    let mut changed = add_missing(inotify, dirs, &mut watched);
    let mut last_check = Instant::now();
    loop {
        if !changed {
            let left = DIR_CHECK.saturating_sub(last_check.elapsed());
            if wait(inotify, left) {
                changed = drain(inotify, &mut watched);
                // The rest of a burst, within bounds.
                let burst = Instant::now();
                while burst.elapsed() < SETTLE_MAX && wait(inotify, SETTLE) {
                    drain(inotify, &mut watched);
                }
            }
        }
        let Some(r) = registry.upgrade() else {
            return;
        };
        if last_check.elapsed() >= DIR_CHECK {
            last_check = Instant::now();
            changed |= add_missing(inotify, dirs, &mut watched);
        }
        if changed {
            r.rescan();
            changed = false;
        }
    }
}

/// Blocks until the inotify descriptor has events (`true`) or `timeout` passes (`false`).
fn wait(inotify: &Inotify, timeout: Duration) -> bool {
    let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(n) => n > 0,
        // A signal: the caller looks again.
        Err(Errno::EINTR) => false,
        Err(e) => {
            tracing::warn!("CDI spec watch failed ({e}); directories are checked every second");
            std::thread::sleep(timeout);
            false
        }
    }
}

/// Reads every pending event; whether there was any. A watched directory removed or moved
/// loses its watch, so that the periodic check adds it again once it is back.
fn drain(inotify: &Inotify, watched: &mut [Option<WatchDescriptor>]) -> bool {
    let mut any = false;
    loop {
        match inotify.read_events() {
            Ok(events) if !events.is_empty() => {
                any = true;
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
            Ok(_) | Err(Errno::EAGAIN) => return any,
            Err(e) => {
                tracing::warn!("CDI spec watch failed ({e}); directories are checked every second");
                return any;
            }
        }
    }
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
