//! Reading the configuration file without letting it wedge the daemon.
//!
//! The file is named by the operator, but what sits at that path is not guaranteed to be a
//! small regular file: a FIFO blocks `open` until a writer comes, `/dev/zero` never ends, a
//! hung network mount blocks any system call on it. Read on an async worker, each of these
//! stopped every NRI call and SIGTERM. So the file is opened without waiting (`O_NONBLOCK`),
//! refused unless it is a regular file, read up to [`MAX_CONFIG_BYTES`], and a reload reads it
//! on a thread of its own with a time limit ([`FileReader`]): a read that hangs in the kernel
//! leaves that one thread behind, never an async worker, and no second thread is started for
//! the same path while it hangs.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::ConfigError;

/// The largest configuration file read (the shipped one with every comment is ~3 KiB).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// How long a reload waits for the file before giving up on it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads `path` on the calling thread: refused when others than root and us may change it
/// (group- or world-writable, or another user's), when it is not a
/// regular file (FIFO, device, socket, directory), or when it is larger than
/// [`MAX_CONFIG_BYTES`]. Symbolic links are followed (a mounted ConfigMap's file is one).
pub fn read_config_file(path: &Path) -> Result<Vec<u8>, ConfigError> {
    read_regular(path, true)
}

/// [`read_config_file`] for an offline lint (`nri-align config check`): any owner and mode,
/// since the file checked is a draft in someone's checkout, not what the daemon will read; the
/// daemon's read refuses a file others may change, and says so, when it is deployed.
pub fn read_config_file_to_lint(path: &Path) -> Result<Vec<u8>, ConfigError> {
    read_regular(path, false)
}

fn read_regular(path: &Path, check_owner: bool) -> Result<Vec<u8>, ConfigError> {
    let read_err = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    // What it is first (stat opens nothing): "it is a FIFO" says more than "world-writable"
    // about /dev/null or a pipe, and a device is never opened at all.
    let kind = std::fs::metadata(path).map_err(read_err)?.file_type();
    if !kind.is_file() {
        return Err(ConfigError::NotRegular {
            path: path.to_path_buf(),
            kind: describe(kind),
        });
    }
    if check_owner {
        crate::host::perms::refuse_untrusted(path).map_err(|e| ConfigError::Invalid {
            origin: path.display().to_string(),
            message: e.to_string(),
        })?;
    }
    // O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer;
    // it changes nothing for a regular file. O_NOCTTY: a terminal never becomes ours.
    let flags = nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOCTTY;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
        .map_err(read_err)?;
    // Checked again on what was opened: the path may have been swapped in between.
    let kind = file.metadata().map_err(read_err)?.file_type();
    if !kind.is_file() {
        return Err(ConfigError::NotRegular {
            path: path.to_path_buf(),
            kind: describe(kind),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_CONFIG_BYTES,
        });
    }
    Ok(bytes)
}

fn describe(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Reads configuration files on a thread of its own, at most one at a time: while a read
/// hangs (a dead NFS server), later reads fail at once instead of piling up threads.
#[derive(Debug, Clone)]
pub struct FileReader {
    timeout: Duration,
    /// When the read in flight started, if one is.
    in_flight: Arc<Mutex<Option<Instant>>>,
    /// What runs on the thread: [`read_config_file`], or a stand-in that hangs in tests.
    read: fn(&Path) -> Result<Vec<u8>, ConfigError>,
}

impl Default for FileReader {
    fn default() -> Self {
        Self::new(READ_TIMEOUT)
    }
}

impl FileReader {
    /// A reader that waits at most `timeout` per read.
    pub fn new(timeout: Duration) -> Self {
        FileReader {
            timeout,
            in_flight: Arc::default(),
            read: read_config_file,
        }
    }

    /// [`read_config_file`] of `path` off the async workers, within the time limit.
    pub async fn read(&self, path: &Path) -> Result<Vec<u8>, ConfigError> {
        self.read_with(path, self.read).await
    }

    /// `read(path)` off the async workers, within the time limit: any reading of the file
    /// system at `path` (a file, or a ConfigMap directory's listing and chosen key).
    pub async fn read_with<T, F>(&self, path: &Path, read: F) -> Result<T, ConfigError>
    where
        T: Send + 'static,
        F: FnOnce(&Path) -> Result<T, ConfigError> + Send + 'static,
    {
        {
            let mut busy = lock(&self.in_flight);
            if let Some(since) = *busy {
                return Err(ConfigError::ReadHung {
                    path: path.to_path_buf(),
                    since: since.elapsed(),
                });
            }
            *busy = Some(Instant::now());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let owned: PathBuf = path.to_path_buf();
        let in_flight = self.in_flight.clone();
        // A plain thread, not spawn_blocking: the runtime waits for its blocking pool when it
        // shuts down, so a read stuck in the kernel would keep SIGTERM from ending the process.
        let spawned = std::thread::Builder::new()
            .name("config-read".into())
            .spawn(move || {
                let result = read(&owned);
                *lock(&in_flight) = None;
                let _ = tx.send(result);
            });
        if let Err(source) = spawned {
            *lock(&self.in_flight) = None;
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(result)) => result,
            // The thread ended without an answer (it panicked): report it as a read error.
            Ok(Err(_)) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                source: std::io::Error::other("the reading thread failed"),
            }),
            Err(_) => Err(ConfigError::ReadTimeout {
                path: path.to_path_buf(),
                after: self.timeout,
            }),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;
