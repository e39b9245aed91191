//! The tiny HTTP/1.1 responder of the metrics listener: `GET /metrics`, `/healthz` and
//! `/readyz` (and `HEAD` of each), one request per connection.
//!
//! It faces whatever can reach the port (the DaemonSet serves it on the node's address), so
//! every resource it takes is bounded ([`ServeLimits`]), and none of the bounds can make a
//! probe wait: every connection is accepted at once, then held or closed by a table of held
//! connections (`fair.rs`): at most `max_connections` held, at most `max_per_peer` from one
//! address, and at the cap a newcomer takes the place of the oldest connection of the address
//! holding the most (so 8 addresses holding 16 slow requests each, or 3,000 idle connections,
//! leave `/healthz` from another address answered at once); at its address's share, the place
//! of that address's oldest connection still waiting for its request (so 16 slow requests from
//! the probe's own address leave it answered too). A connection must send its first
//! byte within `idle_timeout`, its whole request head (at most `max_request_bytes`) within
//! `header_timeout`, and be done within `request_timeout`. An accept error (out of file
//! descriptors, out of memory) is retried after a growing pause instead of at once, which
//! spun a core and starved the rest of the daemon.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Health, Metrics};

mod fair;

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Bounds of the responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// Connections held at once; at the cap a new one takes the place of a connection of the
    /// address holding the most, when that address holds more than the new one's.
    pub max_connections: usize,
    /// Connections held at once for one client address; a newcomer past it takes the place of
    /// the address's oldest connection still waiting for its request, or is closed at once.
    pub max_per_peer: usize,
    /// Largest request head (request line and headers) read.
    pub max_request_bytes: usize,
    /// Time from the connection to the request's first byte.
    pub idle_timeout: Duration,
    /// Time from the connection to the end of the request head.
    pub header_timeout: Duration,
    /// Time for one whole exchange: reading the request and writing the answer.
    pub request_timeout: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            max_connections: 64,
            max_per_peer: 16,
            max_request_bytes: 8 * 1024,
            // The kubelet and Prometheus send their request as soon as they are connected; a
            // client silent for a second is holding a place, not asking.
            idle_timeout: Duration::from_secs(1),
            // A request head is one packet; 2 s covers a lossy link's retransmissions.
            header_timeout: Duration::from_secs(2),
            // Prometheus scrapes time out after 10 s; writing the metrics takes milliseconds.
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// Binds `addr` and serves metrics and health until the task is dropped. Returns the bound
/// address (useful with port 0) and the server task.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    limits: ServeLimits,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(accept_loop(listener, metrics, health, limits));
    Ok((local, task))
}

