//! The state log's format: a header line, then one line per change, each a checksum and a
//! compact JSON object: `{"put":ID,"rec":RECORD}`, `{"del":ID}`, or, since layout 3,
//! `{"group":KEY,"cpus":LIST}` (every shared container of group KEY now runs on LIST: the
//! NUMA nodes it follows the pool on, `""` for none, or `exempt`) and
//! `{"put":ID,"rec":RECORD,"follows":true}` (a shared record without its own `applied_cpus`:
//! it runs wherever the last line of its group says). An exclusive admission that moves a
//! thousand shared containers is then one group line, not a thousand records. Replaying the
//! lines in order gives the records; a compaction rewrites the log as one line per group
//! whose members agree and one `put` per live record. Layout 2 logs (0.2.0: puts and dels
//! only) are read as they are and rewritten in layout 3.
//!
//! Every line is written with one `write` on a file opened to append, so a crash of the
//! plugin leaves whole lines. Only the tail can be damaged (a short write on a full disk, the
//! last writes before a power loss): unreadable lines at the end are dropped with a warning
//! (their changes were never answered to the runtime, or Synchronize brings them back), while
//! an unreadable line followed by good ones means the file was damaged and is not trusted.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use twox_hash::XxHash64;

use super::{GroupKey, Record};
use crate::topology::{CpuSet, NodeSet};

/// First line of a state log of this layout.
pub const HEADER: &str = "nri-align state log 3";
/// The 0.2.0 layout (no group lines), read and rewritten.
const HEADER_V2: &str = "nri-align state log 2";
/// What every header starts with, whatever its version.
const HEADER_PREFIX: &str = "nri-align state log ";
/// How a group line names the exempt containers' group.
const EXEMPT_KEY: &str = "exempt";

/// One change, as a line carries it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    put: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rec: Option<Record>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    follows: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    del: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cpus: Option<CpuSet>,
}

/// Borrowed form of [`Line`] for writing without copying the record.
#[derive(Serialize)]
struct PutRef<'a> {
    put: &'a str,
    rec: &'a Record,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    follows: bool,
}

#[derive(Serialize)]
struct DelRef<'a> {
    del: &'a str,
}

#[derive(Serialize)]
struct GroupRef<'a> {
    group: String,
    #[serde(serialize_with = "list")]
    cpus: &'a CpuSet,
}

fn list<S: serde::Serializer>(set: &&CpuSet, s: S) -> Result<S::Ok, S::Error> {
    crate::topology::idset::serialize_as_list(set, s)
}

/// Appends the header line to `out`.
pub fn header(out: &mut Vec<u8>) {
    out.extend_from_slice(HEADER.as_bytes());
    out.push(b'\n');
}

/// Appends a line recording `rec` for container `id` to `out`.
pub fn put(out: &mut Vec<u8>, id: &str, rec: &Record) -> Result<(), String> {
    line(
        out,
        &PutRef {
            put: id,
            rec,
            follows: false,
        },
    )
}

/// Appends a line recording shared record `rec` for container `id` as a follower of its
/// group's cpuset (its own `applied_cpus` is left out).
pub fn put_follower(out: &mut Vec<u8>, id: &str, rec: &Record) -> Result<(), String> {
    let mut rec = rec.clone();
    rec.applied_cpus = CpuSet::new();
    line(
        out,
        &PutRef {
            put: id,
            rec: &rec,
            follows: true,
        },
    )
}

/// Appends a line removing container `id` to `out`.
pub fn del(out: &mut Vec<u8>, id: &str) -> Result<(), String> {
    line(out, &DelRef { del: id })
}

/// Appends a line saying every follower of group `key` runs on `cpus`.
pub fn group(out: &mut Vec<u8>, key: &GroupKey, cpus: &CpuSet) -> Result<(), String> {
    let group = match key {
        GroupKey::Exempt => EXEMPT_KEY.to_string(),
        GroupKey::Nodes(n) => n.to_string(),
    };
    line(out, &GroupRef { group, cpus })
}

fn parse_key(text: &str) -> Result<GroupKey, String> {
    if text == EXEMPT_KEY {
        return Ok(GroupKey::Exempt);
    }
    NodeSet::parse_list(text)
        .map(GroupKey::Nodes)
        .map_err(|e| format!("group {text:?}: {e}"))
}

fn line(out: &mut Vec<u8>, op: &impl Serialize) -> Result<(), String> {
    // Checksum, space, JSON, newline: the checksum goes first, so reserve its room and
    // fill it in once the JSON is written.
    let start = out.len();
    out.extend_from_slice(&[b'0'; 17]);
    serde_json::to_writer(&mut *out, op).map_err(|e| e.to_string())?;
    let sum = XxHash64::oneshot(0, &out[start + 17..]);
    let hex = format!("{sum:016x} ");
    out[start..start + 17].copy_from_slice(hex.as_bytes());
    out.push(b'\n');
    Ok(())
}

