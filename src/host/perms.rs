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
mod tests {
    use super::*;

    #[test]
    fn world_and_group_writable_files_and_missing_paths_are_refused() {
        let t = tempfile::tempdir().expect("tmp");
        let f = t.path().join("c.yaml");
        std::fs::write(&f, "").expect("write");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(refuse_untrusted(&f).is_ok());
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o646)).expect("chmod");
        let err = refuse_untrusted(&f).expect_err("refused").to_string();
        assert!(err.contains("world-writable"), "{err}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o664)).expect("chmod");
        let err = refuse_untrusted(&f).expect_err("refused").to_string();
        assert!(err.contains("group-writable (mode 0664)"), "{err}");
        let missing = refuse_untrusted(&t.path().join("nope")).expect_err("missing");
        assert!(missing.to_string().starts_with("stat "), "{missing}");
    }

    #[test]
    fn a_file_of_another_user_is_refused() {
        let euid = nix::unistd::geteuid().as_raw();
        let other = if euid == 4242 { 4243 } else { 4242 };
        let err = check_metadata(Path::new("/x"), 0o600, other).expect_err("refused");
        assert!(
            err.to_string().contains(&format!("owned by uid {other}")),
            "{err}"
        );
        assert!(check_metadata(Path::new("/x"), 0o600, euid).is_ok());
        assert!(
            check_metadata(Path::new("/x"), 0o600, 0).is_ok(),
            "root is trusted"
        );
    }

    #[test]
    fn a_chowned_file_is_refused_when_running_as_root() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIP a_chowned_file_is_refused_when_running_as_root: needs root to chown");
            return;
        }
        let t = tempfile::tempdir().expect("tmp");
        let f = t.path().join("c.yaml");
        std::fs::write(&f, "").expect("write");
        std::os::unix::fs::chown(&f, Some(4242), None).expect("chown");
        let err = refuse_untrusted(&f).expect_err("refused").to_string();
        assert!(err.contains("owned by uid 4242"), "{err}");
    }
}
