//! A hostile or broken runtime against the stub, over real unix sockets: a Synchronize that
//! never ends, a corrupt frame on the Plugin service's connection. The stub must refuse what is
//! over its bounds and recover on its own.
// Test helpers outside #[test] fns unwrap too: any failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::io::Write;

use nri_protocol::api::{self, MessageField};
use nri_protocol::mux::PLUGIN_SERVICE_CONN;
use nri_protocol::stub::{Stub, StubOptions, SyncLimits};
use test_support::nri_sim::*;
use tokio::net::UnixStream;

/// A chunk of `n` containers whose env makes each about `pad` bytes.
fn chunk(base: usize, n: usize, pad: usize, more: bool) -> api::SynchronizeRequest {
    api::SynchronizeRequest {
        containers: (0..n)
            .map(|i| {
                let mut c = container(&format!("c{}", base + i), "app");
                c.env = vec!["X".repeat(pad)];
                c
            })
            .collect(),
        more,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_synchronize_over_its_bounds_fails_and_the_next_one_starts_afresh() {
    let limits = SyncLimits {
        max_chunks: 8,
        max_objects: 1000,
        max_bytes: 20_000,
    };
    let setup = Setup::dial_with("10", |o| o.sync_limits = limits);
    let mut rt = setup.accept().await;
    rt.expect_registration().await;
    rt.configure("containerd", "v2.1.1", "", "").await.unwrap();

    // 3 containers of ~2 KB per chunk: the fourth chunk passes 20,000 bytes.
    for i in 0..3 {
        let reply = rt
            .plugin
            .synchronize(ctx(), &chunk(i * 3, 3, 2000, true))
            .await
            .unwrap();
        assert!(reply.more);
    }
    let err = rt
        .plugin
        .synchronize(ctx(), &chunk(9, 3, 2000, true))
        .await
        .unwrap_err();
    let (code, message) = status_code(&err);
    assert_eq!(code, ttrpc::Code::RESOURCE_EXHAUSTED, "{message}");
    assert!(
        message.contains("too large") && message.contains("limit of 20000"),
        "{message}"
    );
    assert!(setup.plugin.seen(|s| s.synced.is_empty()));

    // What was collected is gone: a fresh Synchronize delivers only its own containers.
    let reply = rt
        .plugin
        .synchronize(ctx(), &chunk(100, 2, 10, false))
        .await
        .unwrap();
    assert_eq!(reply.update.len(), 2);
    assert_eq!(setup.plugin.seen(|s| s.synced.clone()), vec![(0, 2)]);

    // Empty chunks cost nothing but are still counted.
    for _ in 0..limits.max_chunks {
        let reply = rt
            .plugin
            .synchronize(ctx(), &chunk(0, 0, 0, true))
            .await
            .unwrap();
        assert!(reply.more);
    }
    let err = rt
        .plugin
        .synchronize(ctx(), &chunk(0, 0, 0, true))
        .await
        .unwrap_err();
    let (code, message) = status_code(&err);
    assert_eq!(code, ttrpc::Code::RESOURCE_EXHAUSTED);
    assert!(
        message.contains("9 chunks, more than the limit of 8"),
        "{message}"
    );
    setup.task.abort();
}

/// The runtime's end of a plugin connection, plus a second handle on the same socket through
/// which a test writes raw bytes while the multiplexer is idle.
async fn runtime_with_injector(
    stream: UnixStream,
) -> (RuntimeSide, std::os::unix::net::UnixStream) {
    let std_stream = stream.into_std().unwrap();
    let raw = std_stream.try_clone().unwrap();
    let rt = RuntimeSide::start(UnixStream::from_std(std_stream).unwrap()).await;
    (rt, raw)
}

/// One multiplexer frame for the Plugin service's connection (id 1) whose payload is a ttrpc
/// header no ttrpc client writes: it announces 0xdeadbeef bytes.
fn garbage_ttrpc_header() -> Vec<u8> {
    let ttrpc = [0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1, 1, 0];
    let mut frame = PLUGIN_SERVICE_CONN.to_be_bytes().to_vec();
    frame.extend_from_slice(&(ttrpc.len() as u32).to_be_bytes());
    frame.extend_from_slice(&ttrpc);
    frame
}

fn create(id: &str) -> api::CreateContainerRequest {
    api::CreateContainerRequest {
        pod: MessageField::some(pod("p1")),
        container: MessageField::some(container(id, "app")),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_garbage_ttrpc_header_on_the_plugin_service_makes_the_plugin_reconnect_and_serve() {
    let setup = Setup::dial("10");
    let (mut rt, mut raw) = runtime_with_injector(setup.accept_raw().await).await;
    rt.expect_registration().await;
    rt.configure("containerd", "v2.1.1", "", "").await.unwrap();
    wait_connected(&setup.handle).await;
    rt.plugin
        .create_container(ctx(), &create("c1"))
        .await
        .unwrap();

    raw.write_all(&garbage_ttrpc_header()).unwrap();

    // The stub drops this socket (the runtime sees it close) and dials again.
    let mut rt2 = setup.accept().await;
    assert_eq!(rt2.expect_registration().await.1, "10");
    rt2.configure("containerd", "v2.1.1", "", "").await.unwrap();
    let reply = rt2
        .plugin
        .create_container(ctx(), &create("c2"))
        .await
        .unwrap();
    assert_eq!(reply.adjust.linux.resources.cpu.cpus, "2-3");
    let reason = setup.plugin.seen(|s| s.disconnects.clone());
    assert_eq!(reason.len(), 1, "{reason:?}");
    assert!(
        reason[0].contains("malformed ttrpc message on connection 1")
            && reason[0].contains("3735928559 bytes"),
        "{reason:?}"
    );
    // The old connection is really gone: the runtime's calls on it fail instead of hanging.
    let old = tokio::time::timeout(STEP, rt.plugin.create_container(ctx(), &create("c3")))
        .await
        .expect("a call on the dropped connection must fail, not hang");
    assert!(old.is_err());
    setup.task.abort();
}

#[tokio::test]
async fn a_launched_plugin_exits_with_an_error_on_a_garbage_ttrpc_header() {
    use std::os::unix::io::IntoRawFd;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let fd = theirs.into_raw_fd();
    let opts = StubOptions::new("nri-align", "05")
        .from_env_with(|var| (var == "NRI_PLUGIN_SOCKET").then(|| fd.to_string()))
        .unwrap();
    let plugin = std::sync::Arc::new(TestPlugin::default());
    let task = tokio::spawn(Stub::new(opts).unwrap().run(plugin.clone()));

    ours.set_nonblocking(true).unwrap();
    let (mut rt, mut raw) = runtime_with_injector(UnixStream::from_std(ours).unwrap()).await;
    rt.expect_registration().await;
    rt.configure("containerd", "v1.7.24", "", "").await.unwrap();
    raw.write_all(&garbage_ttrpc_header()).unwrap();

    let result = tokio::time::timeout(STEP, task)
        .await
        .expect("the launched plugin must exit")
        .unwrap();
    let err = result.expect_err("a broken connection is an error exit");
    assert!(err.to_string().contains("malformed ttrpc message"), "{err}");
}
