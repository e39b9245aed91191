//! The tiny HTTP/1.1 responder of the metrics: `GET /metrics` on the configured address, one
//! request per connection, a bounded read and a time limit per connection.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::Metrics;

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
    use crate::metrics::NodeFreeSample;
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
            rdma_nics: 1,
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
        assert!(resp.contains("nri_align_free_rdma_nics{numa_node=\"1\"} 1"));
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
