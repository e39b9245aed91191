//! NRI connection multiplexer: carries the Plugin and Runtime ttrpc services over one socket.
//!
//! Wire format (containerd/nri `pkg/net/multiplex`): every frame is a big-endian `u32`
//! connection id, a big-endian `u32` payload length, then the payload. There are no
//! open/close frames: both ends simply agree that id [`PLUGIN_SERVICE_CONN`] (1) carries the
//! Plugin service (the plugin is the ttrpc server) and id [`RUNTIME_SERVICE_CONN`] (2) the
//! Runtime service (the plugin is the ttrpc client). Frames for ids nobody opened are dropped.
//!
//! Interop trap: the Go side hands every frame to ttrpc through a 4096-byte read buffer and
//! fails the whole connection on a larger frame, so [`MuxConn`] never writes a payload
//! larger than [`MAX_WRITE_PAYLOAD`]. When reading, frames up to one full ttrpc message
//! ([`MAX_READ_PAYLOAD`]) are accepted; a larger announced length is treated as corruption.
//!
//! [`Mux::listener`] and [`Mux::socket`] wrap a logical connection in the transport types
//! of ttrpc's async `Server` and `Client`.
//!
//! Because frames for unopened ids are dropped, an end whose peer may speak first opens its
//! connections before reading: [`Mux::blocked`] starts without reading and [`Mux::unblock`]
//! lets the reader go once the connections are open (the Go side's `WithBlockedRead` and
//! `Unblock`, which containerd and the Go stub use). [`Mux::new`] reads at once.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures::channel::mpsc as fmpsc;
use futures::{Sink, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{mpsc, watch};
use ttrpc::asynchronous::transport::{Listener, Socket};

/// Identifier of a logical connection inside the multiplexed socket.
pub type ConnId = u32;

/// Connection id reserved by the protocol; never carries data.
pub const RESERVED_CONN: ConnId = 0;
/// Connection id of the Plugin service (runtime calls, plugin serves).
pub const PLUGIN_SERVICE_CONN: ConnId = 1;
/// Connection id of the Runtime service (plugin calls, runtime serves).
pub const RUNTIME_SERVICE_CONN: ConnId = 2;
/// Length of a frame header: connection id and payload length, both `u32` big-endian.
pub const HEADER_LEN: usize = 8;
/// Largest payload written in one frame (the Go reader's buffer size).
pub const MAX_WRITE_PAYLOAD: usize = 4096;
/// Largest payload accepted in one frame: one complete ttrpc message (10-byte header plus
/// 4 MiB body), the same bound the Go multiplexer uses.
pub const MAX_READ_PAYLOAD: usize = 10 + (4 << 20);

/// Frames buffered per logical connection before the reader waits for the consumer.
const READ_QUEUE_LEN: usize = 256;
/// Frames buffered for the trunk writer before writers wait.
const WRITE_QUEUE_LEN: usize = 64;
/// Bytes of queued frames the writer sends in one write: a large response (an exclusive
/// create's updates for thousands of shared containers, several hundred KiB) is queued as one
/// frame per 4 KiB, and a write and a flush each would be a hundred system calls. The frames
/// on the wire are the same.
const WRITE_BATCH: usize = 64 * 1024;
/// The trunk reader's buffer: a frame's header and payload, and the frames that follow it,
/// come in one system call instead of two per frame.
const READ_BUFFER: usize = 64 * 1024;

/// Why a multiplexer stopped, or why an operation on it failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MuxError {
    /// Id 0 is reserved by the protocol.
    #[error("connection id 0 is reserved")]
    ReservedId,
    /// The logical connection is already open in this multiplexer.
    #[error("connection id {0} is already open")]
    AlreadyOpen(ConnId),
    /// The peer closed the socket at a frame boundary.
    #[error("peer closed the connection")]
    PeerClosed,
    /// The peer closed the socket in the middle of a frame.
    #[error("truncated frame: the {part} ended after {got} of {want} bytes")]
    Truncated {
        /// `"header"` or `"payload"`.
        part: &'static str,
        /// Bytes received.
        got: usize,
        /// Bytes announced.
        want: usize,
    },
    /// A frame header announced a payload larger than any valid ttrpc message.
    #[error("frame for connection {id} announces {len} bytes, more than the limit of {max}")]
    Oversized {
        /// Connection id in the bad header.
        id: ConnId,
        /// Announced payload length.
        len: usize,
        /// Largest accepted payload.
        max: usize,
    },
    /// Reading or writing the socket failed.
    #[error("socket {op} failed: {msg}")]
    Io {
        /// `"read"` or `"write"`.
        op: &'static str,
        /// Kind of the underlying error.
        kind: io::ErrorKind,
        /// Text of the underlying error.
        msg: String,
    },
    /// The peer sent something on a service connection that its ttrpc server cannot follow
    /// (see [`framing`]): the connection would be out of step for good.
    #[error("malformed ttrpc message on connection {id}: {reason}")]
    BadFrame {
        /// The logical connection.
        id: ConnId,
        /// What was wrong.
        reason: String,
    },
    /// The ttrpc server of a service connection let go of it (it failed or ended) while the
    /// socket stayed up: nobody would answer the peer's requests any more.
    #[error("the service on connection {0} ended while the socket stayed open")]
    ServiceEnded(ConnId),
    /// [`Mux::close`] was called.
    #[error("multiplexer closed")]
    Closed,
}

