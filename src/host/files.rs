//! Files nri-align owns: a directory held open by descriptor, with every file in it opened
//! relative to that descriptor, never through a symlink, and new files created under names
//! nobody can guess and only if nothing has that name yet. The root daemon writes here, so a
//! symlink or file planted in the directory must never make it write anywhere else.
//!
//! The directory itself is checked on the descriptor that is then used (no window between
//! the check and the use): owned by root or this process's user, not group- or
//! world-writable. An exclusive `flock` on it keeps a second daemon off the same directory.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, Flock, FlockArg, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use nix::unistd::unlinkat;

use super::perms::{check_metadata, PermissionError};

/// Why a directory or a file in it could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// An I/O call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The directory or a file could be changed by someone else.
    #[error(transparent)]
    Permissions(#[from] PermissionError),
    /// The directory is locked by another process.
    #[error(
        "{0} is in use by another process (another nri-align on the same state dir?): stop \
         it, or give each nri-align its own --state-dir"
    )]
    Locked(PathBuf),
    /// Something other than a regular file has the name.
    #[error("{path} is not a regular file ({what}); remove it")]
    NotAFile {
        /// Path.
        path: PathBuf,
        /// What it is.
        what: &'static str,
    },
}

fn io(op: &'static str, path: &Path, e: impl Into<std::io::Error>) -> FileError {
    FileError::Io {
        op,
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// A directory held by descriptor.
#[derive(Debug)]
pub struct OwnedDir {
    path: PathBuf,
    fd: OwnedFd,
    /// The exclusive lock, held as long as the directory is (None: opened to read only).
    _lock: Option<Flock<OwnedFd>>,
}

impl OwnedDir {
    /// Opens `path` for a writer: creates it (mode 0700) when missing, refuses it when someone
    /// else could change it, and locks it exclusively so a second writer fails here.
    pub fn open_exclusive(path: &Path) -> Result<OwnedDir, FileError> {
        if !path.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(|e| io("create", path, e))?;
        }
        let fd = open_dir(path)?;
        let lock_fd = fd.try_clone().map_err(|e| io("dup", path, e))?;
        let lock = Flock::lock(lock_fd, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
            if e == Errno::EWOULDBLOCK {
                FileError::Locked(path.to_path_buf())
            } else {
                io("lock", path, e)
            }
        })?;
        Ok(OwnedDir {
            path: path.to_path_buf(),
            fd,
            _lock: Some(lock),
        })
    }

    /// Opens `path` to read only (no lock: a writer may be running), with the same checks.
    pub fn open_read_only(path: &Path) -> Result<OwnedDir, FileError> {
        let fd = open_dir(path)?;
        Ok(OwnedDir {
            path: path.to_path_buf(),
            fd,
            _lock: None,
        })
    }

    /// The directory's path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Path of `name` in it (for messages).
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Opens `name` to append, never through a symlink; `None` when it does not exist.
    pub fn open_append(&self, name: &str) -> Result<Option<File>, FileError> {
        let flags = OFlag::O_WRONLY
            | OFlag::O_APPEND
            | OFlag::O_NOFOLLOW
            | OFlag::O_CLOEXEC
            | OFlag::O_NONBLOCK;
        self.open_regular(name, flags)
    }

    /// Reads `name` whole, never through a symlink (nor from a FIFO or device); `None` when it
    /// does not exist.
    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>, FileError> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let Some(mut f) = self.open_regular(name, flags)? else {
            return Ok(None);
        };
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)
            .map_err(|e| io("read", &self.join(name), e))?;
        Ok(Some(buf))
    }

    /// Creates a new file (mode 0600) under a random name starting with `prefix`, failing
    /// rather than opening anything that already has that name (symlinks included); returns
    /// it and its name.
    pub fn create_temp(&self, prefix: &str) -> Result<(File, String), FileError> {
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mut last = Errno::EEXIST;
        for _ in 0..16 {
            let name = format!("{prefix}.{:016x}.tmp", random_u64());
            match openat(
                &self.fd,
                name.as_str(),
                flags,
                Mode::from_bits_truncate(0o600),
            ) {
                Ok(fd) => return Ok((File::from(fd), name)),
                Err(Errno::EEXIST) => last = Errno::EEXIST,
                Err(e) => return Err(io("create", &self.join(&name), e)),
            }
        }
        Err(io("create", &self.join(prefix), last))
    }

    /// Renames `from` to `to` inside the directory (replacing `to`, never following it).
    pub fn rename(&self, from: &str, to: &str) -> Result<(), FileError> {
        renameat(&self.fd, from, &self.fd, to).map_err(|e| io("rename", &self.join(to), e))
    }

    /// Removes `name`; a missing file is not an error.
    pub fn remove(&self, name: &str) -> Result<(), FileError> {
        match unlinkat(&self.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(io("remove", &self.join(name), e)),
        }
    }

    /// Names in the directory starting with `prefix`.
    pub fn names_with_prefix(&self, prefix: &str) -> Vec<String> {
        std::fs::read_dir(&self.path)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| n.starts_with(prefix))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Makes the directory entry changes (renames) durable.
    pub fn sync(&self) -> Result<(), FileError> {
        nix::unistd::fsync(&self.fd).map_err(|e| io("fsync", &self.path, e))
    }

    fn open_regular(&self, name: &str, flags: OFlag) -> Result<Option<File>, FileError> {
        let path = self.join(name);
        let fd = match openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP) => {
                return Err(FileError::NotAFile {
                    path,
                    what: "a symlink",
                })
            }
            Err(e) => return Err(io("open", &path, e)),
        };
        let st = fstat(&fd).map_err(|e| io("stat", &path, e))?;
        let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
        if kind != SFlag::S_IFREG {
            return Err(FileError::NotAFile {
                path,
                what: kind_name(kind),
            });
        }
        check_metadata(&path, st.st_mode, st.st_uid)?;
        let f = File::from(fd);
        if flags.contains(OFlag::O_NONBLOCK) {
            // Only to open safely (a FIFO would block the open); O_APPEND stays.
            let keep = flags & OFlag::O_APPEND;
            let _ = nix::fcntl::fcntl(f.as_fd(), nix::fcntl::FcntlArg::F_SETFL(keep));
        }
        Ok(Some(f))
    }
}

fn open_dir(path: &Path) -> Result<OwnedFd, FileError> {
    let fd = nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io("open", path, e))?;
    let st = fstat(&fd).map_err(|e| io("stat", path, e))?;
    check_metadata(path, st.st_mode, st.st_uid)?;
    Ok(fd)
}

fn kind_name(kind: SFlag) -> &'static str {
    if kind == SFlag::S_IFDIR {
        "a directory"
    } else if kind == SFlag::S_IFIFO {
        "a FIFO"
    } else if kind == SFlag::S_IFCHR || kind == SFlag::S_IFBLK {
        "a device"
    } else if kind == SFlag::S_IFSOCK {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// 64 random bits from the kernel, for names nobody can guess; the standard library's
/// per-process random hasher keys stand in when /dev/urandom cannot be read.
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    if File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_ne_bytes(b);
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;
