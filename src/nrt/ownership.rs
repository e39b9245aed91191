//! Whose object is it? The node's NodeResourceTopology has one name, the node's, and other
//! producers use it too (NFD's nfd-topology-updater). nri-align never refuses or widens what
//! it does not own, so before replacing anything the publisher decides here whether the
//! server's object is its own:
//!
//! - **Foreign**: the object lacks `app.kubernetes.io/managed-by: nri-align`. Another producer
//!   made it (NFD creates it without labels) or it was left behind. It is left alone unless
//!   `nrt.take_over_foreign` is set, and looked at again at every resync, so that once it is
//!   deleted nri-align creates its own.
//! - **Contested**: the object carries the label, but another field manager keeps rewriting
//!   the zones, attributes or policies nri-align published. NFD does exactly that to an
//!   object it finds: v0.19 reads it and updates it with its metadata (labels included) kept,
//!   v0.20 server-side applies with `force`; either way the label stays and only the content
//!   changes, at every `--sleep-interval` (60 s by default). Replacing it back every resync
//!   would flap for ever, so after [`REWRITES_TO_CONTEST`] rewrites by the same manager, each
//!   within [`window`] of the previous one, the publisher stops replacing it. A single hand
//!   edit (or two) is still repaired at the next resync.
//!
//! Who rewrote the content comes from `metadata.managedFields`, as the API server records it
//! (checked against the real server, `tests/daemon/nrt_apiserver.rs`): one entry per manager and
//! operation; `zones`, `attributes` and `topologyPolicies` are atomic lists, so the manager
//! that last changed one owns it whole (`"f:zones": {}`); an entry's `time` (whole seconds)
//! moves only when that manager changed a value, and a write without a field manager is
//! recorded under the client's user-agent up to the first `/` (client-go: the binary's name,
//! `nfd-topology-updater`).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::builder::{LABEL_MANAGED_BY, MANAGED_BY};
use super::object::NodeResourceTopology;

/// Field manager recorded in managedFields: the publisher applies under it, and the entries
/// under it are what this module counts as nri-align's own.
pub const FIELD_MANAGER: &str = "nri-align";

/// Rewrites of nri-align's content by the same other field manager that make the object
/// contested. One is a hand edit; two can be an edit corrected by hand; a producer on a
/// timer reaches three within minutes.
pub const REWRITES_TO_CONTEST: u32 = 3;

/// The top-level fields of the object whose content nri-align publishes (managedFields keys).
const CONTENT_FIELDS: [&str; 3] = ["f:zones", "f:attributes", "f:topologyPolicies"];

/// Longest gap between two rewrites of the same chain: the longer of 30 minutes (NFD's
/// `--sleep-interval` is 60 s by default; ten times that still counts) and three resyncs
/// (rewrites are only seen at resyncs).
pub fn window(resync: Duration) -> Duration {
    (resync * 3).max(Duration::from_secs(30 * 60))
}

/// Why the publisher leaves the node's object alone: the state its status and metrics report,
/// and the message it logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotOwned {
    /// The object does not carry nri-align's label.
    #[error(
        "NodeResourceTopology {name} is not nri-align's: {}; field managers: {}. nri-align \
         leaves it alone (it never replaces an object another producer made) and looks again \
         at every resync. To publish from nri-align: stop the other producer on this node \
         (NFD's nfd-topology-updater, for one) and delete the object \
         (kubectl delete noderesourcetopology {name}), nri-align then creates its own at the \
         next resync; or set nrt.take_over_foreign: true to replace it",
        label_found(.managed_by),
        list_or_none(.managers)
    )]
    Foreign {
        /// The object's name.
        name: String,
        /// Its `app.kubernetes.io/managed-by` value, if any.
        managed_by: Option<String>,
        /// Its field managers (`manager (Operation)`), from `metadata.managedFields`.
        managers: Vec<String>,
    },
    /// Another field manager keeps rewriting nri-align's content.
    #[error(
        "NodeResourceTopology {name} is rewritten by field manager {manager:?} again and \
         again ({rewrites} rewrites of the zones, attributes or policies nri-align published, \
         the last at {last}): another producer publishes for this node. nri-align stops \
         replacing it, so the two do not overwrite each other for ever, and looks again at \
         every resync. Stop the other producer on this node (NFD's nfd-topology-updater, for \
         one) and delete the object (kubectl delete noderesourcetopology {name}): nri-align \
         then creates its own at the next resync"
    )]
    Contested {
        /// The object's name.
        name: String,
        /// The field manager that rewrote it.
        manager: String,
        /// Rewrites counted.
        rewrites: u32,
        /// When it last rewrote it (server time, RFC 3339).
        last: String,
    },
}

