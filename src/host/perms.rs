//! File permissions: nri-align refuses a config file or state dir that anyone may write, since
//! whoever writes them decides who gets which CPU and GPU.

use std::os::unix::fs::PermissionsExt;
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
    #[error("{0} is world-writable; fix its mode (chmod o-w) before running nri-align")]
    WorldWritable(PathBuf),
}

/// Refuses a path anyone may write (least privilege: the state and config decide who gets which
/// CPU and GPU).
pub fn refuse_world_writable(path: &Path) -> Result<(), PermissionError> {
    let md = std::fs::metadata(path).map_err(|source| PermissionError::Stat {
        path: path.to_path_buf(),
        source,
    })?;
    // A sticky dir (like /tmp) still lets anyone create files; refuse it too.
    if md.permissions().mode() & 0o002 != 0 {
        return Err(PermissionError::WorldWritable(path.to_path_buf()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn world_writable_files_and_missing_paths_are_refused() {
        let t = tempfile::tempdir().expect("tmp");
        let f = t.path().join("c.yaml");
        std::fs::write(&f, "").expect("write");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(refuse_world_writable(&f).is_ok());
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o646)).expect("chmod");
        let err = refuse_world_writable(&f).expect_err("refused").to_string();
        assert!(err.contains("world-writable"), "{err}");
        let missing = refuse_world_writable(&t.path().join("nope")).expect_err("missing");
        assert!(missing.to_string().starts_with("stat "), "{missing}");
    }
}
