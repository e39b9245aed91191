use super::*;
use std::sync::atomic::{AtomicBool, Ordering};

fn link(socket_missing: bool, registrations: u64) -> Link {
    Link {
        ready: false,
        stopped: false,
        registrations,
        description: "nri: socket missing: /var/run/nri/nri.sock (is NRI enabled in the \
                          runtime?), 4 failed attempt(s)"
            .into(),
        without_synchronize: false,
        runtime_name: None,
        socket_missing,
    }
}

/// A node where NRI is off turns ready (degraded, saying why) once the socket has been
/// missing for the grace period since start; before, and on any other failure, readiness
/// is the connection's.
#[test]
fn nri_off_is_ready_and_degraded_only_after_the_grace_and_never_after_a_registration() {
    let off = link(true, 0);
    assert!(nri_off(&off));
    let (ready, line, nri) = readiness(&off, Some(NRI_OFF_READY_AFTER / 2));
    assert!(!ready && nri.is_none());
    assert_eq!(line, off.description);
    let (ready, line, nri) = readiness(&off, Some(NRI_OFF_READY_AFTER));
    assert!(ready, "{line}");
    assert!(line.starts_with("NRI is off on this node"), "{line}");
    assert_eq!(
        nri.as_deref(),
        off.description.strip_prefix("nri: "),
        "the degraded line names the socket"
    );
    // The runtime went away after a registration, or the socket exists but refuses: the
    // connection's own readiness.
    assert!(!nri_off(&link(true, 1)));
    assert!(!nri_off(&link(false, 0)));
    let (ready, _, nri) = readiness(&link(false, 0), None);
    assert!(!ready && nri.is_none());
}

/// The endpoints answer from their own thread: here no event loop runs at all (a plain
/// test thread that blocks), and `/healthz` says the heartbeat stopped.
#[test]
fn healthz_answers_while_no_event_loop_runs() {
    use std::io::{Read, Write};
    let health = Arc::new(Health::new(Duration::from_millis(100)));
    let addr = spawn_endpoints(
        "127.0.0.1:0".parse().expect("addr"),
        Arc::new(Metrics::new()),
        health,
    )
    .expect("bound");
    std::thread::sleep(Duration::from_millis(300));
    let mut conn = std::net::TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("answer");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("the event loop did not run"), "{answer}");
}

#[test]
fn a_port_taken_is_an_error_at_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let err = spawn_endpoints(addr, Arc::new(Metrics::new()), Arc::new(Health::default()))
        .expect_err("in use");
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{err}");
}

// Real time (tokio's paused clock needs its test-util feature, which would rebuild every
// crate on tokio for tests): ~6 s, the heartbeat's own pace.
#[tokio::test]
async fn a_held_engine_lock_stops_the_heartbeat_until_it_is_free() {
    let health = Arc::new(Health::new(Duration::from_secs(2)));
    let busy = Arc::new(AtomicBool::new(true));
    let b = busy.clone();
    let task = spawn_heartbeat(health.clone(), move || !b.load(Ordering::SeqCst));
    // The first beat waits 2 s for the lock in vain; the limit is 2 s.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let err = health.liveness().expect_err("stalled");
    assert!(err.contains("engine lock was held"), "{err}");
    busy.store(false, Ordering::SeqCst);
    // The beat after the next tick finds the lock free at once.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert_eq!(health.liveness(), Ok("ok".into()));
    task.abort();
}

/// `/readyz` lists publishing as degraded while the object is another producer's or after
/// three failures in a row, clears it when that ends, and when the publisher is gone.
#[tokio::test]
async fn nrt_trouble_is_listed_as_degraded_until_it_ends() {
    use crate::nrt::ownership::NotOwned;
    let health = Arc::new(Health::default());
    let (tx, rx) = watch::channel(PublishStatus::default());
    let task = spawn_nrt_follower(rx, health.clone());
    let listed = |want: bool| {
        let health = health.clone();
        async move {
            for _ in 0..200 {
                if health.degraded().iter().any(|l| l.starts_with("nrt: ")) == want {
                    return health.degraded();
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            panic!("nrt listed should be {want}: {:?}", health.degraded());
        }
    };
    tx.send_modify(|s| {
        s.not_owned = Some(NotOwned::Foreign {
            name: "node-a".into(),
            managed_by: None,
            managers: vec!["nfd-topology-updater (Update)".into()],
        })
    });
    let lines = listed(true).await;
    assert!(
        lines[0].starts_with("nrt: NodeResourceTopology node-a (it has no ")
            && lines[0].contains("nfd-topology-updater (Update)")
            && lines[0].contains("is left alone (foreign)"),
        "{lines:?}"
    );
    tx.send_modify(|s| {
        s.not_owned = None;
        s.consecutive_failures = 2;
        s.last_error = Some("connection refused".into());
    });
    listed(false).await;
    tx.send_modify(|s| s.consecutive_failures = 3);
    let lines = listed(true).await;
    assert_eq!(
        lines,
        vec!["nrt: publishing failed 3 times in a row, retrying: connection refused"]
    );
    // A missing CRD is listed from its first failure, as such.
    tx.send_modify(|s| {
        s.consecutive_failures = 1;
        s.crd_missing = true;
    });
    for _ in 0..200 {
        if health.degraded().iter().any(|l| l.contains("CRD")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let lines = health.degraded();
    assert!(
        lines[0].starts_with("nrt: CRD not installed (noderesourcetopologies."),
        "{lines:?}"
    );
    drop(tx);
    listed(false).await;
    task.await.expect("follower ends with the publisher");
}
