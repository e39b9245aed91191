//! `nrt.publish` on and the NodeResourceTopology CRD not installed: every request for the
//! resource is answered 404 with the Kubernetes Status body a real API server sends for a type
//! it does not serve (a fake server on 127.0.0.1: the real-server harness, tests/daemon/nrt_apiserver.rs,
//! always installs the CRD). The publisher tells it apart from other failures at once, does not
//! retry it within an attempt, waits `crd_retry` between attempts, and recovers when the CRD
//! appears.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nri_align::nrt::builder::{NrtSettings, ResourceNames, ZoneFree};
use nri_align::nrt::metrics::NrtMetrics;
use nri_align::nrt::publish::{PublishOptions, Publisher, Snapshot};
use nri_align::placement::{Allocator, PlacementConfig, Policy, Scope};
use nri_align::topology::desc::HostDesc;
use nri_align::topology::{CpuSet, Topology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What kube-apiserver answers for a resource type it does not serve.
const NOT_SERVED: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#;

/// Serves until the test ends: 404 for everything while `installed` is false; afterwards a
/// create (POST) is answered with the object it carries.
async fn fake_api_server(requests: Arc<AtomicUsize>, installed: Arc<AtomicBool>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let (requests, installed) = (requests.clone(), installed.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    // One request per connection (answered with `Connection: close`).
                    let Ok(n) = sock.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf);
                    let Some(head_end) = text.find("\r\n\r\n") else {
                        continue;
                    };
                    let length = text[..head_end]
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    if buf.len() < head_end + 4 + length {
                        continue;
                    }
                    break;
                }
                requests.fetch_add(1, Ordering::SeqCst);
                let text = String::from_utf8_lossy(&buf).into_owned();
                let post = text.starts_with("POST ");
                let (status, body) = if installed.load(Ordering::SeqCst) && post {
                    let body = text
                        .split_once("\r\n\r\n")
                        .map_or("", |(_, b)| b)
                        .to_string();
                    ("201 Created", body)
                } else {
                    ("404 Not Found", NOT_SERVED.to_string())
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    url
}

fn snapshot() -> Snapshot {
    let topo: Arc<Topology> = Arc::new(HostDesc::load("vm-2s4n").expect("host").to_topology());
    let alloc = Allocator::new(
        Arc::clone(&topo),
        PlacementConfig {
            policy: Policy::SingleNumaNode,
            reserved_cpus: CpuSet::parse_list("0").expect("cpus"),
            ..Default::default()
        },
    );
    Snapshot {
        free: alloc.free_by_node().iter().map(ZoneFree::from).collect(),
        topology: topo,
        pods: None,
    }
}

#[tokio::test]
async fn a_missing_crd_is_reported_as_such_and_retried_slowly() {
    let requests = Arc::new(AtomicUsize::new(0));
    let installed = Arc::new(AtomicBool::new(false));
    let url = fake_api_server(requests.clone(), installed.clone()).await;
    let config = kube::Config::new(url.parse().expect("url"));
    let client = kube::Client::try_from(config).expect("client");
    let options = PublishOptions {
        debounce: Duration::from_millis(10),
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_millis(20),
        crd_retry: Duration::from_millis(800),
        ..Default::default()
    };
    let metrics = NrtMetrics::default();
    let settings = NrtSettings {
        node_name: "worker-a".into(),
        policy: Policy::SingleNumaNode,
        scope: Scope::Container,
        reserved_cpus: CpuSet::parse_list("0").expect("cpus"),
        resources: ResourceNames::default(),
        owner: None,
        take_over_foreign: false,
    };
    let p = Publisher::spawn(client, settings, options, metrics.clone());
    let generation = p.update(snapshot());

    let status = p
        .wait_published(generation, Duration::from_millis(1500))
        .await;
    assert!(status.crd_missing, "{status:?}");
    let error = status.last_error.clone().unwrap_or_default();
    assert!(
        error.starts_with("crd-missing: CRD not installed: ")
            && error.contains("noderesourcetopologies.topology.node.k8s.io"),
        "{error}"
    );
    // About 1.5 s at one attempt per 0.8 s (a quarter of jitter): two attempts, each one GET
    // and one POST, never the backoff's dozens nor the conflict retries.
    let attempts = metrics.failures("crd-missing");
    assert!((1..=2).contains(&attempts), "{attempts} attempts");
    assert_eq!(metrics.failures("not-found"), 0);
    assert!(requests.load(Ordering::SeqCst) <= 2 * attempts as usize);

    // Installed meanwhile: the next retry creates the object and the flag clears.
    installed.store(true, Ordering::SeqCst);
    let status = p.wait_published(generation, Duration::from_secs(5)).await;
    assert!(status.published >= generation, "{status:?}");
    assert!(
        !status.crd_missing && status.last_error.is_none(),
        "{status:?}"
    );
}