async fn accept_loop(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    limits: ServeLimits,
) {
    let table = Arc::new(fair::Table::default());
    let mut failures = AcceptFailures::default();
    loop {
        let (conn, peer) = match listener.accept().await {
            Ok(accepted) => {
                failures.recovered();
                accepted
            }
            Err(err) => {
                let pause = failures.failed(&err);
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        let slot = match table.admit(peer.ip(), limits.max_connections, limits.max_per_peer) {
            fair::Admission::Admitted(slot) => slot,
            fair::Admission::Refused => {
                tracing::debug!(%peer, "metrics listener: this address holds its share of connections; closing");
                continue;
            }
        };
        let id = slot.id();
        let (metrics, health) = (metrics.clone(), health.clone());
        let answering = table.clone();
        let task = tokio::spawn(async move {
            let _ = tokio::time::timeout(
                limits.request_timeout,
                exchange(conn, &metrics, &health, &limits, || answering.answering(id)),
            )
            .await;
            drop(slot);
        });
        // The slot is in the task: the table keeps only the handle to end it early.
        table.set_abort(id, task.abort_handle());
    }
}

/// One request and its answer; `answering` is called once the request is in.
async fn exchange(
    mut conn: TcpStream,
    metrics: &Metrics,
    health: &Health,
    limits: &ServeLimits,
    answering: impl FnOnce(),
) {
    let max = limits.max_request_bytes;
    let head = tokio::time::timeout(
        limits.header_timeout,
        read_request_head(&mut conn, max, limits.idle_timeout),
    )
    .await
    .unwrap_or(Head::Gone);
    if !matches!(head, Head::Gone) {
        answering();
    }
    let response = match head {
        Head::Line(line) => respond(&line, metrics, health),
        Head::TooLarge => response(
            "431 Request Header Fields Too Large",
            "text/plain",
            format!("request head over {max} bytes\n"),
            false,
        ),
        Head::Gone => return,
    };
    let _ = conn.write_all(response.as_bytes()).await;
    let _ = conn.shutdown().await;
}

enum Head {
    /// The request line of a complete head.
    Line(String),
    /// The head passed the limit.
    TooLarge,
    /// The client closed, sent nothing in time, or the read failed before a complete head.
    Gone,
}

/// Reads up to the end of the request head (at most `max` bytes, the first of them within
/// `idle`) and returns its first line.
async fn read_request_head(conn: &mut TcpStream, max: usize, idle: Duration) -> Head {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = find_head_end(&buf) {
            let text = String::from_utf8_lossy(&buf[..end]);
            return Head::Line(text.lines().next().unwrap_or("").to_string());
        }
        if buf.len() >= max {
            return Head::TooLarge;
        }
        let room = (max - buf.len()).min(chunk.len());
        let read = conn.read(&mut chunk[..room]);
        let read = if buf.is_empty() {
            match tokio::time::timeout(idle, read).await {
                Ok(r) => r,
                Err(_) => return Head::Gone,
            }
        } else {
            read.await
        };
        match read {
            Ok(0) | Err(_) => return Head::Gone,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

fn respond(request_line: &str, metrics: &Metrics, health: &Health) -> String {
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let head_only = method == "HEAD";
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return response(
            "404 Not Found",
            "text/plain",
            "try /metrics, /healthz or /readyz\n".into(),
            head_only,
        );
    }
    if !matches!(method, "GET" | "HEAD") {
        return response(
            "405 Method Not Allowed",
            "text/plain",
            "GET or HEAD only\n".into(),
            false,
        );
    }
    let (status, body) = match path {
        "/metrics" => return response("200 OK", CONTENT_TYPE, metrics.encode(), head_only),
        "/healthz" => match health.liveness() {
            Ok(text) => ("200 OK", format!("{text}\n")),
            Err(why) => ("503 Service Unavailable", format!("unhealthy: {why}\n")),
        },
        _ => {
            let (status, mut body) = match health.readiness() {
                Ok(text) => ("200 OK", format!("ready: {text}\n")),
                Err(why) => ("503 Service Unavailable", format!("not ready: {why}\n")),
            };
            // Listed, never a reason to fail readiness (see health.rs).
            for line in health.degraded() {
                body.push_str(&format!("degraded: {line}\n"));
            }
            (status, body)
        }
    };
    response(status, "text/plain; charset=utf-8", body, head_only)
}

fn response(status: &str, ctype: &str, body: String, head_only: bool) -> String {
    let mut text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n",
        body.len()
    );
    if status.starts_with("405") {
        text.push_str("Allow: GET, HEAD\r\n");
    }
    text.push_str("\r\n");
    if !head_only {
        text.push_str(&body);
    }
    text
}

/// A run of failed accepts: how long to pause before the next one, and what to log (the first
/// failure, then at most one line every 30 s, then the recovery).
#[derive(Default)]
struct AcceptFailures {
    count: u64,
    pause: Duration,
    last_log: Option<Instant>,
}

const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_secs(1);
const LOG_EVERY: Duration = Duration::from_secs(30);

impl AcceptFailures {
    fn failed(&mut self, err: &std::io::Error) -> Duration {
        self.count += 1;
        self.pause = if self.pause.is_zero() {
            FIRST_PAUSE
        } else {
            (self.pause * 2).min(MAX_PAUSE)
        };
        let due = match self.last_log {
            None => true,
            Some(t) => t.elapsed() >= LOG_EVERY,
        };
        if due {
            self.last_log = Some(Instant::now());
            tracing::warn!(
                error = %err,
                failures = self.count,
                pause = ?self.pause,
                "metrics listener cannot accept connections; pausing"
            );
        }
        self.pause
    }

    fn recovered(&mut self) {
        if self.count > 0 {
            tracing::info!(
                failures = self.count,
                "metrics listener accepts connections again"
            );
        }
        *self = AcceptFailures::default();
    }
}

#[cfg(test)]
mod tests;
