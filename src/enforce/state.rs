//! Persisted decisions: a versioned JSON document under the state dir, written atomically
//! (whole temp file in the same dir, then rename) so a crash of the plugin leaves either the old
//! or the new document, never half of one.
//!
//! There is deliberately no fsync: the document only has to outlive the plugin and runtime
//! processes, and the page cache does. Only a host crash can lose a write, and a host crash
//! also ends every container the document describes; a file torn by power loss reads as
//! corrupt and is rebuilt from Synchronize. An fsync of file and directory cost 1.4-8 ms per
//! decision on this project's VM disk, inside the runtime's CreateContainer call
//! (docs/performance.md), for no gain in what the state protects.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::perms::{refuse_world_writable, PermissionError};
use crate::placement::Assignment;
use crate::topology::CpuSet;

/// Version of the document layout; bumped on incompatible changes.
pub const STATE_VERSION: u32 = 1;
/// File name under the state dir.
pub const STATE_FILE: &str = "state.json";

/// State I/O and permission failures.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// An I/O call failed on `path`.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The state dir is writable by anyone, or could not be checked.
    #[error(transparent)]
    Permissions(#[from] PermissionError),
    /// Serialising failed (should not happen with these types).
    #[error("cannot encode state: {0}")]
    Encode(String),
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StateError + 'a {
    move |source| StateError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// One container as recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The decision.
    pub assignment: Assignment,
    /// Pod sandbox id (for pod removal).
    #[serde(default)]
    pub pod_sandbox_id: String,
    /// Pod namespace (for exempt checks and metrics).
    #[serde(default)]
    pub namespace: String,
    /// `linux.cgroups_path` as the runtime gave it, for `verify`.
    #[serde(default)]
    pub cgroups_path: String,
    /// The cpus last sent to the runtime (differs from `assignment.cpus` for shared containers
    /// once the pool moved).
    pub applied_cpus: CpuSet,
    /// Device nodes (GPU, RDMA) the container should see, for `verify`.
    #[serde(default)]
    pub devices: Vec<String>,
    /// The resources the decision was made for, so a CRI update re-places only on a change.
    #[serde(default)]
    pub resources: ResourceSummary,
    /// The container has stopped (StopContainer) but is not removed: it keeps what it holds,
    /// as the kubelet keeps a container's CPUs until RemoveContainer; a restart of it (same pod
    /// UID and name) takes the decision over, and another container of the pod may reuse its
    /// CPUs (a finished init container's).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
    /// A container of an exempt namespace: kept on the shared pool (or the reserved CPUs),
    /// never aligned.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exempt: bool,
}

/// The resource numbers of a request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceSummary {
    /// CPU request (millicores).
    pub cpu_request_milli: u64,
    /// CPU limit (millicores).
    pub cpu_limit_milli: Option<u64>,
    /// Memory limit (bytes).
    pub memory_limit_bytes: Option<u64>,
}

impl ResourceSummary {
    /// The numbers of `r`.
    pub fn of(r: &crate::placement::Request) -> Self {
        Self {
            cpu_request_milli: r.cpu_request_milli,
            cpu_limit_milli: r.cpu_limit_milli,
            memory_limit_bytes: r.memory_limit_bytes,
        }
    }
}

/// The whole document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateDoc {
    /// Layout version.
    pub version: u32,
    /// Records by container id.
    pub containers: BTreeMap<String, Record>,
}

impl Default for StateDoc {
    fn default() -> Self {
        Self {
            version: STATE_VERSION,
            containers: BTreeMap::new(),
        }
    }
}

/// What loading found.
#[derive(Debug)]
pub enum Loaded {
    /// No file: a fresh start.
    Fresh,
    /// A valid document.
    Doc(StateDoc),
    /// A file that could not be used; the caller rebuilds from Synchronize.
    Corrupt(String),
}

/// The state file under one directory.
#[derive(Debug, Clone)]
pub struct StateStore {
    dir: PathBuf,
}

