//! Noticing that the configuration file changed, without a signal.
//!
//! A mounted ConfigMap changes by an atomic swap: the kubelet writes the new data into a new
//! `..2026_01_01_00_00_00.000000001/` directory, points a new `..data` symlink at it, renames
//! that over the old `..data` and removes the old directory. The configured path
//! (`config.yaml -> ..data/config.yaml`) never changes itself, and a watch on the file would
//! follow the old, deleted inode. So the **directory** holding the path is watched: the rename
//! of `..data` (`IN_MOVED_TO`), an editor's write-and-rename, an in-place write
//! (`IN_CLOSE_WRITE`), a delete and re-create. Which event it was does not matter: the reload
//! reads the file again and compares a hash of its bytes with the applied one.
//!
//! inotify through nix under tokio's `AsyncFd`. Where inotify is unavailable (no instance
//! left: `fs.inotify.max_user_instances`; a file system without it) the reload's slow poll
//! still notices.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::io::unix::AsyncFd;

/// The events that can mean the file at a path in the directory changed.
fn interesting() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

/// `AsyncFd` wants `AsRawFd`; nix's `Inotify` offers `AsFd`.
struct Fd(Inotify);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// An inotify watch on one directory.
pub struct DirWatch {
    fd: AsyncFd<Fd>,
    dir: PathBuf,
    wd: Option<WatchDescriptor>,
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatch")
            .field("dir", &self.dir)
            .field("watching", &self.wd.is_some())
            .finish()
    }
}

impl DirWatch {
    /// Watches `dir` (the directory that holds the configuration file's path). Needs a tokio
    /// runtime.
    pub fn new(dir: &Path) -> io::Result<Self> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        let wd = inotify.add_watch(dir, interesting())?;
        // SAFETY: `Fd` owns the inotify instance's `OwnedFd`, which stays open, and is the one
        // `as_raw_fd` returns, until the `AsyncFd` (the only owner of `Fd`) is dropped.
        let fd = unsafe { AsyncFd::register(Fd(inotify)) }.map_err(|e| e.into_parts().1)?;
        Ok(DirWatch {
            fd,
            dir: dir.to_path_buf(),
            wd: Some(wd),
        })
    }

    /// The watched directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the directory is still watched (it may have been removed or replaced, e.g. a
    /// volume mounted over it; [`DirWatch::rewatch`] tries again).
    pub fn is_watching(&self) -> bool {
        self.wd.is_some()
    }

    /// Watches the directory again after it went away, when it is back.
    pub fn rewatch(&mut self) -> io::Result<()> {
        if self.wd.is_none() {
            self.wd = Some(self.fd.get_ref().0.add_watch(&self.dir, interesting())?);
        }
        Ok(())
    }

    /// Waits for the next batch of events in the directory; returns the names they concern
    /// (for the log). Returns an empty list when the directory itself went away.
    pub async fn changed(&mut self) -> io::Result<Vec<String>> {
        loop {
            let mut ready = self.fd.readable().await?;
            match ready.try_io(|fd| fd.get_ref().0.read_events().map_err(io::Error::from)) {
                Ok(Ok(events)) => {
                    let mut names = Vec::new();
                    for e in &events {
                        // IN_IGNORED: the kernel dropped the watch (directory removed, file
                        // system unmounted).
                        if e.mask.intersects(
                            AddWatchFlags::IN_IGNORED
                                | AddWatchFlags::IN_DELETE_SELF
                                | AddWatchFlags::IN_MOVE_SELF,
                        ) {
                            self.wd = None;
                        }
                        if let Some(n) = &e.name {
                            names.push(n.to_string_lossy().into_owned());
                        }
                    }
                    if !events.is_empty() {
                        return Ok(names);
                    }
                }
                Ok(Err(e)) => return Err(e),
                // Spurious readiness: wait again.
                Err(_would_block) => continue,
            }
        }
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