impl MuxError {
    fn io(op: &'static str, err: &io::Error) -> Self {
        MuxError::Io {
            op,
            kind: err.kind(),
            msg: err.to_string(),
        }
    }

    /// True when the connection ended in an orderly way (peer hung up between frames, or
    /// a local close) rather than through corruption or an I/O error.
    pub fn is_clean_close(&self) -> bool {
        matches!(self, MuxError::PeerClosed | MuxError::Closed)
    }

    fn to_io(&self) -> io::Error {
        let kind = match self {
            MuxError::PeerClosed | MuxError::Closed => io::ErrorKind::BrokenPipe,
            MuxError::Truncated { .. } => io::ErrorKind::UnexpectedEof,
            MuxError::Oversized { .. } | MuxError::BadFrame { .. } => io::ErrorKind::InvalidData,
            MuxError::ServiceEnded(_) => io::ErrorKind::BrokenPipe,
            MuxError::Io { kind, .. } => *kind,
            MuxError::ReservedId | MuxError::AlreadyOpen(_) => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, self.clone())
    }
}

/// One frame queued for the trunk writer.
type Frame = (ConnId, Vec<u8>);

struct Shared {
    /// Open logical connections and the queue feeding each one.
    conns: Mutex<HashMap<ConnId, mpsc::Sender<Vec<u8>>>>,
    /// `None` while running, then the reason the multiplexer stopped.
    state: watch::Sender<Option<MuxError>>,
    /// `false` until the reader may start ([`Mux::unblock`]).
    reading: watch::Sender<bool>,
}

impl Shared {
    fn conns(&self) -> MutexGuard<'_, HashMap<ConnId, mpsc::Sender<Vec<u8>>>> {
        // A panic while holding this lock cannot leave the map inconsistent (single
        // insert/remove calls), so a poisoned lock is still usable.
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the first failure and wakes every reader; later failures are ignored.
    fn fail(&self, err: MuxError) {
        let first = self.state.send_if_modified(|state| {
            if state.is_none() {
                *state = Some(err.clone());
                true
            } else {
                false
            }
        });
        if first {
            if err.is_clean_close() {
                tracing::debug!(reason = %err, "nri mux stopped");
            } else {
                tracing::warn!(reason = %err, "nri mux failed");
            }
        }
        // Dropping the queue senders ends every connection's read side.
        self.conns().clear();
    }

    fn error(&self) -> Option<MuxError> {
        self.state.borrow().clone()
    }
}

/// Multiplexer over one byte stream (normally the NRI unix socket).
///
/// Creating it spawns a reader and a writer task on the current tokio runtime. The socket is
/// closed once the multiplexer stopped (peer hang-up, error, or [`Mux::close`]) and the
/// tasks noticed. Cloning gives another handle to the same multiplexer.
#[derive(Clone)]
pub struct Mux {
    shared: Arc<Shared>,
    writes: fmpsc::Sender<Frame>,
    closer: Arc<Closer>,
}

