//! What the log says of the shared groups ([`FileGroups`]), for the store to write a group's
//! members as followers of one group line only when the log agrees with them (`store.rs`).

use std::collections::{BTreeSet, HashMap};

use super::{journal, GroupKey, Record, Records, StateError};
use crate::topology::CpuSet;

/// What the log says of the shared groups: the last cpuset of each (its followers run there)
/// and the shared records it holds with a cpuset of their own.
#[derive(Debug, Default)]
pub(super) struct FileGroups {
    pub(super) cpus: HashMap<GroupKey, CpuSet>,
    pub(super) pinned: HashMap<GroupKey, BTreeSet<String>>,
}

impl FileGroups {
    /// Whether `rec` can be written as a follower: the log's cpuset of its group is its own.
    fn follows(&self, rec: &Record) -> Option<GroupKey> {
        let key = rec.group_key()?;
        (self.cpus.get(&key) == Some(&rec.applied_cpus)).then_some(key)
    }

    fn unpin(&mut self, id: &str) {
        self.pinned.retain(|_, ids| {
            ids.remove(id);
            !ids.is_empty()
        });
    }

    /// Writes `id`'s record (or its removal) to `buf`; returns the lines written.
    pub(super) fn write_record(
        &mut self,
        buf: &mut Vec<u8>,
        id: &str,
        rec: Option<&Record>,
    ) -> Result<usize, StateError> {
        self.unpin(id);
        let line = match rec {
            None => journal::del(buf, id),
            Some(rec) if self.follows(rec).is_some() => journal::put_follower(buf, id, rec),
            Some(rec) => {
                if let Some(key) = rec.group_key() {
                    self.pinned.entry(key).or_default().insert(id.to_string());
                }
                journal::put(buf, id, rec)
            }
        };
        line.map_err(StateError::Encode)?;
        Ok(1)
    }

    /// Brings group `key` of `records` up to date in `buf`: its line when every member runs
    /// on a cpuset the log does not say, and its pinned members that run there now (not those
    /// in `skip`, written anyway) rewritten as followers. Returns the lines written.
    pub(super) fn write_group(
        &mut self,
        buf: &mut Vec<u8>,
        key: &GroupKey,
        records: &Records,
        skip: &BTreeSet<String>,
    ) -> Result<usize, StateError> {
        let Some(cpus) = records.group(key).and_then(|g| g.aligned_to()) else {
            return Ok(0);
        };
        let mut lines = 0;
        if self.cpus.get(key) != Some(cpus) {
            journal::group(buf, key, cpus).map_err(StateError::Encode)?;
            self.cpus.insert(key.clone(), cpus.clone());
            lines += 1;
        }
        let Some(pinned) = self.pinned.remove(key) else {
            return Ok(lines);
        };
        let mut keep = BTreeSet::new();
        for id in pinned {
            match records.get(&id) {
                _ if skip.contains(&id) => {}
                Some(rec) if rec.in_group(key) && rec.applied_cpus == *cpus => {
                    journal::put_follower(buf, &id, rec).map_err(StateError::Encode)?;
                    lines += 1;
                }
                _ => {
                    keep.insert(id);
                }
            }
        }
        if !keep.is_empty() {
            self.pinned.insert(key.clone(), keep);
        }
        Ok(lines)
    }
}
