//! A small unary gRPC server on a unix socket: one handler function for every method, request
//! size bounded, connections capped, and a shutdown that drops every connection at once (a test
//! can make the server "go away" in the middle of a run).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::frame::{announced_len, frame_bytes, frame_payload, percent_encode};
use crate::{GrpcError, Status, DEFAULT_MAX_MESSAGE};

/// What a handler returns: the encoded response message, or a status.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Bytes, Status>> + Send>>;

/// Serves every call: gets the full method path (`/v1.PodResourcesLister/List`) and the encoded
/// request message.
pub type Handler = Arc<dyn Fn(String, Bytes) -> HandlerFuture + Send + Sync>;

/// Limits of a [`Server`].
#[derive(Debug, Clone, Copy)]
pub struct ServerOptions {
    /// Largest request message accepted.
    pub max_request: usize,
    /// Most connections served at once; more wait in the listen queue.
    pub max_connections: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            max_request: DEFAULT_MAX_MESSAGE,
            max_connections: 64,
        }
    }
}

/// A running server. Dropping it (or [`Server::shutdown`]) stops accepting, drops every
/// connection and removes the socket file.
pub struct Server {
    path: PathBuf,
    accept: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Binds `path` (replacing a stale socket file there, nothing else) and serves `handler`
    /// on the current tokio runtime.
    pub fn bind(path: &Path, handler: Handler, options: ServerOptions) -> Result<Self, GrpcError> {
        use std::os::unix::fs::FileTypeExt;
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if meta.file_type().is_socket() {
                let _ = std::fs::remove_file(path);
            }
        }
        let listener = UnixListener::bind(path).map_err(|source| GrpcError::Serve {
            path: path.to_path_buf(),
            source,
        })?;
        let accept = tokio::spawn(accept_loop(listener, handler, options));
        Ok(Self {
            path: path.to_path_buf(),
            accept,
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops the server: no new connection, every open one dropped, socket file removed.
    pub async fn shutdown(mut self) {
        self.accept.abort();
        // Wait until the task (and with it every connection task) is gone; Drop then removes
        // the socket file.
        let _ = (&mut self.accept).await;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn accept_loop(listener: UnixListener, handler: Handler, options: ServerOptions) {
    // Dropping this set (when the accept task is aborted) aborts every connection task.
    let mut connections = JoinSet::new();
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // EMFILE and friends: back off instead of spinning on accept.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let handler = handler.clone();
        connections.spawn(async move {
            serve_connection(stream, handler, options).await;
            drop(permit);
        });
        // Reap finished connections so the set does not grow with the connection count.
        while connections.try_join_next().is_some() {}
    }
}

async fn serve_connection(stream: UnixStream, handler: Handler, options: ServerOptions) {
    let Ok(mut conn) = h2::server::Builder::new()
        .max_header_list_size(64 * 1024)
        .handshake::<_, Bytes>(stream)
        .await
    else {
        return;
    };
    let mut calls = JoinSet::new();
    while let Some(Ok((request, respond))) = conn.accept().await {
        let handler = handler.clone();
        calls.spawn(async move {
            let _ = serve_call(request, respond, handler, options).await;
        });
        while calls.try_join_next().is_some() {}
    }
}

async fn serve_call(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    handler: Handler,
    options: ServerOptions,
) -> Result<(), GrpcError> {
    let method = request.uri().path().to_string();
    if request.method() != http::Method::POST {
        return send_status(&mut respond, &Status::new(12, "only POST is served"));
    }
    let mut body = request.into_body();
    let mut data = BytesMut::new();
    let mut expected: Option<usize> = None;
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let len = chunk.len();
        let cap = expected.unwrap_or(options.max_request) + 5;
        if data.len() + len > cap {
            let status = Status::new(8, format!("request over {} bytes", cap - 5));
            return send_status(&mut respond, &status);
        }
        data.extend_from_slice(&chunk);
        let _ = body.flow_control().release_capacity(len);
        if expected.is_none() {
            match announced_len(&data, options.max_request, "request") {
                Ok(e) => expected = e,
                Err(e) => return send_status(&mut respond, &Status::new(8, e.to_string())),
            }
        }
    }
    let payload = match frame_payload(data.freeze(), "request") {
        Ok(p) => p,
        Err(e) => return send_status(&mut respond, &Status::new(13, e.to_string())),
    };
    match handler(method, payload).await {
        Ok(message) => {
            let response = http::Response::builder()
                .status(http::StatusCode::OK)
                .header("content-type", "application/grpc")
                .body(())
                .map_err(|e| GrpcError::Protocol(format!("response: {e}")))?;
            let mut stream = respond.send_response(response, false)?;
            stream.send_data(frame_bytes(&message)?, false)?;
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            stream.send_trailers(trailers)?;
            Ok(())
        }
        Err(status) => send_status(&mut respond, &status),
    }
}

/// A trailers-only response: the status in the headers, no body.
fn send_status(
    respond: &mut h2::server::SendResponse<Bytes>,
    status: &Status,
) -> Result<(), GrpcError> {
    let mut builder = http::Response::builder()
        .status(http::StatusCode::OK)
        .header("content-type", "application/grpc")
        .header("grpc-status", status.code.to_string());
    if !status.message.is_empty() {
        builder = builder.header("grpc-message", percent_encode(&status.message));
    }
    let response = builder
        .body(())
        .map_err(|e| GrpcError::Protocol(format!("response: {e}")))?;
    respond.send_response(response, true)?;
    Ok(())
}