/// Held by every [`Mux`] handle and [`MuxConn`] (not by the I/O tasks): when the last one
/// is dropped nobody can use the socket any more, so the multiplexer stops and closes it.
struct Closer(Arc<Shared>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.fail(MuxError::Closed);
    }
}

impl Mux {
    /// Starts multiplexing `trunk`, reading at once. Must be called from within a tokio
    /// runtime.
    pub fn new<T>(trunk: T) -> Mux
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let mux = Mux::blocked(trunk);
        mux.unblock();
        mux
    }

    /// Starts multiplexing `trunk` without reading it until [`Mux::unblock`]: the
    /// connections opened before then receive everything the peer sends from its first
    /// frame. Writing works at once. Must be called from within a tokio runtime.
    pub fn blocked<T>(trunk: T) -> Mux
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (state, _) = watch::channel(None);
        let (reading, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            conns: Mutex::new(HashMap::new()),
            state,
            reading,
        });
        let (writes, frames) = fmpsc::channel(WRITE_QUEUE_LEN);
        let (reader, writer) = tokio::io::split(trunk);
        let reader = tokio::io::BufReader::with_capacity(READ_BUFFER, reader);
        tokio::spawn(read_loop(reader, shared.clone()));
        tokio::spawn(write_loop(writer, frames, shared.clone()));
        let closer = Arc::new(Closer(shared.clone()));
        Mux {
            shared,
            writes,
            closer,
        }
    }

    /// Lets a [`Mux::blocked`] multiplexer start reading; later calls do nothing.
    pub fn unblock(&self) {
        self.shared.reading.send_replace(true);
    }

    /// Opens logical connection `id`. Frames that arrived for `id` before it was opened
    /// were dropped (the protocol has no handshake).
    pub fn open(&self, id: ConnId) -> Result<MuxConn, MuxError> {
        if id == RESERVED_CONN {
            return Err(MuxError::ReservedId);
        }
        if let Some(err) = self.shared.error() {
            return Err(err);
        }
        let (tx, rx) = mpsc::channel(READ_QUEUE_LEN);
        {
            let mut conns = self.shared.conns();
            if conns.contains_key(&id) {
                return Err(MuxError::AlreadyOpen(id));
            }
            conns.insert(id, tx);
        }
        Ok(MuxConn {
            id,
            shared: self.shared.clone(),
            reads: rx,
            pending: Vec::new(),
            pending_pos: 0,
            writes: self.writes.clone(),
            shut: false,
            _closer: self.closer.clone(),
        })
    }

    /// Opens `id` and wraps it as a ttrpc listener that yields exactly that one connection
    /// (then stays pending, so ttrpc's `Server::shutdown` can still stop it).
    pub fn listener(&self, id: ConnId) -> Result<Listener, MuxError> {
        let conn = self.open(id)?;
        let once = futures::stream::once(async move { Ok::<_, io::Error>(conn) });
        Ok(Listener::new(once.chain(futures::stream::pending())))
    }

    /// Opens `id` for the ttrpc server of a service the peer calls (the Plugin service), as a
    /// listener like [`Mux::listener`]. The connection is essential: the peer's ttrpc headers
    /// are checked as they arrive ([`framing::RequestFraming`]) and a malformed one stops the
    /// whole multiplexer with [`MuxError::BadFrame`]; when the server lets go of the
    /// connection for any other reason it stops with [`MuxError::ServiceEnded`]. Either way
    /// [`Mux::closed`] returns, and the owner can drop the socket and start again instead of
    /// leaving a peer whose every request times out.
    pub fn service_listener(&self, id: ConnId) -> Result<Listener, MuxError> {
        let conn = service::ServiceConn::new(self.open(id)?);
        let once = futures::stream::once(async move { Ok::<_, io::Error>(conn) });
        Ok(Listener::new(once.chain(futures::stream::pending())))
    }

    /// Opens `id` and wraps it as a ttrpc socket for `ttrpc::asynchronous::Client::new`.
    pub fn socket(&self, id: ConnId) -> Result<Socket, MuxError> {
        Ok(Socket::new(self.open(id)?))
    }

    /// Stops the multiplexer: every logical connection ends and the socket is closed.
    /// Dropping every `Mux` handle and every [`MuxConn`] has the same effect.
    pub fn close(&self) {
        self.shared.fail(MuxError::Closed);
    }

    /// The reason the multiplexer stopped, or `None` while it runs.
    pub fn error(&self) -> Option<MuxError> {
        self.shared.error()
    }

    /// Waits until the multiplexer stops and returns why.
    pub async fn closed(&self) -> MuxError {
        let mut rx = self.shared.state.subscribe();
        let result = match rx.wait_for(|state| state.is_some()).await {
            Ok(state) => state.clone().unwrap_or(MuxError::Closed),
            Err(_) => MuxError::Closed,
        };
        result
    }
}

