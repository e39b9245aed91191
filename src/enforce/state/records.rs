//! The engine's table of records: a map by container id that also remembers which records
//! changed since they were last persisted (so a decision writes its own record, not the whole
//! table) and keeps two indexes the event handlers need without walking every container: the
//! records of each pod, and the shared-pool records grouped by the pool they follow (the NUMA
//! nodes they are bound to, or the exempt containers' target), each group knowing the cpuset
//! all its members were last moved to.
//!
//! Every change goes through `insert`, `remove`, the guard `get_mut` returns or `move_group`,
//! so the dirty set and the indexes cannot miss one. A group moved whole is remembered as one
//! change of the group (the log then writes one line for it, not one per member).

use std::collections::btree_map;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::{Bound, Deref, DerefMut, Index};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Record;
use crate::topology::{CpuSet, NodeSet};

/// `move_group` walks the table rather than looking members up when the group holds at least
/// one record in this many: a walk step is one cheap test, a look-up a dozen id compares.
const WALK_RATIO: usize = 8;

/// Which pool a shared record follows: the shared pool on its NUMA nodes (all of it for no
/// nodes), or, for a container of an exempt namespace, the exempt target (the reserved CPUs,
/// or the pool when none are reserved).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GroupKey {
    /// Shared containers bound to these NUMA nodes (none: the whole pool).
    Nodes(NodeSet),
    /// Containers of exempt namespaces.
    Exempt,
}

impl Record {
    /// The group this record follows the pool with; `None` for an exclusive one.
    pub fn group_key(&self) -> Option<GroupKey> {
        // A shared container of a pod budget follows its pod's pool (`engine/pod_budget.rs`).
        if self.assignment.exclusive || self.in_pod_budget {
            None
        } else if self.exempt {
            Some(GroupKey::Exempt)
        } else {
            Some(GroupKey::Nodes(self.assignment.numa_nodes.clone()))
        }
    }

    /// Whether this record belongs to group `key` (without building its key).
    pub(super) fn in_group(&self, key: &GroupKey) -> bool {
        match key {
            _ if self.assignment.exclusive || self.in_pod_budget => false,
            GroupKey::Exempt => self.exempt,
            GroupKey::Nodes(n) => !self.exempt && self.assignment.numa_nodes == *n,
        }
    }
}

/// Shared-pool records following the same pool.
#[derive(Debug, Clone, Default)]
pub struct SharedGroup {
    members: BTreeSet<String>,
    /// When known: the cpuset every member runs on (`applied_cpus`).
    aligned_to: Option<CpuSet>,
}

impl SharedGroup {
    /// Container ids of the group.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(String::as_str)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it has no member (never for a group the table lists).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The cpuset every member runs on, when that is known.
    pub fn aligned_to(&self) -> Option<&CpuSet> {
        self.aligned_to.as_ref()
    }
}

/// Records by container id, with what changed since the last persist and the indexes.
#[derive(Debug, Clone, Default)]
pub struct Records {
    map: BTreeMap<String, Record>,
    dirty: BTreeSet<String>,
    /// Groups moved whole since the last persist (their members are not in `dirty`).
    moved: HashSet<GroupKey>,
    by_pod: HashMap<String, BTreeSet<String>>,
    /// Records by pod UID (a restarted container finds its predecessor there).
    by_uid: HashMap<String, BTreeSet<String>>,
    groups: HashMap<GroupKey, SharedGroup>,
}

impl PartialEq for Records {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl Eq for Records {}

impl Records {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether container `id` has a record.
    pub fn contains_key(&self, id: &str) -> bool {
        self.map.contains_key(id)
    }

    /// The record of container `id`.
    pub fn get(&self, id: &str) -> Option<&Record> {
        self.map.get(id)
    }

    /// Records in container id order.
    pub fn iter(&self) -> btree_map::Iter<'_, String, Record> {
        self.map.iter()
    }