/// What replaying a log found.
#[derive(Debug, Default)]
pub struct Replayed {
    /// The records, followers on their group's last cpuset.
    pub records: BTreeMap<String, Record>,
    /// The last cpuset of each group the log names.
    pub groups: HashMap<GroupKey, CpuSet>,
    /// Shared records the log holds with their own cpuset (not as followers), by group.
    pub pinned: HashMap<GroupKey, BTreeSet<String>>,
    /// Change lines read (the header aside).
    pub lines: usize,
    /// Unreadable lines at the end, dropped.
    pub torn: usize,
    /// An older layout: to rewrite before appending to it.
    pub old_layout: bool,
}

/// Replays a whole log. `Err` when it is not a log of a layout this build reads or is damaged
/// before its tail (with why).
pub fn replay(bytes: &[u8]) -> Result<Replayed, String> {
    let mut lines = bytes.split(|b| *b == b'\n');
    let first = lines.next().unwrap_or_default();
    let mut out = Replayed::default();
    if first == HEADER_V2.as_bytes() {
        out.old_layout = true;
    } else if first != HEADER.as_bytes() {
        let text = String::from_utf8_lossy(first);
        return Err(match text.strip_prefix(HEADER_PREFIX) {
            Some(v) => format!("has layout {v}, this build reads 2 and 3"),
            None => "does not start with a state log header".into(),
        });
    }
    let mut first_bad: Option<(usize, String)> = None;
    let mut followers = HashSet::new();
    let complete = bytes.ends_with(b"\n");
    let parts: Vec<&[u8]> = lines.collect();
    let n = parts.len();
    for (i, raw) in parts.into_iter().enumerate() {
        // The piece after the last newline is empty in a whole file, else a torn line.
        let last = i + 1 == n;
        if last && raw.is_empty() && complete {
            break;
        }
        match decode(raw) {
            Ok(line) if !last || complete => {
                if let Some((at, why)) = first_bad.take() {
                    return Err(format!(
                        "line {} is damaged ({why}) and good lines follow it",
                        at + 2
                    ));
                }
                out.lines += 1;
                apply(&mut out, &mut followers, line)?;
            }
            Ok(_) => out.torn += 1,
            Err(why) => {
                out.torn += 1;
                first_bad.get_or_insert((i, why));
            }
        }
    }
    resolve(&mut out, &followers)?;
    Ok(out)
}

fn decode(raw: &[u8]) -> Result<Line, String> {
    if raw.len() < 18 || raw[16] != b' ' {
        return Err("too short".into());
    }
    let sum = std::str::from_utf8(&raw[..16])
        .ok()
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .ok_or("no checksum")?;
    let json = &raw[17..];
    if XxHash64::oneshot(0, json) != sum {
        return Err("checksum mismatch".into());
    }
    let line: Line = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    match (&line.put, &line.rec, &line.del, &line.group, &line.cpus) {
        (Some(_), Some(_), None, None, None) => Ok(line),
        (None, None, None, Some(_), Some(_)) | (None, None, Some(_), None, None)
            if !line.follows =>
        {
            Ok(line)
        }
        _ => Err("neither a put, a del nor a group".into()),
    }
}

fn apply(out: &mut Replayed, followers: &mut HashSet<String>, line: Line) -> Result<(), String> {
    match line {
        Line {
            put: Some(id),
            rec: Some(rec),
            follows,
            ..
        } => {
            if follows && rec.group_key().is_none() {
                return Err(format!("{id} follows a group but is exclusive"));
            }
            if follows {
                followers.insert(id.clone());
            } else {
                followers.remove(&id);
            }
            out.records.insert(id, rec);
        }
        Line { del: Some(id), .. } => {
            followers.remove(&id);
            out.records.remove(&id);
        }
        Line {
            group: Some(key),
            cpus: Some(cpus),
            ..
        } => {
            out.groups.insert(parse_key(&key)?, cpus);
        }
        _ => {}
    }
    Ok(())
}

/// Puts every follower on its group's last cpuset, and lists the shared records that carry
/// their own.
fn resolve(out: &mut Replayed, followers: &HashSet<String>) -> Result<(), String> {
    for (id, rec) in out.records.iter_mut() {
        let Some(key) = rec.group_key() else {
            continue;
        };
        if !followers.contains(id) {
            out.pinned.entry(key).or_default().insert(id.clone());
            continue;
        }
        match out.groups.get(&key) {
            Some(cpus) => rec.applied_cpus.clone_from(cpus),
            None => return Err(format!("{id} follows a group no line names")),
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod tests;
