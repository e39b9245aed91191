//! File permissions: nri-align refuses a config file or state dir that someone other than
//! root or its own user could change (group- or world-writable, or owned by another user),
//! since whoever writes them decides who gets which CPU and GPU.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a path was refused.
#[derive(Debug, thiserror::Error)]
pub enum PermissionError {
    /// Its metadata could not be read.
    #[error("stat {path}: {source}")]
    Stat {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Anyone could rewrite it: refuse.
    #[error("{0} is world-writable; fix its mode (chmod go-w) before running nri-align")]
    WorldWritable(PathBuf),
    /// Its group could rewrite it: refuse.
    #[error(
        "{path} is group-writable (mode {mode:04o}); fix its mode (chmod g-w) before running \
         nri-align"
    )]
    GroupWritable {
        /// Path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Another user owns it and could rewrite it: refuse.
    #[error(
        "{path} is owned by uid {owner}, not by root or the user nri-align runs as (uid \
         {euid}); chown it before running nri-align"
    )]
    ForeignOwner {
        /// Path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The user nri-align runs as.
        euid: u32,
    },
}

/// Refuses a path that anyone but root and this process's user may change: group- or
/// world-writable (a sticky dir like /tmp still lets anyone create files in it), or owned by
/// another user. Follows symlinks (a Kubernetes ConfigMap file is one); what it names is
/// checked.
pub fn refuse_untrusted(path: &Path) -> Result<(), PermissionError> {
    let md = std::fs::metadata(path).map_err(|source| PermissionError::Stat {
        path: path.to_path_buf(),
        source,
    })?;
    check_metadata(path, md.permissions().mode(), md.uid())
}

/// The same check as [`refuse_untrusted`] on a mode and owner already read (from an open
/// file descriptor, so what is checked is what is used).
pub fn check_metadata(path: &Path, mode: u32, owner: u32) -> Result<(), PermissionError> {
    if mode & 0o002 != 0 {
        return Err(PermissionError::WorldWritable(path.to_path_buf()));
    }
    if mode & 0o020 != 0 {
        return Err(PermissionError::GroupWritable {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    let euid = nix::unistd::geteuid().as_raw();
    if owner != 0 && owner != euid {
        return Err(PermissionError::ForeignOwner {
            path: path.to_path_buf(),
            owner,
            euid,
        });
    }
    Ok(())
}

#[cfg(test)]
#[path = "perms_tests.rs"]
mod tests;
