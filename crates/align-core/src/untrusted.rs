//! Limits on input from outside the process: how large a file or value nri-align reads at
//! all, how much of a bad value an error message repeats (a hostile 1 MB annotation must
//! not come back whole in a CRI error, a log line or a metric), and which of its characters
//! reach a terminal as they are ([`printable`]: none that moves the cursor or starts an escape
//! sequence).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;

pub mod yaml;

/// Bytes of a bad value an error message repeats; the rest is replaced by an ellipsis and the
/// full length.
pub const ECHO_BYTES: usize = 64;

/// Largest configuration file or drop-in (the documented file with every key is under 2 KiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Largest workload file of `simulate`, host description or captured topology.
pub const MAX_DOCUMENT_BYTES: u64 = 16 << 20;

/// Largest hwloc XML capture (lstopo writes 1-5 MB for a large machine with its I/O tree).
pub const MAX_HWLOC_BYTES: u64 = 64 << 20;

/// Longest error text built around a parser's own message (serde's, which repeats the bad
/// value); longer ones keep their start and their end.
pub const MAX_MESSAGE_BYTES: usize = 512;

/// The start of `s` (at most [`ECHO_BYTES`], cut on a character boundary) followed by `…`
/// and its length in bytes when it is longer; `s` itself otherwise.
pub fn excerpt(s: &str) -> String {
    if s.len() <= ECHO_BYTES {
        return s.to_string();
    }
    format!("{}… ({} bytes)", head(s, ECHO_BYTES), s.len())
}

/// Like [`excerpt`], quoted and escaped as `{:?}` would (`"abc"… (1048576 bytes)`).
pub fn quoted(s: &str) -> String {
    if s.len() <= ECHO_BYTES {
        return format!("{s:?}");
    }
    format!("{:?}… ({} bytes)", head(s, ECHO_BYTES), s.len())
}

/// A parser's message cut to about [`MAX_MESSAGE_BYTES`]: its start (what and where) and its
/// end (what was expected, the line and column) around a note of how much was left out.
pub fn message(m: &str) -> String {
    if m.len() <= MAX_MESSAGE_BYTES {
        return m.to_string();
    }
    let half = MAX_MESSAGE_BYTES / 2;
    let start = head(m, half);
    let mut from = m.len() - half;
    while !m.is_char_boundary(from) {
        from += 1;
    }
    format!(
        "{start} … ({} bytes left out) … {}",
        from - start.len(),
        &m[from..]
    )
}

/// `s` with every control character written as an escape (`\r`, `\n`, `\t`, `\x1b`,
/// `\u{9b}`), everything else as it is. For names that come from the runtime (pod, namespace
/// and container names, ids) on their way to a terminal or a log line: a name holding
/// `\x1b[31m` or `\r` would otherwise recolour the text after it or overwrite the start of
/// its line. Unlike `{:?}` it leaves quotes, backslashes and non-ASCII text alone, so a
/// well-formed name reads exactly as the runtime gave it.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn head(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Why a bounded read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Opening or reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The file is larger than the limit.
    #[error("it is larger than the {limit}-byte limit")]
    TooLarge {
        /// The limit.
        limit: u64,
    },
}

/// Reads `path` as UTF-8 text, refusing more than `limit` bytes without reading past them (a
/// file that grows, or a device, cannot make the daemon allocate without end).
pub fn read_to_string(path: &Path, limit: u64) -> Result<String, ReadError> {
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    file.take(limit.saturating_add(1))
        .read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(text)
}

/// Opens `path` for reading only if it is a regular file, without ever waiting: opened
/// non-blocking (a FIFO in place of a sysfs attribute or a spec file would otherwise block the
/// open until a writer comes), then checked on the open descriptor (`fstat`), so a FIFO, a
/// socket or a device node swapped in after a check of the path is refused all the same.
/// Symbolic links are followed; `nofollow` refuses one as the last component instead
/// (`ELOOP`). Reads of a regular file never block, whatever its flags.
pub fn open_regular(path: &Path, nofollow: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    if nofollow {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", file_kind(&kind)),
        ));
    }
    Ok(file)
}

/// What a file that is not regular is, in words.
fn file_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device node"
    } else {
        "a special file"
    }
}

/// Like [`read_to_string`], for a file that must be regular ([`open_regular`], links
/// followed): a sysfs attribute, a spec file. Never waits on a FIFO or opens a device.
pub fn read_regular(path: &Path, limit: u64) -> Result<String, ReadError> {
    let file = open_regular(path, false)?;
    let mut text = String::new();
    file.take(limit.saturating_add(1))
        .read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(text)
}

/// Checks a value already in memory (a drop-in config from the runtime) against `limit`.
pub fn check_len(what: &str, len: usize, limit: u64) -> Result<(), String> {
    if len as u64 > limit {
        return Err(format!(
            "{what} is {len} bytes, more than the {limit}-byte limit"
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "untrusted_tests.rs"]
mod tests;
