//! Persisted decisions: one record per container, kept in an append-only log under the state
//! dir (`store.rs`, format in `journal.rs`), so persisting a decision writes that decision's
//! record and nothing else, whatever the number of containers. The engine keeps the records
//! in a [`Records`] table that knows which ones changed since the last write.
//!
//! There is deliberately no fsync unless the configuration asks for it (`state_fsync`): the
//! log only has to outlive the plugin and runtime processes, and the page cache does. Only a
//! host crash can lose a write, and a host crash also ends every container the log describes;
//! a tail torn by power loss is dropped and Synchronize brings back what it held. An fsync
//! cost 1.4-8 ms per decision on this project's VM disk, inside the runtime's CreateContainer
//! call (docs/performance.md), for no gain in what the state protects.
//!
//! The state dir is checked and locked by `host::files`: nothing in it is opened through a
//! symlink, temporary files get names nobody can guess, and a second daemon on the same dir
//! fails at start.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::host::files::FileError;
use crate::host::perms::PermissionError;
use crate::placement::resize::Holding;
use crate::placement::Assignment;
use crate::topology::CpuSet;

mod file_groups;
mod journal;
mod records;
mod store;

pub use records::{GroupKey, RecordMut, Records, SharedGroup};
pub use store::{Outage, StateStore, LEGACY_FILE, RETRY_AFTER, RETRY_AFTER_MAX, STATE_FILE};

/// Version of the 0.1.0 document layout (`state.json`), read to migrate it.
pub const STATE_VERSION: u32 = 1;

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
    /// The state dir could be changed by others, or could not be checked.
    #[error(transparent)]
    Permissions(#[from] PermissionError),
    /// The state dir or a file in it could not be used safely (symlink, lock...).
    #[error(transparent)]
    File(#[from] FileError),
    /// Not written: an earlier write failed `since` ago and the store waits before it tries
    /// again ([`RETRY_AFTER`]); the try rewrites every live record, these changes included.
    #[error(
        "not written: state writes have failed for {}s, the next try (every {}s) rewrites \
         every record",
        .since.as_secs(),
        RETRY_AFTER.as_secs()
    )]
    Deferred {
        /// Time since the first failure.
        since: std::time::Duration,
    },
    /// Serialising failed (should not happen with these types).
    #[error("cannot encode state: {0}")]
    Encode(String),
    /// The state dir could not be created or opened yet ([`StateStore::open_or_wait`]).
    #[error("state dir {} is not open", .0.display())]
    NotOpen(PathBuf),
}

impl StateError {
    /// Whether the failure is the state dir's filesystem's condition, one that passes without
    /// changing nri-align's configuration: read-only (EROFS: ext4 after an I/O error, a
    /// read-only mount), full (ENOSPC) or over quota (EDQUOT), an I/O error (EIO). The daemon
    /// runs on with its decisions in memory and tries again. Everything else (not a
    /// directory, a symlink, permissions or ownership refused, EACCES or EPERM, another
    /// daemon's lock) is a state dir set up wrong: it stops the daemon at start with the
    /// reason, as it always did (docs/failure-behaviour.md).
    pub fn is_outage(&self) -> bool {
        let source = match self {
            StateError::Io { source, .. } | StateError::File(FileError::Io { source, .. }) => {
                source
            }
            StateError::NotOpen(_) => return true,
            _ => return false,
        };
        use nix::libc::{EDQUOT, EIO, ENOSPC, EROFS};
        source
            .raw_os_error()
            .is_some_and(|errno| [EROFS, ENOSPC, EDQUOT, EIO].contains(&errno))
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
    /// once the pool moved). A shared record the log keeps as a follower of its group's pool
    /// is written without it (the group's line says where the whole group runs).
    #[serde(
        default,
        serialize_with = "crate::topology::idset::serialize_as_list",
        skip_serializing_if = "CpuSet::is_empty"
    )]
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
    /// Made from what the container had when nri-align found it running (Synchronize, the CRI
    /// listing, PostStartContainer of a container created without nri-align's adjustment),
    /// not a decision for its request: a shared one is placed anew when its container
    /// restarts. Absent (false) in the log unless set, so logs stay readable both ways.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub found_running: bool,
    /// The CDI names the container's devices were resolved from (`vendor/class=name`; a DRA
    /// driver's per-claim spec names one claim's devices): two containers of one pod that
    /// name the same device share it (`enforce/engine/claims.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cdi_names: Vec<String>,
    /// The DRA claim devices the kubelet's PodResources answer listed for the container
    /// (claim, driver, pool, device and CDI names): which ResourceClaim and which device of
    /// which driver's pool the CDI names above stand for, for `placements` and support.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dra_claims: Vec<crate::enforce::container::KubeletClaimDevice>,
    /// Claim devices other than GPUs (NIC names, generic devices' PCI bus ids) that the
    /// container uses through a CDI name a running sibling of its pod holds them by: aligned
    /// to, not held (`enforce/engine/claims.rs`). Shared GPUs are in the assignment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_devices: Vec<String>,
    /// The record of a pod's CPU budget (`pod_budgets`), not of a container: every CPU of the
    /// budget, oldest first (a shrink gives back the newest). Its assignment holds the part no
    /// container of the pod holds exclusively, the pod's private pool, and the pod's memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_budget: Option<Vec<u32>>,
    /// A container placed in its pod's budget: an exclusive one's CPUs go back to the pod's
    /// pool when it goes, a shared one follows the pod's pool, never the node's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_pod_budget: bool,
    /// The assignment's memory policy was left out of the adjustment: the runtime's NRI
    /// cannot carry one (`enforce/engine/mempolicy.rs`), so the container runs without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mempolicy_left_out: bool,
    /// Its memory nodes were moved after it started (the plugin that owns `cpuset.mems` moved
    /// them, `enforce/engine/others_mems.rs`): what it touched before may still be on the
    /// old ones, which `verify` names as a reason for remote memory.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub memory_nodes_moved: bool,
    /// The exclusive CPUs the container was admitted with, once an in-place resize changed
    /// its CPUs (`placement::resize`): a shrink never gives them back unless `resize_shrink`
    /// is `any`. Empty (and absent from the log) until then, and in logs written before
    /// resizes kept CPUs: the CPUs it holds are those it was admitted with.
    #[serde(
        default,
        serialize_with = "crate::topology::idset::serialize_as_list",
        skip_serializing_if = "CpuSet::is_empty"
    )]
    pub admitted_cpus: CpuSet,
    /// The CPUs in-place grows added since admission, oldest first: a shrink gives back the
    /// newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added_cpus: Vec<u32>,
    /// The CFS quota the kubelet asked for (`cpu.quota` of the container's resources at its
    /// creation or last update; `None`: none given or not known). The runtime's spec no
    /// longer says it once nri-align disabled the quota of exclusive CPUs, so it is kept here
    /// to give it back when the container turns shared or the quota is kept again
    /// (`enforce/engine/quota.rs`), across restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_cpu_quota: Option<i64>,
}

