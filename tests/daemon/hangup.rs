//! The runtime closing the connection is an ordinary event for the daemon, never a crash of
//! one of its threads: a simulated runtime hangs up (as a restarting containerd does) and takes
//! the daemon's new connection, several times, then the daemon is stopped with SIGTERM while
//! connected (a plugin shutdown). Its log holds no panic, and it admits on the last connection.

use std::time::Duration;

use test_support::daemon::{connect, create, start_daemon};
use test_support::e2e::wait_until;
use tokio::net::UnixListener;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_hang_ups_and_a_stop_while_connected_panic_no_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = UnixListener::bind(dir.path().join("nri.sock")).expect("bind");
    let mut daemon = start_daemon(dir.path(), &dir.path().join("state"));
    for round in 0..4 {
        let rt = connect(&listener).await;
        create(&rt, &format!("hangup-{round}")).await;
        rt.hang_up().await;
        let lost = "NRI connection lost";
        assert!(
            wait_until(Duration::from_secs(10), || daemon
                .output()
                .matches(lost)
                .count()
                > round),
            "{}",
            daemon.output()
        );
    }
    let rt = connect(&listener).await;
    create(&rt, "hangup-last").await;
    daemon.stop(nix::sys::signal::Signal::SIGTERM);
    drop(rt);
    let out = daemon.output();
    assert!(out.contains("stopping NRI plugin"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
}
