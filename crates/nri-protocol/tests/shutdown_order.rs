//! The stub stops its ttrpc server in the order ttrpc 0.10 needs, even when it is stopped
//! while doing so: the runtime hangs up (the stub starts shutting the Plugin service's server
//! down) and the stop signal comes at that moment (SIGTERM as the runtime restarts, or a node
//! shutting both down). ttrpc's `Server::stop_listen` hands its accept task a channel and
//! awaits the listener back on it; abandoned in between, the accept task found the channel's
//! receiver gone and panicked unwrapping its send. Its own test binary: the panic hook it sets
//! is process-wide.
// Test helpers outside #[test] fns unwrap too: any failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use nri_protocol::stub::{Stub, StubOptions};
use test_support::nri_sim::*;
use tokio::net::UnixListener;

/// Panics raised in ttrpc's code, counted by the hook [`count_ttrpc_panics`] installs.
static TTRPC_PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_ttrpc_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.location().is_some_and(|l| l.file().contains("ttrpc")) {
            TTRPC_PANICS.fetch_add(1, Ordering::SeqCst);
        }
        previous(info);
    }));
}

// Current-thread: the stop is seen at the first point the session waits while stopping the
// server, every time, rather than by chance.
#[tokio::test]
async fn a_stop_while_the_runtime_hangs_up_panics_no_ttrpc_task() {
    count_ttrpc_panics();
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nri.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let stub = Stub::new(StubOptions::new("nri-align", "10").socket(&path)).unwrap();
        let handle = stub.handle();
        let plugin = Arc::new(TestPlugin::default());
        // The stop signal arrives the moment the stub has let go of the runtime.
        let mut was_connected = false;
        let stop = std::future::poll_fn(move |cx| {
            let connected = handle.is_connected();
            was_connected |= connected;
            if was_connected && !connected {
                return Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        });
        let runtime = async {
            let (stream, _) = listener.accept().await.unwrap();
            let mut rt = RuntimeSide::start(stream).await;
            rt.expect_registration().await;
            rt.configure("containerd", "v2.1.1", "", "").await.unwrap();
            rt.plugin
                .create_container(ctx(), &create_request("c1"))
                .await
                .unwrap();
            rt.hang_up().await;
        };
        let (stopped, ()) = tokio::join!(
            tokio::time::timeout(STEP, stub.run_until(plugin, stop)),
            runtime
        );
        stopped.expect("the stub stops").unwrap();
        // The server's tasks run to their end.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            TTRPC_PANICS.load(Ordering::SeqCst),
            0,
            "a ttrpc task panicked (round {round})"
        );
    }
}

fn create_request(id: &str) -> nri_protocol::api::CreateContainerRequest {
    nri_protocol::api::CreateContainerRequest {
        pod: nri_protocol::api::MessageField::some(pod("p1")),
        container: nri_protocol::api::MessageField::some(container(id, "app")),
        ..Default::default()
    }
}
