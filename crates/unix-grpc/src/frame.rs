//! gRPC's wire pieces: the length-prefixed message frame, status codes and messages, and the
//! `grpc-timeout` header.

use std::path::PathBuf;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use protobuf::Message;

/// gRPC status codes used by name in this workspace.
pub struct Code;

impl Code {
    /// Success.
    pub const OK: u32 = 0;
    /// An error without a more specific code (Go's `fmt.Errorf` from a handler becomes this).
    pub const UNKNOWN: u32 = 2;
    /// The caller sent something invalid.
    pub const INVALID_ARGUMENT: u32 = 3;
    /// The deadline passed.
    pub const DEADLINE_EXCEEDED: u32 = 4;
    /// The thing asked for does not exist.
    pub const NOT_FOUND: u32 = 5;
    /// A limit (size, rate) was hit.
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    /// The method does not exist on this server.
    pub const UNIMPLEMENTED: u32 = 12;
    /// The server broke.
    pub const INTERNAL: u32 = 13;
    /// The server cannot serve now.
    pub const UNAVAILABLE: u32 = 14;
}

/// A non-OK gRPC status, as a handler returns it or a server answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// gRPC status code.
    pub code: u32,
    /// Human-readable message (not yet percent-encoded).
    pub message: String,
}

impl Status {
    /// A status with `code` and `message`.
    pub fn new(code: u32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Errors of a gRPC call (client side) or of serving (server side).
#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    /// The socket could not be reached (absent, refused, permission).
    #[error("connect to {path}: {source}")]
    Connect {
        /// Socket path dialled.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// HTTP/2 failed (handshake, stream reset, connection closed).
    #[error("http/2 transport: {0}")]
    Transport(#[from] h2::Error),
    /// The call (or the connect and handshake) did not finish within its deadline.
    #[error("{method}: deadline of {timeout:?} exceeded")]
    Timeout {
        /// Full gRPC method path (or "connect").
        method: String,
        /// Deadline that passed.
        timeout: Duration,
    },
    /// The server answered with a non-OK gRPC status.
    #[error("rpc error: code = {} desc = {message}", code_name(*.code))]
    Status {
        /// gRPC status code (2 unknown, 5 not found, 12 unimplemented, ...).
        code: u32,
        /// Server's message, percent-decoded.
        message: String,
    },
    /// A message over the size limit (announced or received).
    #[error("{what} of {len} bytes is over the limit of {limit} bytes")]
    TooLarge {
        /// "response" or "request".
        what: &'static str,
        /// Announced or received size.
        len: usize,
        /// The limit in force.
        limit: usize,
    },
    /// The peer violated the gRPC framing, or the message could not be decoded.
    #[error("malformed {0}")]
    Protocol(String),
    /// A message could not be encoded.
    #[error("encode message: {0}")]
    Encode(#[from] protobuf::Error),
    /// Serving failed (bind, accept).
    #[error("serve on {path}: {source}")]
    Serve {
        /// Socket path.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
}

impl GrpcError {
    /// The gRPC status code, when the server answered with one.
    pub fn code(&self) -> Option<u32> {
        match self {
            GrpcError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// Names gRPC status codes the way Go's grpc-go prints them (and so crictl's messages read).
pub fn code_name(code: u32) -> &'static str {
    match code {
        0 => "OK",
        1 => "Canceled",
        2 => "Unknown",
        3 => "InvalidArgument",
        4 => "DeadlineExceeded",
        5 => "NotFound",
        6 => "AlreadyExists",
        7 => "PermissionDenied",
        8 => "ResourceExhausted",
        9 => "FailedPrecondition",
        10 => "Aborted",
        11 => "OutOfRange",
        12 => "Unimplemented",
        13 => "Internal",
        14 => "Unavailable",
        15 => "DataLoss",
        16 => "Unauthenticated",
        _ => "Code",
    }
}

/// Encodes `message` as one gRPC length-prefixed frame (uncompressed).
pub fn encode_frame<M: Message>(message: &M) -> Result<Bytes, GrpcError> {
    let payload = message.write_to_bytes()?;
    frame_bytes(&payload)
}

/// Wraps an already-encoded message in a frame.
pub(crate) fn frame_bytes(payload: &[u8]) -> Result<Bytes, GrpcError> {
    let len = u32::try_from(payload.len()).map_err(|_| GrpcError::TooLarge {
        what: "message",
        len: payload.len(),
        limit: u32::MAX as usize,
    })?;
    let mut buf = BytesMut::with_capacity(payload.len() + 5);
    buf.put_u8(0);
    buf.put_u32(len);
    buf.put_slice(payload);
    Ok(buf.freeze())
}

/// The length a frame header announces, checked against `limit` as soon as the first five bytes
/// are in (so an announced 4 GiB message is refused before anything is buffered).
pub(crate) fn announced_len(
    header: &[u8],
    limit: usize,
    what: &'static str,
) -> Result<Option<usize>, GrpcError> {
    if header.len() < 5 {
        return Ok(None);
    }
    if header[0] != 0 {
        return Err(GrpcError::Protocol(format!(
            "{what}: compressed message (no compression was negotiated)"
        )));
    }
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if len > limit {
        return Err(GrpcError::TooLarge { what, len, limit });
    }
    Ok(Some(len))
}

/// The payload of exactly one uncompressed frame.
pub(crate) fn frame_payload(mut data: Bytes, what: &str) -> Result<Bytes, GrpcError> {
    if data.len() < 5 {
        return Err(GrpcError::Protocol(format!(
            "{what}: {} bytes, less than a frame header",
            data.len()
        )));
    }
    let compressed = data.get_u8();
    if compressed != 0 {
        return Err(GrpcError::Protocol(format!(
            "{what}: compressed message (no compression was negotiated)"
        )));
    }
    let len = data.get_u32() as usize;
    if len != data.len() {
        return Err(GrpcError::Protocol(format!(
            "{what}: frame announces {len} bytes, {} received",
            data.len()
        )));
    }
    Ok(data)
}

/// Decodes exactly one uncompressed gRPC frame into a message.
pub fn decode_frame<M: Message>(data: Bytes) -> Result<M, GrpcError> {
    let payload = frame_payload(data, "response")?;
    M::parse_from_bytes(&payload).map_err(|e| GrpcError::Protocol(format!("message: {e}")))
}

/// Formats a deadline as the `grpc-timeout` header wants it (at most 8 digits and a unit).
pub fn grpc_timeout(timeout: Duration) -> String {
    let millis = timeout.as_millis();
    if millis < 100_000_000 {
        format!("{millis}m")
    } else {
        format!("{}S", timeout.as_secs().min(99_999_999))
    }
}

/// Undoes the percent-encoding gRPC applies to `grpc-message`; bad escapes are kept as is.
pub fn percent_decode(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' && i + 2 < raw.len() {
            let hex = std::str::from_utf8(&raw[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Percent-encodes a status message for `grpc-message`: printable ASCII except `%` stays, every
/// other byte becomes `%XX` (grpc `PROTOCOL-HTTP2.md`).
pub fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reads `grpc-status` / `grpc-message`: `None` when absent, `Some(Ok)` for OK.
pub(crate) fn status_from(headers: &http::HeaderMap) -> Option<Result<(), GrpcError>> {
    let code = headers.get("grpc-status")?;
    let code: u32 = match code.to_str().ok().and_then(|s| s.trim().parse().ok()) {
        Some(c) => c,
        None => {
            return Some(Err(GrpcError::Protocol(
                "response: unparsable grpc-status".into(),
            )))
        }
    };
    if code == 0 {
        return Some(Ok(()));
    }
    let message = headers
        .get("grpc-message")
        .map(|m| percent_decode(m.as_bytes()))
        .unwrap_or_default();
    Some(Err(GrpcError::Status { code, message }))
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