impl NotOwned {
    /// The metric and log label: `foreign` or `contested`.
    pub fn reason(&self) -> &'static str {
        match self {
            NotOwned::Foreign { .. } => "foreign",
            NotOwned::Contested { .. } => "contested",
        }
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        match self {
            NotOwned::Foreign { name, .. } | NotOwned::Contested { name, .. } => name,
        }
    }

    /// The object and whose it is, in one phrase.
    pub fn summary(&self) -> String {
        match self {
            NotOwned::Foreign {
                name,
                managed_by,
                managers,
            } => format!(
                "NodeResourceTopology {name} ({}; field managers: {})",
                label_found(managed_by),
                list_or_none(managers)
            ),
            NotOwned::Contested { name, manager, .. } => {
                format!("NodeResourceTopology {name} (rewritten by field manager {manager:?})")
            }
        }
    }
}

fn label_found(managed_by: &Option<String>) -> String {
    match managed_by {
        Some(v) => format!("its label {LABEL_MANAGED_BY} is {v:?}, not {MANAGED_BY:?}"),
        None => format!("it has no {LABEL_MANAGED_BY} label"),
    }
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none recorded".into()
    } else {
        v.join(", ")
    }
}

/// Whether `obj` carries nri-align's label.
pub fn is_ours(obj: &NodeResourceTopology) -> bool {
    managed_by(obj) == Some(MANAGED_BY)
}

fn managed_by(obj: &NodeResourceTopology) -> Option<&str> {
    obj.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_MANAGED_BY))
        .map(String::as_str)
}

/// `obj` as a foreign object: its label and its field managers.
pub fn foreign(obj: &NodeResourceTopology) -> NotOwned {
    let mut managers: Vec<String> = obj
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|e| {
            let m = e.manager.as_deref()?;
            Some(match e.operation.as_deref() {
                Some(op) => format!("{m} ({op})"),
                None => m.to_string(),
            })
        })
        .collect();
    managers.dedup();
    NotOwned::Foreign {
        name: obj.metadata.name.clone().unwrap_or_default(),
        managed_by: managed_by(obj).map(str::to_string),
        managers,
    }
}

fn time(e: &ManagedFieldsEntry) -> Option<Timestamp> {
    e.time.as_ref().map(|t| t.0)
}

fn owns_content(e: &ManagedFieldsEntry) -> bool {
    e.fields_v1
        .as_ref()
        .and_then(|f| f.0.as_object())
        .is_some_and(|o| CONTENT_FIELDS.iter().any(|k| o.contains_key(*k)))
}

/// The field manager other than nri-align that changed the zones, attributes or policies
/// after nri-align last changed anything, and when: the newest such entry. Strictly after:
/// times are whole seconds, and an entry as old as nri-align's own may only hold fields whose
/// values nri-align left as they were (ownership moves only with a changed value).
pub fn rewriter(obj: &NodeResourceTopology) -> Option<(String, Timestamp)> {
    let entries = obj.metadata.managed_fields.as_deref().unwrap_or_default();
    let main = |e: &&ManagedFieldsEntry| e.subresource.as_deref().unwrap_or_default().is_empty();
    let ours = entries
        .iter()
        .filter(main)
        .filter(|e| e.manager.as_deref() == Some(FIELD_MANAGER))
        .filter_map(time)
        .max();
    entries
        .iter()
        .filter(main)
        .filter(|e| e.manager.as_deref().is_some_and(|m| m != FIELD_MANAGER))
        .filter(|e| owns_content(e))
        .filter_map(|e| Some((e.manager.clone()?, time(e)?)))
        .filter(|(_, t)| ours.map_or(true, |o| *t > o))
        .max_by_key(|(_, t)| *t)
}

/// The rewrites counted on the object of one uid, and whether it is contested.
#[derive(Debug, Default)]
pub struct Rewrites {
    uid: Option<String>,
    manager: Option<String>,
    count: u32,
    /// resourceVersion of the last counted rewrite: the same rewrite read twice (a retry, a
    /// conflict) counts once.
    last_version: Option<String>,
    last_at: Option<Timestamp>,
    contested: Option<NotOwned>,
}

