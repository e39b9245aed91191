//! Plays the runtime side of NRI against the stub over real unix sockets: the generated
//! Runtime service and Plugin client run on top of the multiplexer, so registration,
//! configuration, synchronization and events travel in the real wire format.
// Test helpers outside #[test] fns unwrap too: any failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use nri_protocol::api::{self, ContainerUpdate, Event, EventMask, MessageField};
use nri_protocol::stub::{Endpoint, Plugin, Stub, StubOptions};
use test_support::nri_sim::*;
use tokio::net::{UnixListener, UnixStream};

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn registers_with_name_and_index_and_gets_the_drop_in_config() {
    let setup = Setup::dial("42");
    let mut rt = setup.accept().await;
    assert_eq!(
        rt.expect_registration().await,
        ("nri-align".to_string(), "42".to_string())
    );

    rt.configure("containerd", "v2.1.4", "", "[align]\nstrict = true\n")
        .await
        .unwrap();
    assert_eq!(
        setup.plugin.seen(|s| s.config.clone()),
        vec!["[align]\nstrict = true\n"]
    );
    let info = setup
        .handle
        .runtime_info()
        .expect("runtime info after configure");
    assert_eq!(info.name, "containerd");
    assert_eq!(
        info.nri_version.map(|v| v.to_string()).as_deref(),
        Some("v0.8.0")
    );
    setup.task.abort();
}

#[tokio::test]
async fn event_mask_matches_what_each_runtime_knows() {
    let wanted = TestPlugin::default().events();
    let old_known = EventMask::of(&[
        Event::CREATE_CONTAINER,
        Event::STOP_CONTAINER,
        Event::REMOVE_CONTAINER,
    ]);
    let cases = [
        ("containerd", "1.7.24~ds1-6", "", old_known),
        ("containerd", "v2.1.1", "", old_known),
        ("containerd", "v2.3.0", "v0.12.0", wanted),
    ];
    let setup = Setup::dial("10");
    for (name, version, nri, expected) in cases {
        let mut rt = setup.accept().await;
        rt.expect_registration().await;
        let mask = rt.configure(name, version, nri, "").await.unwrap();
        assert_eq!(mask, expected, "{name} {version} {nri}");
        assert!(!mask.contains(Event::UPDATE_POD_SANDBOX) || !nri.is_empty());
        rt.hang_up().await;
    }
    setup.task.abort();
}

#[tokio::test]
async fn configure_error_reaches_the_runtime() {
    let setup = Setup::dial("10");
    let mut rt = setup.accept().await;
    rt.expect_registration().await;
    let err = rt
        .configure("containerd", "v2.1.1", "", "reject me")
        .await
        .unwrap_err();
    let (code, message) = status_code(&err);
    assert_eq!(code, ttrpc::Code::UNKNOWN);
    assert!(message.contains("bad drop-in config"), "{message}");
    setup.task.abort();
}

#[tokio::test]
async fn chunked_synchronize_delivers_everything_at_the_last_chunk() {
    let setup = Setup::dial("10");
    let mut rt = setup.accept().await;
    rt.expect_registration().await;
    rt.configure("containerd", "v2.1.1", "", "").await.unwrap();

    // Big enough chunks that each request spans several 4 KiB frames.
    let chunk = |n: usize, base: usize, more: bool| api::SynchronizeRequest {
        pods: (0..n).map(|i| pod(&format!("p{}", base + i))).collect(),
        containers: (0..n)
            .map(|i| {
                let mut c = container(&format!("c{}", base + i), "app");
                c.env = vec!["X".repeat(200)];
                c
            })
            .collect(),
        more,
        ..Default::default()
    };
    for (i, more) in [(0, true), (1, true)] {
        let reply = rt
            .plugin
            .synchronize(ctx(), &chunk(30, i * 30, more))
            .await
            .unwrap();
        assert!(
            reply.more,
            "intermediate chunk must be acknowledged with more=true"
        );
        assert!(reply.update.is_empty(), "no updates before the last chunk");
    }
    assert!(setup.plugin.seen(|s| s.synced.is_empty()));
    let last = rt
        .plugin
        .synchronize(ctx(), &chunk(5, 60, false))
        .await
        .unwrap();
    assert!(!last.more);
    assert_eq!(last.update.len(), 65);
    assert_eq!(last.update[64].container_id, "c64");
    assert_eq!(setup.plugin.seen(|s| s.synced.clone()), vec![(65, 65)]);
    setup.task.abort();
}