    /// Container ids in order.
    pub fn keys(&self) -> btree_map::Keys<'_, String, Record> {
        self.map.keys()
    }

    /// Records in container id order.
    pub fn values(&self) -> btree_map::Values<'_, String, Record> {
        self.map.values()
    }

    /// Adds or replaces the record of `id`; returns the one it replaced.
    pub fn insert(&mut self, id: String, rec: Record) -> Option<Record> {
        self.unindex(&id);
        self.index(&id, &rec);
        self.dirty.insert(id.clone());
        self.map.insert(id, rec)
    }

    /// Removes the record of `id`.
    pub fn remove(&mut self, id: &str) -> Option<Record> {
        if !self.unindex(id) {
            return None;
        }
        self.dirty.insert(id.to_string());
        self.map.remove(id)
    }

    /// The record of `id`, to change in place: the change is persisted and indexed when the
    /// guard is dropped.
    pub fn get_mut(&mut self, id: &str) -> Option<RecordMut<'_>> {
        let rec = self.remove(id)?;
        Some(RecordMut {
            table: self,
            id: id.to_string(),
            rec,
        })
    }

    /// Whether pod sandbox `pod_id` has any record.
    pub fn has_pod(&self, pod_id: &str) -> bool {
        self.by_pod.contains_key(pod_id)
    }

    /// Container ids recorded for pod sandbox `pod_id`.
    pub fn pod_containers(&self, pod_id: &str) -> Vec<String> {
        self.by_pod
            .get(pod_id)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The records of the pod with UID `uid`, in container id order.
    pub fn of_pod_uid<'a>(&'a self, uid: &str) -> impl Iterator<Item = (&'a String, &'a Record)> {
        self.by_uid
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|id| self.map.get_key_value(id))
    }

    /// The shared-pool records, grouped by the pool they follow.
    pub fn groups(&self) -> impl Iterator<Item = (&GroupKey, &SharedGroup)> {
        self.groups.iter()
    }

    /// The group of `key`, when it has members.
    pub fn group(&self, key: &GroupKey) -> Option<&SharedGroup> {
        self.groups.get(key)
    }

    /// Moves every member of group `key` but `except` onto `target`, calling `moved` with the
    /// id of each one that was elsewhere (and only those: its cpuset changes), in id order.
    /// When every member then runs on `target` (`except` included), the group is noted
    /// aligned to it and the move is one change of the group; otherwise each moved record is a
    /// change of its own. The cost is one comparison per member and one copy of `target` into
    /// each moved record's (reusing its allocation).
    ///
    /// A group that is a good part of the table (the whole shared pool, usually) is found by
    /// walking the table between its first and last member instead of looking each member up:
    /// a look-up compares ids down the tree (about a dozen 64-character compares at 5,000
    /// containers), which cost more than the move itself.
    pub fn move_group(
        &mut self,
        key: &GroupKey,
        target: &CpuSet,
        except: Option<&str>,
        moved: impl FnMut(&str),
    ) {
        let walk = self
            .groups
            .get(key)
            .is_some_and(|g| g.members.len() * WALK_RATIO >= self.map.len());
        self.move_group_by(key, target, except, moved, walk);
    }

    /// [`Records::move_group`], finding the members by walking the table or by look-ups
    /// (both give the same table and calls; the tests check it).
    pub(super) fn move_group_by(
        &mut self,
        key: &GroupKey,
        target: &CpuSet,
        except: Option<&str>,
        mut moved: impl FnMut(&str),
        walk: bool,
    ) {
        let Some(g) = self.groups.get_mut(key) else {
            return;
        };
        let mut all = true;
        let mut any = false;
        let mut visit = |id: &str, r: &mut Record| {
            if Some(id) == except {
                all &= r.applied_cpus == *target;
            } else if r.applied_cpus != *target {
                r.applied_cpus.clone_from(target);
                any = true;
                moved(id);
            }
        };
        if walk {
            if let (Some(first), Some(last)) = (g.members.first(), g.members.last()) {
                let span = (Bound::Included(first), Bound::Included(last));
                // The indexes put exactly the records of `key` in the group (`index`).
                for (id, r) in self.map.range_mut::<String, _>(span) {
                    if r.in_group(key) {
                        visit(id, r);
                    }
                }
            }
        } else {
            for id in &g.members {
                if let Some(r) = self.map.get_mut(id) {
                    visit(id, r);
                }
            }
        }
        if all {
            if g.aligned_to.as_ref() != Some(target) || any {
                g.aligned_to = Some(target.clone());
                self.moved.insert(key.clone());
            }
        } else if any {
            // Rare (the new container is not on its group's pool): every member is persisted
            // on its own, an earlier whole move of the group not yet written included.
            g.aligned_to = None;
            self.moved.remove(key);
            self.dirty.extend(g.members.iter().cloned());
        }
    }

    /// The groups moved whole since the last call, for the store to write.
    pub fn take_moved(&mut self) -> HashSet<GroupKey> {
        std::mem::take(&mut self.moved)
    }

    /// The ids changed since the last call (removed ones included), for the store to write.
    pub fn take_dirty(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.dirty)
    }

    /// Whether nothing changed since the last persist.
    pub fn is_clean(&self) -> bool {
        self.dirty.is_empty() && self.moved.is_empty()
    }

    /// Marks `id` changed (a record the file has and the table does not, to delete there).
    pub fn mark_dirty(&mut self, id: &str) {
        self.dirty.insert(id.to_string());
    }

    /// Forgets what changed: the table now matches the file (it was just loaded from it).
    pub fn clear_dirty(&mut self) {
        self.dirty.clear();
        self.moved.clear();
    }

    fn index(&mut self, id: &str, rec: &Record) {
        self.by_pod
            .entry(rec.pod_sandbox_id.clone())
            .or_default()
            .insert(id.to_string());
        self.by_uid
            .entry(rec.assignment.pod_uid.clone())
            .or_default()
            .insert(id.to_string());
        let Some(key) = rec.group_key() else {
            return;
        };
        // A group moved whole since the last persist that stops agreeing can no longer be
        // written as one line: its members are written one by one instead.
        let unmove = self.moved.remove(&key);
        let g = self.groups.entry(key.clone()).or_default();
        g.aligned_to = if g.members.is_empty() {
            Some(rec.applied_cpus.clone())
        } else {
            g.aligned_to.take().filter(|t| *t == rec.applied_cpus)
        };
        if unmove {
            if g.aligned_to.is_some() {
                self.moved.insert(key);
            } else {
                self.dirty.extend(g.members.iter().cloned());
            }
        }
        g.members.insert(id.to_string());
    }

    /// Takes `id` out of the indexes; whether it had a record.
    fn unindex(&mut self, id: &str) -> bool {
        let Some(old) = self.map.get(id) else {
            return false;
        };
        if let Some(ids) = self.by_pod.get_mut(&old.pod_sandbox_id) {
            ids.remove(id);
            if ids.is_empty() {
                self.by_pod.remove(&old.pod_sandbox_id);
            }
        }
        if let Some(ids) = self.by_uid.get_mut(&old.assignment.pod_uid) {
            ids.remove(id);
            if ids.is_empty() {
                self.by_uid.remove(&old.assignment.pod_uid);
            }
        }
        if let Some(key) = old.group_key() {
            if let Some(g) = self.groups.get_mut(&key) {
                g.members.remove(id);
                if g.members.is_empty() {
                    self.groups.remove(&key);
                }
            }
        }
        true
    }
}

