//! The ttrpc framing of what a ttrpc client sends to a server, checked as the bytes pass: every
//! message is a 10-byte header (big-endian `u32` payload length, `u32` stream id, `u8` type,
//! `u8` flags, as containerd/ttrpc writes it) and its payload.
//!
//! ttrpc itself trusts the length of a header: one that announces more than the 4 MiB limit
//! makes it skip that many bytes, and a corrupt one swallows every later request of the
//! connection while the socket stays up. [`RequestFraming`] sees such a header at once, so the
//! plugin can drop the connection instead of timing out forever.

/// Length of a ttrpc message header.
pub const TTRPC_HEADER_LEN: usize = 10;
/// Largest ttrpc payload (ttrpc's `MESSAGE_LENGTH_MAX` in Go and Rust).
pub const TTRPC_MAX_PAYLOAD: u32 = 4 << 20;
/// A client's call.
const TYPE_REQUEST: u8 = 1;
/// Stream data (streaming calls; NRI has none, ttrpc allows them).
const TYPE_DATA: u8 = 3;
/// Every flag ttrpc defines: remote closed, remote open, no data.
const KNOWN_FLAGS: u8 = 0x1 | 0x2 | 0x4;

/// A header a ttrpc client never sends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// The payload length is over ttrpc's limit.
    #[error("ttrpc header announces {len} bytes, more than the limit of {TTRPC_MAX_PAYLOAD}")]
    Oversized {
        /// The announced length.
        len: u32,
    },
    /// Not a request or stream data (responses go the other way; other values do not exist).
    #[error("ttrpc header has message type {0}, not a request (1) or data (3)")]
    BadType(u8),
    /// Clients number their streams with odd ids.
    #[error("ttrpc header has stream id {0}, which no client uses (they are odd)")]
    EvenStream(u32),
    /// Flag bits ttrpc does not define.
    #[error("ttrpc header has flags {0:#04x}, with bits ttrpc does not define")]
    BadFlags(u8),
}

/// Follows the message boundaries of a client-to-server ttrpc byte stream.
#[derive(Debug, Default, Clone)]
pub struct RequestFraming {
    header: [u8; TTRPC_HEADER_LEN],
    /// Header bytes collected so far.
    have: usize,
    /// Payload bytes of the current message still to pass.
    body_left: u32,
    /// Headers accepted so far.
    messages: u64,
    /// The first bad header; every later call returns it again.
    failed: Option<FramingError>,
}

impl RequestFraming {
    /// A checker at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Headers accepted so far.
    pub fn messages(&self) -> u64 {
        self.messages
    }

    /// Takes the next bytes of the stream, in order, in pieces of any size; fails at the first
    /// header a ttrpc client would not send.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), FramingError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        while !data.is_empty() {
            if self.body_left > 0 {
                let n = data.len().min(self.body_left as usize);
                data = &data[n..];
                // n <= body_left, which is a u32.
                self.body_left -= n as u32;
                continue;
            }
            let n = data.len().min(TTRPC_HEADER_LEN - self.have);
            self.header[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have == TTRPC_HEADER_LEN {
                self.have = 0;
                if let Err(err) = self.check_header() {
                    self.failed = Some(err.clone());
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    fn check_header(&mut self) -> Result<(), FramingError> {
        let h = &self.header;
        let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let stream = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let (kind, flags) = (h[8], h[9]);
        if len > TTRPC_MAX_PAYLOAD {
            return Err(FramingError::Oversized { len });
        }
        if kind != TYPE_REQUEST && kind != TYPE_DATA {
            return Err(FramingError::BadType(kind));
        }
        if stream % 2 == 0 {
            return Err(FramingError::EvenStream(stream));
        }
        if flags & !KNOWN_FLAGS != 0 {
            return Err(FramingError::BadFlags(flags));
        }
        self.body_left = len;
        self.messages += 1;
        Ok(())
    }
}

#[cfg(test)]
#[path = "framing_tests.rs"]
mod tests;