impl StateStore {
    /// Opens (creating with mode 0700 when missing) the state dir; refuses a world-writable one.
    pub fn open(dir: &Path) -> Result<StateStore, StateError> {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(io("create", dir))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io("chmod", dir))?;
        }
        refuse_world_writable(dir)?;
        Ok(StateStore {
            dir: dir.to_path_buf(),
        })
    }

    /// Path of the document.
    pub fn path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// Loads the document; a missing file is fresh, an unreadable one is corrupt (with why).
    pub fn load(&self) -> Loaded {
        let path = self.path();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::Fresh,
            Err(e) => return Loaded::Corrupt(format!("cannot read {}: {e}", path.display())),
        };
        match serde_json::from_str::<StateDoc>(&text) {
            Ok(doc) if doc.version == STATE_VERSION => Loaded::Doc(doc),
            Ok(doc) => Loaded::Corrupt(format!(
                "{} has version {}, this build reads {STATE_VERSION}",
                path.display(),
                doc.version
            )),
            Err(e) => Loaded::Corrupt(format!("{} is not valid state: {e}", path.display())),
        }
    }

    /// Writes the document atomically.
    pub fn save(&self, doc: &StateDoc) -> Result<(), StateError> {
        let bytes =
            serde_json::to_vec_pretty(doc).map_err(|e| StateError::Encode(e.to_string()))?;
        let tmp = self
            .dir
            .join(format!(".{STATE_FILE}.{}.tmp", std::process::id()));
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io("create", &tmp))?;
        f.write_all(&bytes).map_err(io("write", &tmp))?;
        drop(f);
        // No fsync: see the module comment.
        let path = self.path();
        std::fs::rename(&tmp, &path).map_err(io("rename", &path))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, cpus: &str) -> Record {
        let cpus: CpuSet = cpus.parse().expect("set");
        Record {
            assignment: Assignment {
                container_id: id.into(),
                cpus: cpus.clone(),
                exclusive: true,
                gpus: vec!["0000:1b:00.0".into()],
                ..Default::default()
            },
            pod_sandbox_id: "pod".into(),
            namespace: "ns".into(),
            cgroups_path: format!("/k8s.io/{id}"),
            applied_cpus: cpus,
            devices: vec!["/dev/nvidia0".into()],
            resources: ResourceSummary::default(),
            ..Record::default()
        }
    }

    #[test]
    fn save_then_load_round_trips_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = StateStore::open(&dir.path().join("state")).expect("open");
        assert!(matches!(store.load(), Loaded::Fresh));
        let mut doc = StateDoc::default();
        doc.containers.insert("a".into(), record("a", "2-3"));
        store.save(&doc).expect("save");
        doc.containers.insert("b".into(), record("b", "4"));
        store.save(&doc).expect("save again");
        match store.load() {
            Loaded::Doc(d) => assert_eq!(d, doc),
            other => panic!("expected a document, got {other:?}"),
        }
        let names: Vec<_> = std::fs::read_dir(dir.path().join("state"))
            .expect("ls")
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(STATE_FILE)]);
        let mode = std::fs::metadata(store.path())
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn corrupt_and_future_files_are_reported_not_fatal() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = StateStore::open(dir.path()).expect("open");
        std::fs::write(store.path(), "{\"version\": 1, \"contai").expect("write");
        assert!(matches!(store.load(), Loaded::Corrupt(m) if m.contains("not valid state")));
        std::fs::write(store.path(), "{\"version\": 9, \"containers\": {}}").expect("write");
        assert!(matches!(store.load(), Loaded::Corrupt(m) if m.contains("version 9")));
    }

    #[test]
    fn world_writable_dir_is_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        let err = StateStore::open(dir.path()).expect_err("refused");
        assert!(err.to_string().contains("world-writable"), "{err}");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        assert!(StateStore::open(dir.path()).is_ok());
    }
}
