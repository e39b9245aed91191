//! The state log's format: a header line, then one line per change, each a checksum and a
//! compact JSON object: `{"put":ID,"rec":RECORD}` or `{"del":ID}`. Replaying the lines in
//! order gives the records; a compaction rewrites the log as one `put` per live record.
//!
//! Every line is written with one `write` on a file opened to append, so a crash of the
//! plugin leaves whole lines. Only the tail can be damaged (a short write on a full disk, the
//! last writes before a power loss): unreadable lines at the end are dropped with a warning
//! (their changes were never answered to the runtime, or Synchronize brings them back), while
//! an unreadable line followed by good ones means the file was damaged and is not trusted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use twox_hash::XxHash64;

use super::Record;

/// First line of a state log of this layout.
pub const HEADER: &str = "nri-align state log 2";
/// What every header starts with, whatever its version.
const HEADER_PREFIX: &str = "nri-align state log ";

/// One change, as a line carries it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    put: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rec: Option<Record>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    del: Option<String>,
}

/// Borrowed form of [`Line`] for writing without copying the record.
#[derive(Serialize)]
struct PutRef<'a> {
    put: &'a str,
    rec: &'a Record,
}

#[derive(Serialize)]
struct DelRef<'a> {
    del: &'a str,
}

/// Appends the header line to `out`.
pub fn header(out: &mut Vec<u8>) {
    out.extend_from_slice(HEADER.as_bytes());
    out.push(b'\n');
}

/// Appends a line recording `rec` for container `id` to `out`.
pub fn put(out: &mut Vec<u8>, id: &str, rec: &Record) -> Result<(), String> {
    line(out, &PutRef { put: id, rec })
}

/// Appends a line removing container `id` to `out`.
pub fn del(out: &mut Vec<u8>, id: &str) -> Result<(), String> {
    line(out, &DelRef { del: id })
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
    /// The records.
    pub records: BTreeMap<String, Record>,
    /// Change lines read (the header aside).
    pub lines: usize,
    /// Unreadable lines at the end, dropped.
    pub torn: usize,
}

/// Replays a whole log. `Err` when it is not a log of this layout or is damaged before its
/// tail (with why).
pub fn replay(bytes: &[u8]) -> Result<Replayed, String> {
    let mut lines = bytes.split(|b| *b == b'\n');
    let first = lines.next().unwrap_or_default();
    if first != HEADER.as_bytes() {
        let text = String::from_utf8_lossy(first);
        return Err(match text.strip_prefix(HEADER_PREFIX) {
            Some(v) => format!("has layout {v}, this build reads 2"),
            None => "does not start with a state log header".into(),
        });
    }
    let mut out = Replayed::default();
    let mut first_bad: Option<(usize, String)> = None;
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
                apply(&mut out.records, line);
            }
            Ok(_) => out.torn += 1,
            Err(why) => {
                out.torn += 1;
                first_bad.get_or_insert((i, why));
            }
        }
    }
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
    match (&line.put, &line.rec, &line.del) {
        (Some(_), Some(_), None) | (None, None, Some(_)) => Ok(line),
        _ => Err("neither a put nor a del".into()),
    }
}

fn apply(records: &mut BTreeMap<String, Record>, line: Line) {
    match line {
        Line {
            put: Some(id),
            rec: Some(rec),
            ..
        } => {
            records.insert(id, rec);
        }
        Line { del: Some(id), .. } => {
            records.remove(&id);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(cpus: &str) -> Record {
        let mut r = Record::default();
        r.assignment.cpus = cpus.parse().expect("cpus");
        r.applied_cpus = r.assignment.cpus.clone();
        r
    }

    fn log() -> Vec<u8> {
        let mut b = Vec::new();
        header(&mut b);
        put(&mut b, "a", &rec("0-1")).expect("put");
        put(&mut b, "b", &rec("2-1023")).expect("put");
        del(&mut b, "a").expect("del");
        put(&mut b, "c", &rec("4")).expect("put");
        b
    }

    #[test]
    fn replay_applies_puts_and_dels_in_order() {
        let r = replay(&log()).expect("replay");
        assert_eq!(r.records.keys().collect::<Vec<_>>(), vec!["b", "c"]);
        assert_eq!((r.lines, r.torn), (4, 0));
        assert_eq!(r.records["b"].applied_cpus.len(), 1022);
        let text = String::from_utf8(log()).expect("utf8");
        assert!(
            text.contains(r#""cpus":"2-1023""#),
            "a shared container's CPUs are one list string: {text}"
        );
    }

    #[test]
    fn a_torn_tail_is_dropped_and_damage_before_good_lines_is_refused() {
        let whole = log();
        // Cut inside the last line: its change is lost, the rest stays.
        let cut = &whole[..whole.len() - 5];
        let r = replay(cut).expect("replay");
        assert_eq!(r.records.keys().collect::<Vec<_>>(), vec!["b"]);
        assert_eq!(r.torn, 1);
        // Zeros where the last two lines were (a power loss): both dropped.
        let mut zeroed = whole.clone();
        let text = String::from_utf8(whole.clone()).expect("utf8");
        let third = text.match_indices('\n').nth(2).expect("lines").0 + 1;
        for b in &mut zeroed[third..] {
            if *b != b'\n' {
                *b = 0;
            }
        }
        let r = replay(&zeroed).expect("replay");
        assert_eq!(r.records.keys().collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(r.torn, 2);
        // A flipped byte in the middle: not trusted.
        let mut flipped = whole.clone();
        let second_line = text.find('\n').expect("header") + 30;
        flipped[second_line] ^= 0x20;
        let err = replay(&flipped).expect_err("damaged");
        assert!(err.contains("line 2 is damaged"), "{err}");
    }

    #[test]
    fn other_files_and_layouts_are_refused() {
        let err = replay(b"nri-align state log 3\n").expect_err("newer");
        assert!(err.contains("layout 3"), "{err}");
        assert!(replay(b"{\"version\": 1}").is_err());
        assert!(replay(b"").is_err());
    }
}
