//! The client: one HTTP/2 connection on a unix socket, unary calls with a deadline each, and a
//! response size limit enforced from the frame header on.

use std::path::Path;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use protobuf::Message;
use tokio::net::UnixStream;

use crate::frame::{announced_len, decode_frame, encode_frame, grpc_timeout, status_from};
use crate::{GrpcError, DEFAULT_MAX_MESSAGE};

/// Limits of a [`Channel`].
#[derive(Debug, Clone, Copy)]
pub struct ChannelOptions {
    /// Largest response message accepted (bytes, without the 5-byte frame header).
    pub max_message: usize,
    /// Deadline for dialling the socket and the HTTP/2 handshake together.
    pub connect_timeout: Duration,
    /// Largest header (and trailer) list accepted from the server, in bytes.
    pub max_header_list: u32,
}

impl Default for ChannelOptions {
    fn default() -> Self {
        Self {
            max_message: DEFAULT_MAX_MESSAGE,
            connect_timeout: Duration::from_secs(5),
            max_header_list: 64 * 1024,
        }
    }
}

/// One HTTP/2 connection to a gRPC server on a unix socket.
#[derive(Clone)]
pub struct Channel {
    send: h2::client::SendRequest<Bytes>,
    options: ChannelOptions,
}

impl Channel {
    /// Dials `path` with the default limits (see [`Channel::connect_with`]).
    pub async fn connect(path: &Path) -> Result<Self, GrpcError> {
        Self::connect_with(path, ChannelOptions::default()).await
    }

    /// Dials `path` and runs the HTTP/2 handshake within `options.connect_timeout`; the
    /// connection task runs on the current tokio runtime until the last clone of the channel is
    /// dropped or the server goes away.
    pub async fn connect_with(path: &Path, options: ChannelOptions) -> Result<Self, GrpcError> {
        let dial = async {
            let stream = UnixStream::connect(path)
                .await
                .map_err(|source| GrpcError::Connect {
                    path: path.to_path_buf(),
                    source,
                })?;
            let (send, connection) = h2::client::Builder::new()
                .max_header_list_size(options.max_header_list)
                .handshake::<_, Bytes>(stream)
                .await?;
            Ok::<_, GrpcError>((send, connection))
        };
        let (send, connection) = tokio::time::timeout(options.connect_timeout, dial)
            .await
            .map_err(|_| GrpcError::Timeout {
                method: format!("connect {}", path.display()),
                timeout: options.connect_timeout,
            })??;
        tokio::spawn(async move {
            // The connection ends when the server goes away or the channel is dropped; calls in
            // flight see that as a transport error, so nothing to report here.
            let _ = connection.await;
        });
        Ok(Self { send, options })
    }

    /// The limits in force.
    pub fn options(&self) -> ChannelOptions {
        self.options
    }

    /// Makes the unary call `method` (e.g. `/v1.PodResourcesLister/List`); the whole call,
    /// from waiting for a stream slot to the decoded message, finishes within `timeout`.
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
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("grpc-timeout", grpc_timeout(timeout))
            .body(())
            .map_err(|e| GrpcError::Protocol(format!("request: {e}")))?;

        let mut send = self.send.clone().ready().await?;
        let (response, mut stream) = send.send_request(http_request, false)?;
        stream.send_data(body, true)?;

        let response = response.await?;
        let (parts, mut body) = response.into_parts();
        if parts.status != http::StatusCode::OK {
            return Err(GrpcError::Protocol(format!(
                "response: HTTP status {}",
                parts.status
            )));
        }
        // A "trailers-only" answer carries the status in the headers and has no body.
        if let Some(status) = status_from(&parts.headers) {
            status?;
        }

        let limit = self.options.max_message;
        let mut data = BytesMut::new();
        let mut expected: Option<usize> = None;
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let len = chunk.len();
            if let Some(want) = expected {
                if data.len() + len > want + 5 {
                    return Err(GrpcError::Protocol(format!(
                        "response: more than the one {want}-byte message a unary call returns"
                    )));
                }
            } else if data.len() + len > limit + 5 {
                // Cannot happen before the header is in unless the header says so; checked anyway.
                return Err(GrpcError::TooLarge {
                    what: "response",
                    len: data.len() + len,
                    limit,
                });
            }
            data.extend_from_slice(&chunk);
            // Give the window back so a large answer keeps flowing.
            let _ = body.flow_control().release_capacity(len);
            if expected.is_none() {
                expected = announced_len(&data, limit, "response")?;
            }
        }
        let trailers = body.trailers().await?;
        match trailers.as_ref().and_then(status_from) {
            Some(status) => status?,
            None => {
                return Err(GrpcError::Protocol(
                    "response: no grpc-status in trailers".into(),
                ))
            }
        }
        // Decoding is CPU work the deadline cannot interrupt on this task: a large answer
        // decoded here held callers seconds past their deadline. On the blocking pool, the
        // deadline above still ends the call on time (the decoding finishes unobserved,
        // bounded by `max_message`).
        let data = data.freeze();
        tokio::task::spawn_blocking(move || decode_frame(data))
            .await
            .map_err(|e| GrpcError::Protocol(format!("message: decoding failed: {e}")))?
    }
}
