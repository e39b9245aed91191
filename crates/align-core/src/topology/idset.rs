//! Compact sets of small integer ids (CPUs, NUMA nodes) with the Linux list format
//! (`0-3,8,10-11`) that sysfs, cgroups and /proc/self/status use.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A set of ids stored as a bitmap: 1024 CPUs cost 16 words, and union / intersection /
/// count are a handful of word operations, which keeps placement linear in CPUs.
#[derive(Clone, Default)]
pub struct IdSet {
    words: Vec<u64>,
}

/// Equal when they hold the same ids, whatever zero words `remove` or `subtract` left at the
/// end (a derived comparison of the words would call such sets different, and the engine would
/// send cpuset updates that change nothing).
impl PartialEq for IdSet {
    fn eq(&self, other: &Self) -> bool {
        let n = self.words.len().max(other.words.len());
        (0..n).all(|i| self.word(i) == other.word(i))
    }
}

impl Eq for IdSet {}

impl std::hash::Hash for IdSet {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let used = self
            .words
            .iter()
            .rposition(|w| *w != 0)
            .map_or(0, |i| i + 1);
        self.words[..used].hash(h);
    }
}

/// A set of logical CPU ids.
pub type CpuSet = IdSet;
/// A set of NUMA node ids.
pub type NodeSet = IdSet;

/// Why a list string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid id list {}: {}",
    crate::untrusted::quoted(.input),
    crate::untrusted::message(.reason)
)]
pub struct ParseIdSetError {
    /// The text that was given (errors repeat only its start: it may come from outside).
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Upper bound on ids accepted from text, so a hostile `0-4294967295` cannot allocate 512 MiB.
pub const MAX_ID: u32 = 1 << 20;

impl IdSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `id`; returns whether it was absent.
    pub fn insert(&mut self, id: u32) -> bool {
        let (w, b) = ((id / 64) as usize, id % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        let was = self.words[w] & (1 << b) != 0;
        self.words[w] |= 1 << b;
        !was
    }

    /// Removes `id`; returns whether it was present.
    pub fn remove(&mut self, id: u32) -> bool {
        let (w, b) = ((id / 64) as usize, id % 64);
        match self.words.get_mut(w) {
            Some(word) if *word & (1 << b) != 0 => {
                *word &= !(1 << b);
                true
            }
            _ => false,
        }
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: u32) -> bool {
        let (w, b) = ((id / 64) as usize, id % 64);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    /// Number of ids in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set has no ids.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// Ids in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            let mut w = word;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                w &= w - 1;
                Some(i as u32 * 64 + b)
            })
        })
    }

    /// Smallest id, if any.
    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    /// Ids in either set.
    pub fn union(&self, other: &IdSet) -> IdSet {
        let n = self.words.len().max(other.words.len());
        let words = (0..n)
            .map(|i| self.word(i) | other.word(i))
            .collect::<Vec<_>>();
        IdSet { words }.trimmed()
    }

    /// Ids in both sets.
    pub fn intersection(&self, other: &IdSet) -> IdSet {
        let n = self.words.len().min(other.words.len());
        let words = (0..n).map(|i| self.word(i) & other.word(i)).collect();
        IdSet { words }.trimmed()
    }

    /// Ids in `self` but not in `other`.
    pub fn difference(&self, other: &IdSet) -> IdSet {
        let words = (0..self.words.len())
            .map(|i| self.word(i) & !other.word(i))
            .collect();
        IdSet { words }.trimmed()
    }

    /// Number of ids in both sets, without building the intersection.
    pub fn intersection_len(&self, other: &IdSet) -> usize {
        self.words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| (a & b).count_ones() as usize)
            .sum()
    }

    /// Whether every id of `self` is in `other`.
    pub fn is_subset(&self, other: &IdSet) -> bool {
        (0..self.words.len()).all(|i| self.word(i) & !other.word(i) == 0)
    }

    /// Whether the sets share no id.
    pub fn is_disjoint(&self, other: &IdSet) -> bool {
        self.intersection_len(other) == 0
    }

    /// Adds every id of `other`.
    pub fn extend_from(&mut self, other: &IdSet) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    /// Removes every id of `other`.
    pub fn subtract(&mut self, other: &IdSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= !b;
        }
    }

    /// Parses the Linux list format: `""`, `"3"`, `"0-3,8,10-11"`; whitespace around is ignored.
    ///
    /// Linear in the text and in the ids' span, whatever the text repeats: ranges are gathered,
    /// sorted and merged, then set a word at a time. Setting every range id by id made a list
    /// of a few thousand copies of `0-1048575` (80 KB) cost billions of inserts.
    pub fn parse_list(s: &str) -> Result<IdSet, ParseIdSetError> {
        Self::parse_list_below(s, MAX_ID)
    }

    /// [`IdSet::parse_list`] refusing any id at or above `limit` (capped at [`MAX_ID`]) and,
    /// before any parsing, any text longer than [`IdSet::longest_list`] of `limit`: no list of
    /// ids below `limit` needs more, so a longer one is garbage or hostile.
    pub fn parse_list_below(s: &str, limit: u32) -> Result<IdSet, ParseIdSetError> {
        let limit = limit.min(MAX_ID);
        let err = |reason: &str| ParseIdSetError {
            input: s.to_string(),
            reason: reason.to_string(),
        };
        if s.len() > Self::longest_list(limit) {
            return Err(err(&format!(
                "longer than any list of ids below {limit} ({} bytes at most)",
                Self::longest_list(limit)
            )));
        }
        let trimmed = s.trim();
        if trimmed.is_empty() {
            return Ok(IdSet::new());
        }
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for part in trimmed.split(',') {
            let part = part.trim();
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (a.trim(), b.trim()),
                None => (part, part),
            };
            let lo: u32 = lo.parse().map_err(|_| err("expected a number"))?;
            let hi: u32 = hi.parse().map_err(|_| err("expected a number"))?;
            if lo > hi {
                return Err(err("range start above its end"));
            }
            if hi >= limit {
                return Err(err("id too large"));
            }
            ranges.push((lo, hi));
        }
        ranges.sort_unstable();
        let mut set = IdSet::new();
        let mut merged: Option<(u32, u32)> = None;
        for (lo, hi) in ranges {
            merged = match merged {
                Some((a, b)) if lo <= b.saturating_add(1) => Some((a, b.max(hi))),
                Some(done) => {
                    set.insert_range(done.0, done.1);
                    Some((lo, hi))
                }
                None => Some((lo, hi)),
            };
        }
        if let Some((lo, hi)) = merged {
            set.insert_range(lo, hi);
        }
        Ok(set)
    }

    /// The longest text a list of distinct ids below `limit` needs: every id written alone,
    /// each with its separator. Generous (a canonical list folds runs), never too short.
    pub fn longest_list(limit: u32) -> usize {
        let mut total = 0usize;
        let mut width = 1usize;
        let mut from = 0u64;
        let mut to = 10u64;
        while from < u64::from(limit) {
            let n = to.min(u64::from(limit)) - from;
            total += n as usize * (width + 1);
            from = to;
            to *= 10;
            width += 1;
        }
        // Whitespace around the list (a file's newline) is allowed too.
        total + 16
    }

    /// Adds every id of `lo..=hi`, a word at a time.
    fn insert_range(&mut self, lo: u32, hi: u32) {
        let (first, last) = ((lo / 64) as usize, (hi / 64) as usize);
        if self.words.len() <= last {
            self.words.resize(last + 1, 0);
        }
        for w in first..=last {
            let from = if w == first { lo % 64 } else { 0 };
            let to = if w == last { hi % 64 } else { 63 };
            // Bits from..=to: all ones shifted up, with the bits above `to` cleared.
            let mask = (u64::MAX << from) & (u64::MAX >> (63 - to));
            self.words[w] |= mask;
        }
    }

    /// Formats in the Linux list format (`0-3,8`); the empty set is `""`.
    pub fn to_list_string(&self) -> String {
        self.to_string()
    }

    /// Runs of consecutive ids as `(first, last)`, ascending. Found a word at a time: the
    /// shared pool of a large node is a few runs of a thousand CPUs, printed into every shared
    /// container's response and state line, and walking it id by id cost more than the rest
    /// of such a decision.
    pub fn runs(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let mut from = 0u32;
        std::iter::from_fn(move || {
            let lo = self.next_with(from, false)?;
            // Every id up to the last word's end may be set: the run ends there at the latest.
            let end = self
                .next_with(lo, true)
                .unwrap_or(self.words.len() as u32 * 64);
            from = end;
            Some((lo, end - 1))
        })
    }

    /// The first id at or after `from` that is in the set (`absent` false) or not (`absent`
    /// true), within the stored words.
    fn next_with(&self, from: u32, absent: bool) -> Option<u32> {
        let mut i = (from / 64) as usize;
        let flip = if absent { u64::MAX } else { 0 };
        let mut w = (self.words.get(i)? ^ flip) & (u64::MAX << (from % 64));
        loop {
            if w != 0 {
                return Some(i as u32 * 64 + w.trailing_zeros());
            }
            i += 1;
            w = self.words.get(i)? ^ flip;
        }
    }

    fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }

    fn trimmed(mut self) -> Self {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
        self
    }
}

