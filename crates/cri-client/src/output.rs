//! Human output of the CLI: crictl-like tables, ages, ID truncation and CRI log-file decoding.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Length crictl truncates IDs to in tables.
pub const SHORT_ID: usize = 13;

/// Shortens an ID for table output.
pub fn short_id(id: &str) -> &str {
    match id.char_indices().nth(SHORT_ID) {
        Some((i, _)) => &id[..i],
        None => id,
    }
}

/// "5 seconds ago" style age of a CRI timestamp (nanoseconds since the epoch).
pub fn age(created_ns: i64, now: SystemTime) -> String {
    let created = UNIX_EPOCH + Duration::from_nanos(u64::try_from(created_ns).unwrap_or(0));
    let secs = now.duration_since(created).unwrap_or_default().as_secs();
    let (n, unit) = match secs {
        0..=1 => return "Less than a second ago".to_string(),
        2..=59 => (secs, "seconds"),
        60..=3599 => (secs / 60, "minutes"),
        3600..=172_799 => (secs / 3600, "hours"),
        _ => (secs / 86_400, "days"),
    };
    if n == 1 {
        format!(
            "About a{} {} ago",
            if unit == "hours" { "n" } else { "" },
            &unit[..unit.len() - 1]
        )
    } else {
        format!("{n} {unit} ago")
    }
}

/// Renders rows under a header, columns padded to their widest cell (3 spaces apart).
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                l.push_str(&format!("{:<w$}   ", cell, w = widths[i]));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// Which stream a CRI log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One decoded line of a CRI container log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine<'a> {
    /// RFC 3339 timestamp as written by the runtime.
    pub timestamp: &'a str,
    /// Source stream.
    pub stream: Stream,
    /// `false` for a partial line (tag `P`): the content continues in the next entry.
    pub full: bool,
    /// Content without the trailing newline.
    pub content: &'a str,
}

/// Decodes one line of the CRI log format: `TIMESTAMP STREAM TAG CONTENT`.
pub fn parse_log_line(line: &str) -> Option<LogLine<'_>> {
    let mut parts = line.splitn(4, ' ');
    let timestamp = parts.next()?;
    let stream = match parts.next()? {
        "stdout" => Stream::Stdout,
        "stderr" => Stream::Stderr,
        _ => return None,
    };
    let tag = parts.next()?;
    let full = !tag.split(':').any(|t| t == "P");
    let content = parts.next().unwrap_or("");
    Some(LogLine {
        timestamp,
        stream,
        full,
        content,
    })
}

/// Keeps the last `n` complete lines of a log (`None` keeps all).
pub fn tail<'a>(lines: Vec<LogLine<'a>>, n: Option<usize>) -> Vec<LogLine<'a>> {
    let Some(n) = n else { return lines };
    // Count complete entries from the end; partial pieces belong to the entry they precede.
    let mut seen = 0;
    let mut start = lines.len();
    for (i, l) in lines.iter().enumerate().rev() {
        if l.full {
            if seen == n {
                break;
            }
            seen += 1;
        }
        start = i;
    }
    lines[start..].to_vec()
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