/// A record being changed in place; written back (indexed, marked for persisting) on drop.
pub struct RecordMut<'a> {
    table: &'a mut Records,
    id: String,
    rec: Record,
}

impl Deref for RecordMut<'_> {
    type Target = Record;
    fn deref(&self) -> &Record {
        &self.rec
    }
}

impl DerefMut for RecordMut<'_> {
    fn deref_mut(&mut self) -> &mut Record {
        &mut self.rec
    }
}

impl Drop for RecordMut<'_> {
    fn drop(&mut self) {
        let rec = std::mem::take(&mut self.rec);
        self.table.insert(std::mem::take(&mut self.id), rec);
    }
}

impl Index<&str> for Records {
    type Output = Record;
    fn index(&self, id: &str) -> &Record {
        &self.map[id]
    }
}

impl IntoIterator for Records {
    type Item = (String, Record);
    type IntoIter = btree_map::IntoIter<String, Record>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.into_iter()
    }
}

impl<'a> IntoIterator for &'a Records {
    type Item = (&'a String, &'a Record);
    type IntoIter = btree_map::Iter<'a, String, Record>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

impl FromIterator<(String, Record)> for Records {
    fn from_iter<I: IntoIterator<Item = (String, Record)>>(iter: I) -> Self {
        let mut t = Records::new();
        for (id, rec) in iter {
            t.insert(id, rec);
        }
        t
    }
}

impl Serialize for Records {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.map.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Records {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, Record>::deserialize(d)?;
        let mut t: Records = map.into_iter().collect();
        t.clear_dirty();
        Ok(t)
    }
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