impl PartialOrd for IdSet {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IdSet {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.iter().cmp(other.iter())
    }
}

impl FromIterator<u32> for IdSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut s = IdSet::new();
        for id in iter {
            s.insert(id);
        }
        s
    }
}

impl fmt::Display for IdSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (lo, hi)) in self.runs().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for IdSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{self}}}")
    }
}

impl FromStr for IdSet {
    type Err = ParseIdSetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IdSet::parse_list(s)
    }
}

/// Serialised as a list of integers (the JSON contract of `nri-align topology --json`).
impl Serialize for IdSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// Serialises `set` as a Linux list string (`"0-1023"`): the compact form the state log keeps
/// (a shared container's thousand CPUs are one short string, not a thousand numbers).
pub fn serialize_as_list<S: Serializer>(set: &IdSet, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(set)
}

/// Accepts a list of integers or a Linux list string.
impl<'de> Deserialize<'de> for IdSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            List(Vec<u32>),
            Text(String),
        }
        match Repr::deserialize(d)? {
            // The same bound as the text form: `[4294967295]` would otherwise allocate 512 MiB.
            Repr::List(v) => match v.iter().find(|id| **id >= MAX_ID) {
                Some(id) => Err(serde::de::Error::custom(format!(
                    "id {id} too large (ids must be below {MAX_ID})"
                ))),
                None => Ok(v.into_iter().collect()),
            },
            Repr::Text(t) => IdSet::parse_list(&t).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
#[path = "idset_tests.rs"]
mod tests;
