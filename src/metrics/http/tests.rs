//! The responder over real loopback sockets: what each endpoint answers, and that clients
//! holding connections open neither block other clients nor keep their slots.

use super::*;
use crate::metrics::NodeFreeSample;

async fn start(
    limits: ServeLimits,
) -> (
    SocketAddr,
    Arc<Metrics>,
    Arc<Health>,
    tokio::task::JoinHandle<()>,
) {
    let m = Arc::new(Metrics::new());
    let h = Arc::new(Health::default());
    let (addr, task) = serve(
        "127.0.0.1:0".parse().expect("addr"),
        m.clone(),
        h.clone(),
        limits,
    )
    .await
    .expect("bind");
    (addr, m, h, task)
}

/// A connection from `source` (any address of 127.0.0.0/8) to `addr`.
async fn connect_from(source: &str, addr: SocketAddr) -> TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().expect("socket");
    sock.bind(format!("{source}:0").parse().expect("source"))
        .expect("bind source");
    sock.connect(addr).await.expect("connect")
}

async fn get_from(source: &str, addr: SocketAddr, request: &str) -> String {
    let mut s = connect_from(source, addr).await;
    s.write_all(request.as_bytes()).await.expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    out
}

async fn get(addr: SocketAddr, request: &str) -> String {
    get_from("127.0.0.1", addr, request).await
}