#[tokio::test]
async fn create_container_returns_the_adjustment_and_errors_keep_their_message() {
    let setup = Setup::dial("10");
    let mut rt = setup.accept().await;
    rt.expect_registration().await;
    rt.configure("containerd", "v1.7.24", "", "").await.unwrap();

    let req = api::CreateContainerRequest {
        pod: MessageField::some(pod("p1")),
        container: MessageField::some(container("c1", "app")),
        ..Default::default()
    };
    let reply = rt.plugin.create_container(ctx(), &req).await.unwrap();
    let adjust = reply.adjust.into_option().expect("adjustment");
    assert_eq!(adjust.env[0].key, "NRI_ALIGN_CPUS");
    assert_eq!(adjust.env[0].value, "2-3");
    assert_eq!(adjust.linux.resources.cpu.cpus, "2-3");
    assert_eq!(adjust.linux.resources.cpu.mems, "0");

    let doomed = api::CreateContainerRequest {
        pod: MessageField::some(pod("p1")),
        container: MessageField::some(container("c2", "doomed")),
        ..Default::default()
    };
    let (code, message) = status_code(
        &rt.plugin
            .create_container(ctx(), &doomed)
            .await
            .unwrap_err(),
    );
    assert_eq!(code, ttrpc::Code::UNKNOWN);
    assert_eq!(message, "no room for doomed in pod-p1");

    let stop = api::StopContainerRequest {
        pod: MessageField::some(pod("p1")),
        container: MessageField::some(container("c1", "app")),
        ..Default::default()
    };
    let stopped = rt.plugin.stop_container(ctx(), &stop).await.unwrap();
    assert_eq!(stopped.update[0].container_id, "after-c1");
    setup.task.abort();
}

#[tokio::test]
async fn unhandled_events_answer_unimplemented_but_state_change_succeeds() {
    let setup = Setup::dial("10");
    let mut rt = setup.accept().await;
    rt.expect_registration().await;
    rt.configure("containerd", "v2.3.0", "v0.12.0", "")
        .await
        .unwrap();

    let start = api::StartContainerRequest {
        pod: MessageField::some(pod("p1")),
        container: MessageField::some(container("c1", "app")),
        ..Default::default()
    };
    let (code, message) = status_code(&rt.plugin.start_container(ctx(), &start).await.unwrap_err());
    assert_eq!(code, ttrpc::Code::UNIMPLEMENTED);
    assert!(message.contains("StartContainer"), "{message}");

    let run = api::RunPodSandboxRequest {
        pod: MessageField::some(pod("p1")),
        ..Default::default()
    };
    let (code, _) = status_code(&rt.plugin.run_pod_sandbox(ctx(), &run).await.unwrap_err());
    assert_eq!(code, ttrpc::Code::UNIMPLEMENTED);

    // What a v0.12 runtime does next: fall back to StateChange, which must succeed.
    let evt = api::StateChangeEvent {
        event: Event::START_CONTAINER.into(),
        pod: MessageField::some(pod("p1")),
        container: MessageField::some(container("c1", "app")),
        ..Default::default()
    };
    rt.plugin.state_change(ctx(), &evt).await.unwrap();
    setup.task.abort();
}

#[tokio::test]
async fn unsolicited_updates_work_outside_handlers_only() {
    let setup = Setup::dial("10");
    *setup.plugin.handle.lock().unwrap() = Some(setup.handle.clone());
    let mut rt = setup.accept().await;
    rt.expect_registration().await;
    rt.configure("containerd", "v2.1.1", "", "").await.unwrap();

    let updates = vec![
        ContainerUpdate {
            container_id: "c1".into(),
            ..Default::default()
        },
        ContainerUpdate {
            container_id: "c2".into(),
            ..Default::default()
        },
    ];
    wait_connected(&setup.handle).await;
    let failed = setup
        .handle
        .update_containers(updates, vec![])
        .await
        .unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].container_id, "c1");
    match rt.next_call().await {
        RuntimeCall::Update(ids) => assert_eq!(ids, vec!["c1", "c2"]),
        other => panic!("expected UpdateContainers, got {other:?}"),
    }

    let reentrant = api::CreateContainerRequest {
        pod: MessageField::some(pod("p1")),
        container: MessageField::some(container("c3", "reentrant")),
        ..Default::default()
    };
    let (_, message) = status_code(
        &rt.plugin
            .create_container(ctx(), &reentrant)
            .await
            .unwrap_err(),
    );
    assert!(message.contains("inside an NRI event handler"), "{message}");
    setup.task.abort();
}