impl Rewrites {
    /// Forgets everything: the object is gone, or nri-align made it afresh.
    pub fn clear(&mut self) {
        *self = Rewrites::default();
    }

    /// Counts on the object with `uid` from now on (another object, another count).
    fn follow(&mut self, uid: Option<&str>) {
        if self.uid.as_deref() != uid {
            *self = Rewrites {
                uid: uid.map(str::to_string),
                ..Default::default()
            };
        }
    }

    /// Counts a rewrite by `manager` at `at`, seen at resourceVersion `version`; returns the
    /// length of the chain it belongs to.
    fn record(
        &mut self,
        manager: &str,
        at: Timestamp,
        version: Option<&str>,
        window: Duration,
    ) -> u32 {
        if version.is_some() && self.last_version.as_deref() == version {
            return self.count;
        }
        let window = SignedDuration::try_from(window).unwrap_or(SignedDuration::MAX);
        let chained = self.manager.as_deref() == Some(manager)
            && self
                .last_at
                .is_some_and(|prev| at.duration_since(prev) <= window);
        self.count = if chained { self.count + 1 } else { 1 };
        self.manager = Some(manager.to_string());
        self.last_version = version.map(str::to_string);
        self.last_at = Some(at);
        self.count
    }
}

/// Logs what changed: the error with what to do the first time an object is left alone (or
/// left alone for another reason), when nri-align owns it again, and a take-over.
pub fn log_change(
    before: Option<&NotOwned>,
    now: Option<&NotOwned>,
    taken_over: Option<&NotOwned>,
) {
    match (before, now) {
        (b, Some(n)) if b != Some(n) => tracing::error!(reason = n.reason(), "{n}"),
        (_, Some(n)) => {
            tracing::debug!(reason = n.reason(), "NodeResourceTopology still left alone")
        }
        (Some(b), None) => tracing::info!(
            was = b.reason(),
            "NodeResourceTopology {} is nri-align's again",
            b.name()
        ),
        (None, None) => {}
    }
    if let Some(n) = taken_over {
        tracing::warn!(
            "took over {} and replaced it with nri-align's (nrt.take_over_foreign is set)",
            n.summary()
        );
    }
}

/// What the publisher does with the server's object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// There is none: create it.
    Create,
    /// Ours and as desired.
    Unchanged,
    /// Ours and different: replace it.
    Replace,
    /// Foreign, and `nrt.take_over_foreign` is set: replace it (with nri-align's label).
    TakeOver(NotOwned),
    /// Leave it alone.
    LeaveAlone(NotOwned),
}

/// Decides what to do with `current` (the server's object, if any) when nri-align wants
/// `desired`, counting rewrites by other producers in `rewrites`.
pub fn decide(
    current: Option<&NodeResourceTopology>,
    desired: &NodeResourceTopology,
    take_over_foreign: bool,
    window: Duration,
    rewrites: &mut Rewrites,
) -> Decision {
    let Some(cur) = current else {
        rewrites.clear();
        return Decision::Create;
    };
    if !is_ours(cur) {
        rewrites.clear();
        return if take_over_foreign {
            Decision::TakeOver(foreign(cur))
        } else {
            Decision::LeaveAlone(foreign(cur))
        };
    }
    rewrites.follow(cur.metadata.uid.as_deref());
    if let Some(c) = &rewrites.contested {
        return Decision::LeaveAlone(c.clone());
    }
    if cur.content_matches(desired) {
        return Decision::Unchanged;
    }
    // A difference nobody else caused (a new snapshot, a reload) is no rewrite.
    if let Some((manager, at)) = rewriter(cur) {
        let count = rewrites.record(
            &manager,
            at,
            cur.metadata.resource_version.as_deref(),
            window,
        );
        if count >= REWRITES_TO_CONTEST {
            let contested = NotOwned::Contested {
                name: cur.metadata.name.clone().unwrap_or_default(),
                manager,
                rewrites: count,
                last: at.to_string(),
            };
            rewrites.contested = Some(contested.clone());
            return Decision::LeaveAlone(contested);
        }
    }
    Decision::Replace
}

#[cfg(test)]
#[path = "ownership_tests.rs"]
mod tests;