/// Fills `buf` from `reader`; returns how many bytes arrived before end of stream.
async fn read_full<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]).await {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads one frame. `Ok(None)` means the stream ended cleanly between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
) -> Result<Option<(ConnId, Vec<u8>)>, MuxError> {
    let mut header = [0u8; HEADER_LEN];
    let got = read_full(reader, &mut header)
        .await
        .map_err(|e| MuxError::io("read", &e))?;
    if got == 0 {
        return Ok(None);
    }
    if got < HEADER_LEN {
        return Err(MuxError::Truncated {
            part: "header",
            got,
            want: HEADER_LEN,
        });
    }
    let id = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    // Checked before allocating: a corrupt header must not make us reserve 4 GiB.
    if len > MAX_READ_PAYLOAD {
        return Err(MuxError::Oversized {
            id,
            len,
            max: MAX_READ_PAYLOAD,
        });
    }
    let mut payload = vec![0u8; len];
    let got = read_full(reader, &mut payload)
        .await
        .map_err(|e| MuxError::io("read", &e))?;
    if got < len {
        return Err(MuxError::Truncated {
            part: "payload",
            got,
            want: len,
        });
    }
    Ok(Some((id, payload)))
}

/// Encodes `payload` for connection `id` as frames of at most [`MAX_WRITE_PAYLOAD`] bytes.
pub fn encode_frames(id: ConnId, payload: &[u8]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(payload.len() + HEADER_LEN * payload.len().div_ceil(MAX_WRITE_PAYLOAD));
    for chunk in payload.chunks(MAX_WRITE_PAYLOAD) {
        push_frame(&mut out, id, chunk);
    }
    out
}

fn push_frame(out: &mut Vec<u8>, id: ConnId, chunk: &[u8]) {
    // Chunks never exceed MAX_WRITE_PAYLOAD, so the length always fits in u32.
    let len = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(chunk);
}