#[tokio::test]
async fn runtime_restart_leads_to_reconnect_and_new_registration() {
    let setup = Setup::dial("33");
    let mut rt = setup.accept().await;
    rt.expect_registration().await;
    rt.configure("containerd", "v1.7.24", "", "").await.unwrap();
    wait_connected(&setup.handle).await;

    // Shutdown, then the runtime goes away as in a containerd restart.
    rt.plugin
        .shutdown(ctx(), &api::Empty::default())
        .await
        .unwrap();
    rt.hang_up().await;

    let mut rt2 = setup.accept().await;
    assert_eq!(
        rt2.expect_registration().await,
        ("nri-align".to_string(), "33".to_string())
    );
    rt2.configure("containerd", "v1.7.24", "", "")
        .await
        .unwrap();
    let reply = rt2
        .plugin
        .synchronize(
            ctx(),
            &api::SynchronizeRequest {
                containers: vec![container("c9", "app")],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(reply.update[0].container_id, "c9");
    assert_eq!(
        setup.plugin.seen(|s| s.disconnects.clone()),
        vec!["runtime shut down"]
    );
    assert_eq!(setup.plugin.seen(|s| s.runtimes.len()), 2);
    setup.task.abort();
}

#[tokio::test]
async fn dial_mode_waits_for_the_runtime_socket_to_appear() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("late.sock");
    let mut opts = StubOptions::new("nri-align", "20").socket(&path);
    opts.initial_backoff = Duration::from_millis(10);
    opts.max_backoff = Duration::from_millis(50);
    let task = tokio::spawn(nri_protocol::stub::run(
        opts,
        Arc::new(TestPlugin::default()),
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let listener = UnixListener::bind(&path).unwrap();
    let (stream, _) = tokio::time::timeout(STEP, listener.accept())
        .await
        .unwrap()
        .unwrap();
    let mut rt = RuntimeSide::start(stream).await;
    assert_eq!(rt.expect_registration().await.1, "20");
    task.abort();
}

#[tokio::test]
async fn launched_plugin_uses_the_inherited_socket_and_exits_when_it_closes() {
    use std::os::unix::io::IntoRawFd;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let fd = theirs.into_raw_fd();
    let opts = StubOptions::new("ignored", "99")
        .from_env_with(|var| match var {
            "NRI_PLUGIN_SOCKET" => Some(fd.to_string()),
            "NRI_PLUGIN_NAME" => Some("nri-align".into()),
            "NRI_PLUGIN_IDX" => Some("05".into()),
            _ => None,
        })
        .unwrap();
    assert_eq!(opts.endpoint, Endpoint::InheritedFd(fd));
    let plugin = Arc::new(TestPlugin::default());
    let task = tokio::spawn(Stub::new(opts).unwrap().run(plugin.clone()));

    ours.set_nonblocking(true).unwrap();
    let mut rt = RuntimeSide::start(UnixStream::from_std(ours).unwrap()).await;
    assert_eq!(
        rt.expect_registration().await,
        ("nri-align".to_string(), "05".to_string())
    );
    rt.configure("containerd", "v1.7.24", "", "from plugin_config_path")
        .await
        .unwrap();
    assert_eq!(
        plugin.seen(|s| s.config.clone()),
        vec!["from plugin_config_path"]
    );

    rt.hang_up().await;
    let result = tokio::time::timeout(STEP, task)
        .await
        .expect("launched plugin must exit")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(plugin.seen(|s| s.disconnects.len()), 1);
}

#[tokio::test]
async fn large_replies_reach_the_runtime_in_frames_of_at_most_4096_bytes() {
    let setup = Setup::dial("10");
    let tap = Tap::new(setup.accept_raw().await);
    let stats = tap.stats.clone();
    let mut rt = RuntimeSide::start(tap).await;
    rt.expect_registration().await;
    rt.configure("containerd", "v1.7.24", "", "").await.unwrap();

    // The plugin answers with one update per container: about 25 KB in one ttrpc message.
    let containers = (0..200)
        .map(|i| container(&format!("{i:03}-{}", "x".repeat(120)), "app"))
        .collect();
    let req = api::SynchronizeRequest {
        containers,
        ..Default::default()
    };
    let reply = rt.plugin.synchronize(ctx(), &req).await.unwrap();
    assert_eq!(reply.update.len(), 200);
    assert!(reply.update[199].container_id.starts_with("199-"));

    let stats = stats.lock().unwrap();
    assert!(
        stats.frames > 6,
        "a 25 KB reply needs several frames: {stats:?}"
    );
    assert_eq!(stats.max_payload, nri_protocol::mux::MAX_WRITE_PAYLOAD);
    setup.task.abort();
}

#[tokio::test]
async fn notifications_reach_the_handler_through_rpc_and_state_change() {
    let setup = Setup::dial("10");
    let mut rt = setup.accept().await;
    rt.expect_registration().await;
    rt.configure("containerd", "v1.7.24", "", "").await.unwrap();

    // NRI before v0.12 sends notification events through StateChange...
    let evt = api::StateChangeEvent {
        event: Event::REMOVE_CONTAINER.into(),
        pod: MessageField::some(pod("p1")),
        container: MessageField::some(container("c1", "app")),
        ..Default::default()
    };
    rt.plugin.state_change(ctx(), &evt).await.unwrap();
    // ...v0.12 through the per-event RPC.
    let req = api::RemoveContainerRequest {
        pod: MessageField::some(pod("p2")),
        container: MessageField::some(container("c2", "app")),
        ..Default::default()
    };
    rt.plugin.remove_container(ctx(), &req).await.unwrap();
    assert_eq!(
        setup.plugin.seen(|s| s.removed.clone()),
        vec!["p1/c1", "p2/c2"]
    );
    setup.task.abort();
}

/// Waits until the stub's link state satisfies `cond`.
async fn wait_link(
    rx: &mut tokio::sync::watch::Receiver<nri_protocol::stub::LinkState>,
    what: &str,
    cond: impl Fn(&nri_protocol::stub::LinkState) -> bool,
) -> nri_protocol::stub::LinkState {
    let waited = tokio::time::timeout(STEP, async {
        rx.wait_for(|s| cond(s)).await.map(|s| s.clone())
    })
    .await;
    match waited {
        Ok(state) => state.expect("the stub is alive"),
        Err(_) => panic!("link never {what}: {}", *rx.borrow()),
    }
}

#[tokio::test]
async fn link_state_is_ready_after_synchronize_and_not_while_reconnecting() {
    use nri_protocol::stub::LinkPhase;
    let setup = Setup::dial("44");
    let mut link = setup.handle.link();
    assert_eq!(link.borrow().phase, LinkPhase::Connecting);
    let mut rt = setup.accept().await;
    rt.expect_registration().await;
    rt.configure("containerd", "v2.1.9", "", "").await.unwrap();
    let s = wait_link(&mut link, "configured", |s| {
        s.phase == LinkPhase::Configured
    })
    .await;
    assert!(
        !s.is_ready(),
        "configured is not ready for a dialing plugin: {s}"
    );
    // A chunked Synchronize: ready only after the last chunk.
    let chunk = |more| api::SynchronizeRequest {
        containers: vec![container("c1", "app")],
        more,
        ..Default::default()
    };
    rt.plugin.synchronize(ctx(), &chunk(true)).await.unwrap();
    assert!(!setup.handle.link_state().is_ready());
    rt.plugin.synchronize(ctx(), &chunk(false)).await.unwrap();
    let s = wait_link(&mut link, "ready", |s| s.is_ready()).await;
    assert_eq!(s.registrations, 1);
    assert_eq!(
        s.to_string(),
        "registered and synchronized with containerd v2.1.9 (NRI v0.8.0, inferred)"
    );

    // The runtime goes away: not ready, with the reason, until the next connection syncs.
    rt.hang_up().await;
    let s = wait_link(&mut link, "lost", |s| !s.is_ready()).await;
    let mut rt2 = setup.accept().await;
    assert!(s.to_string().contains("connecting to "), "{s}");
    rt2.expect_registration().await;
    rt2.configure("containerd", "v2.1.9", "", "").await.unwrap();
    assert!(!setup.handle.link_state().is_ready());
    rt2.plugin.synchronize(ctx(), &chunk(false)).await.unwrap();
    let s = wait_link(&mut link, "ready again", |s| s.is_ready()).await;
    assert_eq!(s.registrations, 2);
    assert!(
        s.last_error
            .as_deref()
            .is_some_and(|e| e.contains("runtime closed the connection")),
        "{s:?}"
    );
    setup.task.abort();
}

#[tokio::test]
async fn link_state_of_a_plugin_launched_by_nri_v0_6_is_ready_after_configure() {
    use std::os::unix::io::IntoRawFd;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let fd = theirs.into_raw_fd();
    let opts = StubOptions::new("nri-align", "05")
        .from_env_with(|var| (var == "NRI_PLUGIN_SOCKET").then(|| fd.to_string()))
        .unwrap();
    let stub = Stub::new(opts).unwrap();
    let mut link = stub.handle().link();
    let task = tokio::spawn(stub.run(Arc::new(TestPlugin::default())));
    ours.set_nonblocking(true).unwrap();
    let mut rt = RuntimeSide::start(UnixStream::from_std(ours).unwrap()).await;
    rt.expect_registration().await;
    rt.configure("containerd", "1.7.24~ds1", "", "")
        .await
        .unwrap();
    let s = wait_link(&mut link, "ready", |s| s.is_ready()).await;
    assert_eq!(format!("inherited fd {fd}"), s.endpoint);
    rt.hang_up().await;
    let s = wait_link(&mut link, "stopped", |s| {
        s.phase == nri_protocol::stub::LinkPhase::Stopped
    })
    .await;
    assert!(!s.is_ready());
    let _ = tokio::time::timeout(STEP, task).await;
}