/// Whether the server closed `conn` (a read returns end of file or a reset).
async fn closed_by_server(conn: &mut TcpStream, within: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(within, conn.read(&mut byte)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test]
async fn serves_counters_histogram_node_gauges_and_build_info() {
    let (addr, m, _h, task) = start(ServeLimits::default()).await;
    m.admitted("single-numa-node", true, Duration::from_micros(300));
    m.admitted("single-numa-node", true, Duration::from_micros(300));
    m.rejected("unalignable", Duration::from_millis(1));
    m.set_free(&[NodeFreeSample {
        node: 1,
        cpus: 6,
        headroom_cpus: 2,
        memory_bytes: 1 << 30,
        gpus: 2,
        rdma_nics: 1,
    }]);
    m.set_runtime_link(true, 2);
    m.config_reloaded(false);
    let resp = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    for line in [
        "nri_align_admissions_total{policy=\"single-numa-node\",aligned=\"true\"} 2",
        "nri_align_rejections_total{reason=\"unalignable\"} 1",
        "nri_align_decision_duration_seconds_count 3",
        "nri_align_free_cpus{numa_node=\"1\"} 6",
        "nri_align_exclusive_headroom_cpus{numa_node=\"1\"} 2",
        "nri_align_free_gpus{numa_node=\"1\"} 2",
        "nri_align_free_rdma_nics{numa_node=\"1\"} 1",
        "nri_align_free_memory_bytes{numa_node=\"1\"} 1073741824",
        "nri_align_runtime_connected 1",
        "nri_align_runtime_connections_total 2",
        "nri_align_config_reloads_total{outcome=\"rejected\"} 1",
        "nri_align_config_last_reload_successful 0",
    ] {
        assert!(resp.lines().any(|l| l == line), "{line} not in\n{resp}");
    }
    let build = format!(
        "nri_align_build_info{{version=\"{}\",revision=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        env!("NRI_ALIGN_GIT_REVISION")
    );
    assert!(resp.lines().any(|l| l == build), "{build} not in\n{resp}");
    let body = resp.split("\r\n\r\n").nth(1).expect("body");
    assert!(resp.contains(&format!("Content-Length: {}", body.len())));
    task.abort();
}

#[tokio::test]
async fn health_endpoints_answer_get_and_head_with_their_reason() {
    let (addr, _m, h, task) = start(ServeLimits::default()).await;
    let healthz = get(addr, "GET /healthz HTTP/1.1\r\n\r\n").await;
    assert!(
        healthz.starts_with("HTTP/1.1 200 OK") && healthz.ends_with("\r\n\r\nok\n"),
        "{healthz}"
    );
    let readyz = get(addr, "GET /readyz HTTP/1.1\r\n\r\n").await;
    assert!(
        readyz.starts_with("HTTP/1.1 503") && readyz.ends_with("not ready: starting\n"),
        "{readyz}"
    );
    h.set_readiness(
        true,
        "registered and synchronized with containerd 2.1.9".into(),
    );
    let readyz = get(addr, "GET /readyz?verbose HTTP/1.1\r\n\r\n").await;
    assert!(
        readyz.starts_with("HTTP/1.1 200 OK")
            && readyz.ends_with("ready: registered and synchronized with containerd 2.1.9\n"),
        "{readyz}"
    );
    // A degraded part is listed after the readiness line and leaves the status alone.
    h.set_degraded("state", Some("writes failing since 12:00:00".into()));
    let readyz = get(addr, "GET /readyz HTTP/1.1\r\n\r\n").await;
    assert!(
        readyz.starts_with("HTTP/1.1 200 OK")
            && readyz.ends_with(
                "ready: registered and synchronized with containerd 2.1.9\n\
                 degraded: state: writes failing since 12:00:00\n"
            ),
        "{readyz}"
    );
    h.set_degraded("state", None);
    // HEAD: the same status and length, no body.
    let head = get(addr, "HEAD /readyz HTTP/1.1\r\n\r\n").await;
    assert!(
        head.starts_with("HTTP/1.1 200 OK") && head.ends_with("\r\n\r\n"),
        "{head}"
    );
    assert!(!head.contains("Content-Length: 0"), "{head}");
    h.set_readiness(false, "connecting to /run/nri.sock".into());
    let head = get(addr, "HEAD /readyz HTTP/1.1\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    // Other paths and methods.
    let missing = get(addr, "GET / HTTP/1.1\r\n\r\n").await;
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    let post = get(addr, "POST /healthz HTTP/1.1\r\n\r\n").await;
    assert!(
        post.starts_with("HTTP/1.1 405") && post.contains("Allow: GET, HEAD"),
        "{post}"
    );
    task.abort();
}

#[tokio::test]
async fn an_oversized_request_head_is_refused() {
    let limits = ServeLimits {
        max_request_bytes: 512,
        ..ServeLimits::default()
    };
    let (addr, _m, _h, task) = start(limits).await;
    let big = format!(
        "GET /metrics HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(4096)
    );
    let mut s = connect_from("127.0.0.1", addr).await;
    // The server may close before reading everything: a failed write is fine.
    let _ = s.write_all(big.as_bytes()).await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 431"), "{out}");
    task.abort();
}

#[tokio::test]
async fn a_client_holding_connections_open_does_not_block_others_and_is_cut_off() {
    let limits = ServeLimits {
        max_connections: 8,
        max_per_peer: 3,
        // Long enough that the checks below run before it cuts the 3 served connections off.
        request_timeout: Duration::from_secs(3),
        ..ServeLimits::default()
    };
    let (addr, _m, _h, task) = start(limits).await;
    // A slow client on 127.0.0.2 opens 10 connections and sends half a request on each.
    let mut held = Vec::new();
    for _ in 0..10 {
        let mut c = connect_from("127.0.0.2", addr).await;
        let _ = c.write_all(b"GET /metrics HTTP/1.1\r\n").await;
        held.push(c);
    }
    // Another address is answered at once, while the slow one's connections are still open.
    let resp = get(addr, "GET /healthz HTTP/1.1\r\n\r\n").await;
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    // Past its 3 slots the slow client was closed right away; its 3 served connections are
    // closed by the time limit.
    let mut closed_at_once = 0;
    for c in held.iter_mut() {
        if closed_by_server(c, Duration::from_millis(100)).await {
            closed_at_once += 1;
        }
    }
    assert_eq!(closed_at_once, 7, "connections beyond the per-address cap");
    for c in held.iter_mut() {
        assert!(
            closed_by_server(c, Duration::from_secs(5)).await,
            "a connection outlived the request time limit"
        );
    }
    task.abort();
}

#[tokio::test]
async fn at_the_connection_cap_a_new_address_takes_the_place_of_the_one_holding_the_most() {
    let limits = ServeLimits {
        max_connections: 4,
        max_per_peer: 16,
        ..ServeLimits::default()
    };
    let (addr, _m, _h, task) = start(limits).await;
    // 127.0.0.2 holds 3 idle connections, 127.0.0.3 one: the cap.
    let mut held = Vec::new();
    for source in ["127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.3"] {
        held.push(connect_from(source, addr).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The probe is answered at once; 127.0.0.2's oldest connection made way for it.
    let resp = tokio::time::timeout(
        Duration::from_secs(1),
        get(addr, "GET /healthz HTTP/1.1\r\n\r\n"),
    )
    .await
    .expect("answered at once");
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    assert!(closed_by_server(&mut held[0], Duration::from_millis(500)).await);
    // The idle ones left are closed once they have sent nothing for the idle limit.
    for c in held.iter_mut().skip(1) {
        assert!(closed_by_server(c, Duration::from_secs(3)).await);
    }
    task.abort();
}

/// Raises this process's soft limit on open files to `want` (within the hard limit): the tests
/// below hold thousands of sockets.
fn raise_fd_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// `/healthz` and `/readyz` from another address, each within a second, `rounds` times.
async fn probes_answer_within_a_second(addr: SocketAddr, rounds: usize) {
    for round in 0..rounds {
        for (source, path) in [("127.0.0.1", "/healthz"), ("127.0.0.10", "/readyz")] {
            let started = Instant::now();
            let resp = tokio::time::timeout(
                Duration::from_secs(1),
                get_from(source, addr, &format!("GET {path} HTTP/1.1\r\n\r\n")),
            )
            .await
            .unwrap_or_else(|_| {
                panic!("{path} from {source}: no answer within 1 s (round {round})")
            });
            assert!(resp.starts_with("HTTP/1.1 "), "{resp}");
            assert!(started.elapsed() < Duration::from_secs(1));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_while_8_addresses_hold_16_slow_requests_each() {
    let (addr, _m, _h, task) = start(ServeLimits::default()).await;
    let mut slow = Vec::new();
    for i in 0..16 {
        for a in 2..10 {
            let mut c = connect_from(&format!("127.0.0.{a}"), addr).await;
            let _ = c.write_all(b"GET /metrics HTTP/1.1\r\n").await;
            slow.push((i, c));
        }
    }
    // A byte every 200 ms on each: never idle, never done.
    let trickle = tokio::spawn(async move {
        loop {
            for (_, c) in slow.iter_mut() {
                let _ = c.write_all(b"X").await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    probes_answer_within_a_second(addr, 6).await;
    trickle.abort();
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_while_their_own_address_holds_its_share_of_slow_requests() {
    let limits = ServeLimits::default();
    let (addr, _m, _h, task) = start(limits).await;
    // The node's address, shared by the kubelet's probes and every host-network client: 16
    // slow requests from it, a byte every 200 ms, each held until the request time limit.
    let mut slow = Vec::new();
    for _ in 0..limits.max_per_peer {
        let mut c = connect_from("127.0.0.1", addr).await;
        let _ = c.write_all(b"GET /metrics HTTP/1.1\r\n").await;
        slow.push(c);
    }
    let trickle = tokio::spawn(async move {
        loop {
            for c in slow.iter_mut() {
                let _ = c.write_all(b"X").await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    probes_answer_within_a_second(addr, 3).await;
    trickle.abort();
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_while_3000_idle_connections_are_open() {
    raise_fd_limit(8192);
    let (addr, _m, _h, task) = start(ServeLimits::default()).await;
    let started = Instant::now();
    let mut idle = Vec::new();
    for i in 0..3000 {
        let source = format!("127.0.0.{}", 2 + i % 8);
        // Bounded: where the server stops accepting, the kernel's backlog fills and connects
        // hang; the probes below then tell.
        match tokio::time::timeout(Duration::from_millis(200), connect_from(&source, addr)).await {
            Ok(c) => idle.push(c),
            Err(_) => break,
        }
        if started.elapsed() > Duration::from_secs(20) {
            break;
        }
    }
    probes_answer_within_a_second(addr, 3).await;
    assert!(idle.len() >= 1000, "only {} connections opened", idle.len());
    drop(idle);
    task.abort();
}

#[test]
fn accept_failures_pause_longer_each_time_up_to_a_second() {
    let mut f = AcceptFailures::default();
    let err = std::io::Error::from_raw_os_error(libc_emfile());
    let pauses: Vec<Duration> = (0..10).map(|_| f.failed(&err)).collect();
    assert_eq!(pauses[0], FIRST_PAUSE);
    assert!(pauses.windows(2).all(|w| w[1] >= w[0]));
    assert_eq!(*pauses.last().expect("pauses"), MAX_PAUSE);
    f.recovered();
    assert_eq!(f.failed(&err), FIRST_PAUSE);
}

/// EMFILE, "Too many open files".
fn libc_emfile() -> i32 {
    nix::errno::Errno::EMFILE as i32
}