async fn read_loop<R: AsyncRead + Unpin>(mut reader: R, shared: Arc<Shared>) {
    let mut stopped = shared.state.subscribe();
    let mut reading = shared.reading.subscribe();
    tokio::select! {
        // The sender lives in `shared`, which this task holds, so this cannot fail.
        _ = reading.wait_for(|go| *go) => {}
        _ = stopped.wait_for(|s| s.is_some()) => return,
    }
    loop {
        let frame = tokio::select! {
            frame = read_frame(&mut reader) => frame,
            _ = stopped.wait_for(|s| s.is_some()) => return,
        };
        let (id, payload) = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => return shared.fail(MuxError::PeerClosed),
            Err(err) => return shared.fail(err),
        };
        if payload.is_empty() {
            // An empty read would look like end of stream to the consumer.
            continue;
        }
        let queue = shared.conns().get(&id).cloned();
        let Some(queue) = queue else {
            tracing::trace!(
                id,
                len = payload.len(),
                "nri mux: dropping frame for unopened id"
            );
            continue;
        };
        // Waiting here (instead of failing like the Go side) pushes back on the peer
        // when a consumer is slow.
        let sent = tokio::select! {
            sent = queue.send(payload) => sent,
            _ = stopped.wait_for(|s| s.is_some()) => return,
        };
        if sent.is_err() {
            // The consumer went away; later frames for this id are dropped.
            shared.conns().remove(&id);
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut frames: fmpsc::Receiver<Frame>,
    shared: Arc<Shared>,
) {
    let mut stopped = shared.state.subscribe();
    let mut buf = Vec::with_capacity(WRITE_BATCH + HEADER_LEN + MAX_WRITE_PAYLOAD);
    loop {
        let frame = tokio::select! {
            frame = frames.next() => frame,
            _ = stopped.wait_for(|s| s.is_some()) => break,
        };
        let Some((id, payload)) = frame else { break };
        buf.clear();
        push_frame(&mut buf, id, &payload);
        // The frames queued already go in the same write, whole and in order.
        while buf.len() < WRITE_BATCH {
            // Empty or closed: what is in `buf` goes now; the next `frames.next()` waits for
            // more (or sees the end).
            let Ok((id, payload)) = frames.try_recv() else {
                break;
            };
            push_frame(&mut buf, id, &payload);
        }
        let written = async {
            writer.write_all(&buf).await?;
            writer.flush().await
        };
        if let Err(e) = written.await {
            shared.fail(MuxError::io("write", &e));
            break;
        }
    }
    // Best effort: the peer learns about the end from the socket closing anyway.
    let _ = writer.shutdown().await;
}

/// One logical connection of a [`Mux`]: a byte stream for ttrpc.
///
/// Writes are cut into frames of at most [`MAX_WRITE_PAYLOAD`] bytes and queued for the
/// trunk writer; reads return the payloads received for this id, in order, across as
/// many calls as the caller's buffer needs. Dropping it unregisters the id.
pub struct MuxConn {
    id: ConnId,
    shared: Arc<Shared>,
    reads: mpsc::Receiver<Vec<u8>>,
    pending: Vec<u8>,
    pending_pos: usize,
    writes: fmpsc::Sender<Frame>,
    shut: bool,
    _closer: Arc<Closer>,
}

impl MuxConn {
    /// The connection id.
    pub fn id(&self) -> ConnId {
        self.id
    }

    fn closed_error(&self) -> io::Error {
        match self.shared.error() {
            Some(err) => err.to_io(),
            None => io::Error::new(io::ErrorKind::BrokenPipe, "connection shut down"),
        }
    }
}

impl AsyncRead for MuxConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.pending_pos >= this.pending.len() {
            match this.reads.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(payload)) => {
                    this.pending = payload;
                    this.pending_pos = 0;
                }
                Poll::Ready(None) => {
                    // Orderly end -> EOF; corruption or I/O failure -> an error that says why.
                    return match this.shared.error() {
                        Some(err) if !err.is_clean_close() => Poll::Ready(Err(err.to_io())),
                        _ => Poll::Ready(Ok(())),
                    };
                }
            }
        }
        let available = &this.pending[this.pending_pos..];
        let n = available.len().min(buf.remaining());
        buf.put_slice(&available[..n]);
        this.pending_pos += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for MuxConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.shut || this.shared.error().is_some() {
            return Poll::Ready(Err(this.closed_error()));
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        match Pin::new(&mut this.writes).poll_ready(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(_)) => return Poll::Ready(Err(this.closed_error())),
            Poll::Ready(Ok(())) => {}
        }
        // Accept at most one frame's worth; the caller (write_all) comes back for the rest.
        let n = data.len().min(MAX_WRITE_PAYLOAD);
        match Pin::new(&mut this.writes).start_send((this.id, data[..n].to_vec())) {
            Ok(()) => Poll::Ready(Ok(n)),
            Err(_) => Poll::Ready(Err(this.closed_error())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Frames are handed to the writer task whole; it flushes the socket after each.
        match self.shared.error() {
            Some(err) if !err.is_clean_close() => Poll::Ready(Err(err.to_io())),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The protocol has no close frame: shutting down only stops local writes.
        self.shut = true;
        Poll::Ready(Ok(()))
    }
}

impl Drop for MuxConn {
    fn drop(&mut self) {
        self.shared.conns().remove(&self.id);
    }
}

pub mod framing;
mod service;

#[cfg(test)]
mod tests;
