//! Rescanning the spec directories when they change.
//!
//! A DRA driver writes a claim's spec when the claim is prepared, just before the kubelet
//! creates the pod's containers, and removes it when the claim is unprepared: the index must
//! follow within a second. Each existing directory has an inotify watch (nix, non-blocking,
//! read every 100 ms on this thread); a directory that appears later (`/var/run/cdi` is made
//! by the first driver that writes there) or that is removed and made again is noticed by a
//! check every second. A burst of events (a driver writing several files, an editor's
//! write-and-rename) costs one rescan.

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use super::CdiRegistry;

const TICK: Duration = Duration::from_millis(100);
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
    let mut fresh = add_missing(inotify, dirs, &mut watched);
    let mut last_check = Instant::now();
    loop {
        std::thread::sleep(TICK);
        let Some(r) = registry.upgrade() else {
            return;
        };
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