/// How the reason of a record made from a running container begins. Versions before the
/// [`Record::found_running`] flag knew such a record by this text alone; it is kept so their
/// records are still recognised at load ([`Record::upgrade`]) and so an older version reading
/// a newer log still recognises them.
pub const RECORDED_AS_RUNNING: &str = "recorded as running after a restart";

impl Record {
    /// What the container holds for an in-place resize: its CPUs, those it was admitted with
    /// and those added since.
    pub fn holding(&self) -> Holding {
        if self.admitted_cpus.is_empty() {
            return Holding::admitted_with(&self.assignment.cpus);
        }
        Holding {
            cpus: self.assignment.cpus.clone(),
            admitted: self.admitted_cpus.clone(),
            added: self.added_cpus.clone(),
        }
    }

    /// Remembers `h` after an in-place resize to `h.cpus`.
    pub fn set_holding(&mut self, h: Holding) {
        self.admitted_cpus = h.admitted;
        self.added_cpus = h.added;
    }

    /// Forgets what in-place resizes added: a new decision's CPUs are all admitted.
    pub fn readmitted(mut self) -> Self {
        self.admitted_cpus = CpuSet::new();
        self.added_cpus = Vec::new();
        self
    }

    /// Upgrade path for records written before [`Record::found_running`] existed: a record
    /// whose reason says it was recorded as running gets the flag. The only place the reason
    /// text is read; every later decision reads the flag. Applied to every record loaded
    /// (`StateStore::load`).
    pub fn upgrade(&mut self) {
        if self.predates_found_running() {
            self.found_running = true;
        }
    }

    /// Whether [`Record::upgrade`] would set the flag.
    pub fn predates_found_running(&self) -> bool {
        !self.found_running && self.assignment.reason.starts_with(RECORDED_AS_RUNNING)
    }
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

/// All records, as the 0.1.0 document had them and `verify` reads them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateDoc {
    /// Layout version (of the 0.1.0 document; the log has its own header).
    pub version: u32,
    /// Records by container id.
    pub containers: Records,
}

impl Default for StateDoc {
    fn default() -> Self {
        Self {
            version: STATE_VERSION,
            containers: Records::new(),
        }
    }
}

/// What loading found.
// Returned once per start-up and consumed at once, never stored: boxing the document would
// only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Loaded {
    /// No state: a fresh start.
    Fresh,
    /// The records.
    Doc(StateDoc),
    /// A state that could not be used; the caller rebuilds from Synchronize.
    Corrupt(String),
}

#[cfg(test)]
mod tests;
