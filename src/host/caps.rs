//! Least privilege: once the daemon has what it needs, it gives up every capability.
//!
//! What the daemon does after start-up and why none of it needs a capability:
//! - talks NRI over a socket it already holds (or re-dials a root-owned socket as uid 0, which
//!   ordinary owner permissions allow);
//! - writes its state dir, which it created (owner 0700), and reads its config (owner);
//! - reads sysfs, `/dev` metadata and `/proc/PID/status` of other processes, all world-readable;
//! - writes no cgroup but a container's own `cpuset.cpus` when the runtime lost an update
//!   (`host/cgroup/`), a root-owned file that owner permissions let uid 0 write.
//!
//! So the default kept set is empty. Capabilities are per thread on Linux, so this must run
//! before the async runtime starts its worker threads (they inherit the reduced sets); the
//! bounding set is dropped too, and `no_new_privs` set, so nothing can be regained by exec.

use caps::{CapSet, Capability, CapsHashSet};

/// Capability changes that failed.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    /// A capset/prctl call failed.
    #[error("cannot {what}: {message}")]
    Caps {
        /// What was being changed.
        what: &'static str,
        /// The error.
        message: String,
    },
}

/// What was kept and dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivilegeReport {
    /// Capabilities still effective, sorted by name.
    pub kept: Vec<String>,
    /// Capabilities given up, sorted by name.
    pub dropped: Vec<String>,
    /// Whether the bounding set was reduced too (needs CAP_SETPCAP).
    pub bounding_dropped: bool,
}

fn caps_err(what: &'static str) -> impl FnOnce(caps::errors::CapsError) -> PrivilegeError {
    move |e| PrivilegeError::Caps {
        what,
        message: e.to_string(),
    }
}

fn names(set: &CapsHashSet) -> Vec<String> {
    let mut v: Vec<String> = set.iter().map(|c| c.to_string()).collect();
    v.sort();
    v
}

/// Drops every capability of the calling thread except `keep` (those the thread has).
pub fn drop_capabilities(keep: &[Capability]) -> Result<PrivilegeReport, PrivilegeError> {
    let permitted = caps::read(None, CapSet::Permitted).map_err(caps_err("read permitted"))?;
    let keep: CapsHashSet = keep
        .iter()
        .copied()
        .filter(|c| permitted.contains(c))
        .collect();

    nix::sys::prctl::set_no_new_privs().map_err(|e| PrivilegeError::Caps {
        what: "set no_new_privs",
        message: e.to_string(),
    })?;

    // The bounding set can only be reduced while CAP_SETPCAP is effective, so it goes first.
    let can_setpcap =
        caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false);
    if can_setpcap {
        let bounding = caps::read(None, CapSet::Bounding).map_err(caps_err("read bounding"))?;
        for cap in bounding.difference(&keep) {
            caps::drop(None, CapSet::Bounding, *cap).map_err(caps_err("drop bounding"))?;
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(caps_err("clear ambient"))?;
    // Effective must stay a subset of permitted at every step: shrink it first.
    caps::set(None, CapSet::Effective, &keep).map_err(caps_err("set effective"))?;
    caps::set(None, CapSet::Inheritable, &keep).map_err(caps_err("set inheritable"))?;
    caps::set(None, CapSet::Permitted, &keep).map_err(caps_err("set permitted"))?;

    let effective = caps::read(None, CapSet::Effective).map_err(caps_err("read effective"))?;
    let dropped: CapsHashSet = permitted.difference(&effective).copied().collect();
    Ok(PrivilegeReport {
        kept: names(&effective),
        dropped: names(&dropped),
        bounding_dropped: can_setpcap,
    })
}

#[cfg(test)]
#[path = "caps_tests.rs"]
mod tests;
