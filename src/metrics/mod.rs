//! Prometheus metrics of the plugin and the tiny HTTP responder that serves them at
//! `GET /metrics` on the configured address.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Labels of an admission.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// Policy in force.
    pub policy: String,
    /// "true" when every resource ended up on the chosen nodes.
    pub aligned: String,
}

/// Labels of a rejection.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Short reason (`unalignable`, `invalid-annotation`, `bad-request`...).
    pub reason: String,
}

/// Labels of a per-node gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    /// NUMA node id.
    pub node: String,
}

/// Free resources of one NUMA node (filled from the allocator).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFreeSample {
    /// Node id.
    pub node: u32,
    /// Free CPUs (neither reserved nor exclusively allocated).
    pub cpus: u64,
    /// Free memory in bytes.
    pub memory_bytes: u64,
    /// Free GPUs.
    pub gpus: u64,
}

/// Every metric nri-align exports.
pub struct Metrics {
    registry: Registry,
    admissions: Family<AdmissionLabels, Counter>,
    rejections: Family<ReasonLabels, Counter>,
    latency: Histogram,
    free_cpus: Family<NodeLabels, Gauge>,
    free_memory: Family<NodeLabels, Gauge>,
    free_gpus: Family<NodeLabels, Gauge>,
    // Serialises encoding with updates of the node gauges so a scrape sees one snapshot.
    snapshot: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric registered under the `nri_align` prefix.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("nri_align");
        let admissions = Family::<AdmissionLabels, Counter>::default();
        let rejections = Family::<ReasonLabels, Counter>::default();
        // 50 µs .. ~0.8 s: decisions are sub-millisecond; the runtime times out at 2 s.
        let latency = Histogram::new(exponential_buckets(0.000_05, 2.0, 15));
        let free_cpus = Family::<NodeLabels, Gauge>::default();
        let free_memory = Family::<NodeLabels, Gauge>::default();
        let free_gpus = Family::<NodeLabels, Gauge>::default();
        registry.register("admissions", "Containers admitted", admissions.clone());
        registry.register(
            "rejections",
            "Containers rejected, by reason",
            rejections.clone(),
        );
        registry.register(
            "decision_duration_seconds",
            "Time to decide one container",
            latency.clone(),
        );
        registry.register("free_cpus", "Free CPUs per NUMA node", free_cpus.clone());
        registry.register(
            "free_memory_bytes",
            "Unallocated memory per NUMA node",
            free_memory.clone(),
        );
        registry.register("free_gpus", "Free GPUs per NUMA node", free_gpus.clone());
        Metrics {
            registry,
            admissions,
            rejections,
            latency,
            free_cpus,
            free_memory,
            free_gpus,
            snapshot: Mutex::new(()),
        }
    }

    /// Counts an admission and its decision time.
    pub fn admitted(&self, policy: &str, aligned: bool, took: Duration) {
        self.admissions
            .get_or_create(&AdmissionLabels {
                policy: policy.to_string(),
                aligned: aligned.to_string(),
            })
            .inc();
        self.latency.observe(took.as_secs_f64());
    }

    /// Counts a rejection and its decision time.
    pub fn rejected(&self, reason: &str, took: Duration) {
        self.rejections
            .get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            })
            .inc();
        self.latency.observe(took.as_secs_f64());
    }

    /// Replaces the per-node free gauges.
    pub fn set_free(&self, nodes: &[NodeFreeSample]) {
        let _guard = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for n in nodes {
            let l = NodeLabels {
                node: n.node.to_string(),
            };
            self.free_cpus.get_or_create(&l).set(gauge(n.cpus));
            self.free_memory
                .get_or_create(&l)
                .set(gauge(n.memory_bytes));
            self.free_gpus.get_or_create(&l).set(gauge(n.gpus));
        }
    }

    /// The text exposition (OpenMetrics).
    pub fn encode(&self) -> String {
        let _guard = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `addr` and serves `GET /metrics` until the task is dropped. Returns the bound address
/// (useful with port 0) and the server task.
pub async fn serve(
    addr: SocketAddr,
    metrics: std::sync::Arc<Metrics>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(5), async {
                    let response = match read_request_line(&mut conn).await {
                        Some(line) => respond(&line, &metrics),
                        None => return,
                    };
                    let _ = conn.write_all(response.as_bytes()).await;
                    let _ = conn.shutdown().await;
                })
                .await;
            });
        }
    });
    Ok((local, task))
}

/// Reads up to the end of the headers (at most 8 KiB) and returns the request line.
async fn read_request_line(conn: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    text.lines().next().map(str::to_string)
}

fn respond(request_line: &str, metrics: &Metrics) -> String {
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET", "/metrics") => ("200 OK", CONTENT_TYPE, metrics.encode()),
        (_, "/metrics") => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
        _ => ("404 Not Found", "text/plain", "try /metrics\n".into()),
    };
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    async fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(request.as_bytes()).await.expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        out
    }

    #[tokio::test]
    async fn serves_counters_histogram_and_node_gauges_over_loopback() {
        let m = Arc::new(Metrics::new());
        m.admitted("single-numa-node", true, Duration::from_micros(300));
        m.admitted("single-numa-node", true, Duration::from_micros(300));
        m.rejected("unalignable", Duration::from_millis(1));
        m.set_free(&[NodeFreeSample {
            node: 1,
            cpus: 6,
            memory_bytes: 1 << 30,
            gpus: 2,
        }]);
        let (addr, task) = serve("127.0.0.1:0".parse().expect("addr"), m.clone())
            .await
            .expect("bind");
        let resp = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
        assert!(
            resp.contains(
                "nri_align_admissions_total{policy=\"single-numa-node\",aligned=\"true\"} 2"
            ),
            "{resp}"
        );
        assert!(resp.contains("nri_align_rejections_total{reason=\"unalignable\"} 1"));
        assert!(resp.contains("nri_align_decision_duration_seconds_count 3"));
        assert!(resp.contains("nri_align_free_cpus{node=\"1\"} 6"));
        assert!(resp.contains("nri_align_free_gpus{node=\"1\"} 2"));
        assert!(resp.contains("nri_align_free_memory_bytes{node=\"1\"} 1073741824"));
        let body = resp.split("\r\n\r\n").nth(1).expect("body");
        assert!(resp.contains(&format!("Content-Length: {}", body.len())));
        let missing = get(addr, "GET / HTTP/1.1\r\n\r\n").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        let post = get(addr, "POST /metrics HTTP/1.1\r\n\r\n").await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        task.abort();
    }
}
