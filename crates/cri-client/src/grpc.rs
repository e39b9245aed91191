//! Unary gRPC calls over HTTP/2 on a unix socket, with rust-protobuf messages.
//!
//! Why h2 and not tonic: the CRI client only makes unary calls on a local unix socket. gRPC's
//! unary wire format is one HTTP/2 POST with a 5-byte length prefix and a `grpc-status` trailer,
//! which h2 (the HTTP/2 implementation tonic itself runs on) handles in ~150 lines here. tonic
//! would add hyper, hyper-util, tower and a connector/codec layer for rust-protobuf messages
//! (tonic's own codegen targets prost), for no feature we use, and on a 2-core CI box the
//! smaller dependency tree builds noticeably faster.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use protobuf::Message;
use tokio::net::UnixStream;

/// The request content type (see [`Channel::unary`] for why not `application/grpc+proto`).
pub const GRPC_CONTENT_TYPE: &str = "application/grpc";

/// Largest response we accept (containerd's own default limit for gRPC messages is 16 MiB).
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Errors of a gRPC call.
#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    /// The socket could not be reached.
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
    /// The call did not finish within its deadline.
    #[error("{method}: deadline of {timeout:?} exceeded")]
    Timeout {
        /// Full gRPC method path.
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
    /// The response violated the gRPC framing or could not be decoded.
    #[error("malformed response: {0}")]
    Protocol(String),
    /// A request message could not be encoded.
    #[error("encode request: {0}")]
    Encode(#[from] protobuf::Error),
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

/// One HTTP/2 connection to a gRPC server on a unix socket.
#[derive(Clone)]
pub struct Channel {
    send: h2::client::SendRequest<Bytes>,
}

impl Channel {
    /// Dials `path` and runs the HTTP/2 handshake; the connection task runs on the current
    /// tokio runtime until the last clone of the channel is dropped.
    pub async fn connect(path: &Path) -> Result<Self, GrpcError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| GrpcError::Connect {
                path: path.to_path_buf(),
                source,
            })?;
        let (send, connection) = h2::client::handshake(stream).await?;
        tokio::spawn(async move {
            // The connection ends when the server goes away or the channel is dropped; calls in
            // flight see that as a transport error, so nothing to report here.
            let _ = connection.await;
        });
        Ok(Self { send })
    }

    /// Makes the unary call `method` (e.g. `/runtime.v1.RuntimeService/Version`).
    pub async fn unary<Req: Message, Resp: Message>(
        &self,
        method: &str,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, GrpcError> {
        match tokio::time::timeout(timeout, self.unary_inner(method, request, timeout)).await {
            Ok(result) => result,
            Err(_) => Err(GrpcError::Timeout {
                method: method.to_string(),
                timeout,
            }),
        }
    }

    async fn unary_inner<Req: Message, Resp: Message>(
        &self,
        method: &str,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, GrpcError> {
        let body = encode_frame(request)?;
        let http_request = http::Request::builder()
            .method(http::Method::POST)
            .uri(format!("http://localhost{method}"))
            // Exactly "application/grpc", as grpc-go and crictl send it: CRI-O multiplexes gRPC
            // and HTTP/1 on its socket (cmux) and routes only this exact value to gRPC; the
            // equally valid "application/grpc+proto" lands on its HTTP side, which resets
            // the connection.
            .header("content-type", GRPC_CONTENT_TYPE)
            .header("te", "trailers")
            .header("grpc-timeout", grpc_timeout(timeout))
            .body(())
            .map_err(|e| GrpcError::Protocol(format!("build request: {e}")))?;

        let mut send = self.send.clone().ready().await?;
        let (response, mut stream) = send.send_request(http_request, false)?;
        stream.send_data(body, true)?;

        let response = response.await?;
        let (parts, mut body) = response.into_parts();
        if parts.status != http::StatusCode::OK {
            return Err(GrpcError::Protocol(format!("HTTP status {}", parts.status)));
        }
        // A "trailers-only" answer carries the status in the headers and has no body.
        if let Some(status) = status_from(&parts.headers) {
            status?;
        }

        let mut data = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let len = chunk.len();
            data.extend_from_slice(&chunk);
            // Give the window back so a large answer keeps flowing.
            let _ = body.flow_control().release_capacity(len);
            if data.len() > MAX_MESSAGE + 5 {
                return Err(GrpcError::Protocol(format!(
                    "response over {MAX_MESSAGE} bytes"
                )));
            }
        }
        let trailers = body.trailers().await?;
        match trailers.as_ref().and_then(status_from) {
            Some(status) => status?,
            None => return Err(GrpcError::Protocol("no grpc-status in trailers".into())),
        }
        decode_frame(data.freeze())
    }
}

/// Encodes `message` as one gRPC length-prefixed frame (uncompressed).
pub fn encode_frame<M: Message>(message: &M) -> Result<Bytes, GrpcError> {
    let payload = message.write_to_bytes()?;
    let len = u32::try_from(payload.len())
        .map_err(|_| GrpcError::Protocol("request too large".into()))?;
    let mut buf = BytesMut::with_capacity(payload.len() + 5);
    buf.put_u8(0);
    buf.put_u32(len);
    buf.put_slice(&payload);
    Ok(buf.freeze())
}

/// Decodes exactly one uncompressed gRPC frame into a message.
pub fn decode_frame<M: Message>(mut data: Bytes) -> Result<M, GrpcError> {
    if data.len() < 5 {
        return Err(GrpcError::Protocol(format!(
            "{} bytes, less than a frame header",
            data.len()
        )));
    }
    let compressed = data.get_u8();
    if compressed != 0 {
        return Err(GrpcError::Protocol(
            "compressed response (none was offered)".into(),
        ));
    }
    let len = data.get_u32() as usize;
    if len != data.len() {
        return Err(GrpcError::Protocol(format!(
            "frame announces {len} bytes, {} received",
            data.len()
        )));
    }
    M::parse_from_bytes(&data).map_err(|e| GrpcError::Protocol(format!("decode: {e}")))
}

/// Reads `grpc-status` / `grpc-message`: `None` when absent, `Some(Ok)` for OK.
fn status_from(headers: &http::HeaderMap) -> Option<Result<(), GrpcError>> {
    let code = headers.get("grpc-status")?;
    let code: u32 = match code.to_str().ok().and_then(|s| s.trim().parse().ok()) {
        Some(c) => c,
        None => return Some(Err(GrpcError::Protocol("unparsable grpc-status".into()))),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{VersionRequest, VersionResponse};

    #[test]
    fn frame_round_trip() {
        let mut req = VersionResponse::new();
        req.runtime_name = "containerd".into();
        req.runtime_version = "v2.1.9".into();
        let frame = encode_frame(&req).expect("encode");
        assert_eq!(frame[0], 0);
        assert_eq!(
            u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize,
            frame.len() - 5
        );
        let back: VersionResponse = decode_frame(frame).expect("decode");
        assert_eq!(back, req);
    }

    #[test]
    fn empty_message_is_a_bare_header() {
        let frame = encode_frame(&VersionRequest::new()).expect("encode");
        assert_eq!(&frame[..], &[0, 0, 0, 0, 0]);
        let back: VersionRequest = decode_frame(frame).expect("decode");
        assert_eq!(back, VersionRequest::new());
    }

    #[test]
    fn truncated_and_compressed_frames_are_errors() {
        let frame = encode_frame(&{
            let mut r = VersionRequest::new();
            r.version = "v1".into();
            r
        })
        .expect("encode");
        let short = frame.slice(..frame.len() - 1);
        assert!(
            matches!(decode_frame::<VersionRequest>(short), Err(GrpcError::Protocol(m)) if m.contains("announces"))
        );
        assert!(matches!(
            decode_frame::<VersionRequest>(Bytes::from_static(&[0, 0])),
            Err(GrpcError::Protocol(_))
        ));
        let mut compressed = BytesMut::from(&frame[..]);
        compressed[0] = 1;
        assert!(
            matches!(decode_frame::<VersionRequest>(compressed.freeze()), Err(GrpcError::Protocol(m)) if m.contains("compressed"))
        );
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode(b"plain"), "plain");
        assert_eq!(percent_decode(b"a%20b%3Ac"), "a b:c");
        assert_eq!(percent_decode(b"bad%zzescape%"), "bad%zzescape%");
        assert_eq!(percent_decode(b"%E2%9C%93"), "\u{2713}");
    }

    #[test]
    fn timeout_header() {
        assert_eq!(grpc_timeout(Duration::from_secs(2)), "2000m");
        assert_eq!(grpc_timeout(Duration::from_secs(200_000)), "200000S");
    }

    #[test]
    fn status_parsing() {
        let mut h = http::HeaderMap::new();
        assert!(status_from(&h).is_none());
        h.insert("grpc-status", http::HeaderValue::from_static("0"));
        assert!(matches!(status_from(&h), Some(Ok(()))));
        h.insert("grpc-status", http::HeaderValue::from_static("2"));
        h.insert(
            "grpc-message",
            http::HeaderValue::from_static("plugin%20said%20no"),
        );
        match status_from(&h) {
            Some(Err(GrpcError::Status { code, message })) => {
                assert_eq!(code, 2);
                assert_eq!(message, "plugin said no");
            }
            other => panic!("unexpected {other:?}"),
        }
        let err = GrpcError::Status {
            code: 2,
            message: "x".into(),
        };
        assert_eq!(err.to_string(), "rpc error: code = Unknown desc = x");
    }
}
