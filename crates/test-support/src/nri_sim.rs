//! Shared pieces of the runtime simulation: the plugin under test and a fake runtime that
//! serves the generated Runtime service and calls the Plugin service through the mux.
// A poisoned lock in a test harness is a failed test already; unwrap says so plainly.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nri_protocol::api::{
    self, Container, ContainerAdjustment, ContainerUpdate, CreateContainerResponse, Event,
    EventMask, KeyValue, LinuxCPU, LinuxContainerAdjustment, LinuxResources, MessageField,
    PodSandbox, StopContainerResponse,
};
use nri_protocol::mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use nri_protocol::services::{create_runtime, PluginClient, Runtime};
use nri_protocol::stub::{HandlerError, HandlerResult, Plugin, RuntimeHandle, Stub, StubOptions};
use nri_protocol::version::RuntimeInfo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use ttrpc::asynchronous::{Client, Server, TtrpcContext};

pub const STEP: Duration = Duration::from_secs(10);

/// What nri-align answers for a 2-CPU container (CPUs 2-3 on node 0, and the env naming them):
/// the test plugin's and the round-trip bench's CreateContainer adjustment.
pub fn cpu_adjustment() -> ContainerAdjustment {
    ContainerAdjustment {
        env: vec![KeyValue {
            key: "NRI_ALIGN_CPUS".into(),
            value: "2-3".into(),
            ..Default::default()
        }],
        linux: MessageField::some(LinuxContainerAdjustment {
            resources: MessageField::some(LinuxResources {
                cpu: MessageField::some(LinuxCPU {
                    cpus: "2-3".into(),
                    mems: "0".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

// ---------------------------------------------------------------- plugin under test

#[derive(Default)]
pub struct Seen {
    pub config: Vec<String>,
    pub runtimes: Vec<RuntimeInfo>,
    pub synced: Vec<(usize, usize)>,
    pub disconnects: Vec<String>,
    pub removed: Vec<String>,
}

#[derive(Default)]
pub struct TestPlugin {
    pub seen: Mutex<Seen>,
    /// Set from the test to drive unsolicited updates from a handler (must be refused).
    pub handle: Mutex<Option<RuntimeHandle>>,
}

impl TestPlugin {
    pub fn seen<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.seen.lock().unwrap())
    }
}

#[async_trait]
impl Plugin for TestPlugin {
    fn events(&self) -> EventMask {
        EventMask::of(&[
            Event::CREATE_CONTAINER,
            Event::STOP_CONTAINER,
            Event::REMOVE_CONTAINER,
            Event::UPDATE_POD_SANDBOX,
        ])
    }

    async fn configure(&self, config: &str, runtime: &RuntimeInfo) -> HandlerResult<()> {
        if config == "reject me" {
            return Err(HandlerError::failed("bad drop-in config"));
        }
        let mut seen = self.seen.lock().unwrap();
        seen.config.push(config.to_string());
        seen.runtimes.push(runtime.clone());
        Ok(())
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        self.seen
            .lock()
            .unwrap()
            .synced
            .push((pods.len(), containers.len()));
        // One update per container, to prove updates come back with the last chunk.
        Ok(containers
            .iter()
            .map(|c| ContainerUpdate {
                container_id: c.id.clone(),
                ..Default::default()
            })
            .collect())
    }

    async fn disconnected(&self, reason: &str) {
        self.seen
            .lock()
            .unwrap()
            .disconnects
            .push(reason.to_string());
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        if container.name == "doomed" {
            return Err(HandlerError::failed(format!(
                "no room for {} in {}",
                container.name, pod.name
            )));
        }
        if container.name == "reentrant" {
            let handle = self.handle.lock().unwrap().clone();
            if let Some(handle) = handle {
                let err = handle.update_containers(vec![], vec![]).await.unwrap_err();
                return Err(HandlerError::failed(err));
            }
        }
        let adjust = cpu_adjustment();
        Ok(CreateContainerResponse {
            adjust: MessageField::some(adjust),
            ..Default::default()
        })
    }

    async fn remove_container(&self, pod: PodSandbox, container: Container) -> HandlerResult<()> {
        self.seen
            .lock()
            .unwrap()
            .removed
            .push(format!("{}/{}", pod.id, container.id));
        Ok(())
    }

    async fn stop_container(
        &self,
        _pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<StopContainerResponse> {
        Ok(StopContainerResponse {
            update: vec![ContainerUpdate {
                container_id: format!("after-{}", container.id),
                ..Default::default()
            }],
            ..Default::default()
        })
    }
}

// ---------------------------------------------------------------- fake runtime

/// Runtime service of the fake runtime: reports every call to the test.
pub struct FakeRuntimeService {
    calls: mpsc::UnboundedSender<RuntimeCall>,
}

#[derive(Debug)]
pub enum RuntimeCall {
    Register { name: String, idx: String },
    Update(Vec<String>),
}

#[async_trait]
impl Runtime for FakeRuntimeService {
    async fn register_plugin(
        &self,
        _: &TtrpcContext,
        req: api::RegisterPluginRequest,
    ) -> ttrpc::Result<api::Empty> {
        let _ = self.calls.send(RuntimeCall::Register {
            name: req.plugin_name,
            idx: req.plugin_idx,
        });
        Ok(api::Empty::default())
    }

    async fn update_containers(
        &self,
        _: &TtrpcContext,
        req: api::UpdateContainersRequest,
    ) -> ttrpc::Result<api::UpdateContainersResponse> {
        let ids = req.update.iter().map(|u| u.container_id.clone()).collect();
        let _ = self.calls.send(RuntimeCall::Update(ids));
        // Report the first update as failed so the reply path is exercised too.
        Ok(api::UpdateContainersResponse {
            failed: req.update.into_iter().take(1).collect(),
            ..Default::default()
        })
    }
}

/// One plugin connection as the runtime sees it.
pub struct RuntimeSide {
    pub mux: Mux,
    pub server: Server,
    pub plugin: PluginClient,
    /// The ttrpc client under `plugin`, for requests written by hand (`Client::request`).
    pub raw: Client,
    pub calls: mpsc::UnboundedReceiver<RuntimeCall>,
}

impl RuntimeSide {
    pub async fn start<S>(stream: S) -> RuntimeSide
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    {
        // Opened before reading, or an early RegisterPlugin is dropped (as containerd does).
        let mux = Mux::blocked(stream);
        let (tx, calls) = mpsc::unbounded_channel();
        let mut server = Server::new()
            .register_service(create_runtime(Arc::new(FakeRuntimeService { calls: tx })))
            .add_listener(mux.listener(RUNTIME_SERVICE_CONN).unwrap());
        server.start().await.unwrap();
        let raw = Client::new(mux.socket(PLUGIN_SERVICE_CONN).unwrap());
        let plugin = PluginClient::new(raw.clone());
        mux.unblock();
        RuntimeSide {
            mux,
            server,
            plugin,
            raw,
            calls,
        }
    }

    pub async fn next_call(&mut self) -> RuntimeCall {
        tokio::time::timeout(STEP, self.calls.recv())
            .await
            .expect("runtime call timed out")
            .expect("runtime service gone")
    }

    pub async fn expect_registration(&mut self) -> (String, String) {
        match self.next_call().await {
            RuntimeCall::Register { name, idx } => (name, idx),
            other => panic!("expected RegisterPlugin, got {other:?}"),
        }
    }

    pub async fn configure(
        &self,
        name: &str,
        version: &str,
        nri: &str,
        config: &str,
    ) -> ttrpc::Result<EventMask> {
        let req = api::ConfigureRequest {
            config: config.into(),
            runtime_name: name.into(),
            runtime_version: version.into(),
            registration_timeout: 5000,
            request_timeout: 2000,
            NRI_version: nri.into(),
            ..Default::default()
        };
        let reply = self.plugin.configure(ctx(), &req).await?;
        Ok(EventMask::from_bits(reply.events))
    }

    pub async fn hang_up(mut self) {
        self.mux.close();
        self.server.shutdown().await.unwrap();
    }
}

pub fn ctx() -> ttrpc::context::Context {
    ttrpc::context::with_duration(STEP)
}

pub fn status_code(err: &ttrpc::Error) -> (ttrpc::Code, String) {
    match err {
        ttrpc::Error::RpcStatus(status) => (status.code(), status.message().to_string()),
        other => panic!("expected an RPC status, got {other:?}"),
    }
}

pub fn pod(id: &str) -> PodSandbox {
    PodSandbox {
        id: id.into(),
        name: format!("pod-{id}"),
        namespace: "default".into(),
        ..Default::default()
    }
}

pub fn container(id: &str, name: &str) -> Container {
    Container {
        id: id.into(),
        name: name.into(),
        pod_sandbox_id: "p1".into(),
        ..Default::default()
    }
}

/// A stub dialing a fresh socket in a temp dir, plus the runtime's listener.
pub struct Setup {
    pub _dir: tempfile::TempDir,
    pub listener: UnixListener,
    pub plugin: Arc<TestPlugin>,
    pub handle: RuntimeHandle,
    pub task: tokio::task::JoinHandle<Result<(), nri_protocol::stub::StubError>>,
}

impl Setup {
    pub fn dial(index: &str) -> Setup {
        Setup::dial_with(index, |_| {})
    }

    /// Like [`Setup::dial`], with the stub's options changed by `tune` first.
    pub fn dial_with(index: &str, tune: impl FnOnce(&mut StubOptions)) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nri.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let mut opts = StubOptions::new("nri-align", index).socket(&path);
        opts.initial_backoff = Duration::from_millis(20);
        opts.max_backoff = Duration::from_millis(200);
        tune(&mut opts);
        let stub = Stub::new(opts).unwrap();
        let handle = stub.handle();
        let plugin = Arc::new(TestPlugin::default());
        let task = tokio::spawn(stub.run(plugin.clone()));
        Setup {
            _dir: dir,
            listener,
            plugin,
            handle,
            task,
        }
    }

    pub async fn accept(&self) -> RuntimeSide {
        RuntimeSide::start(self.accept_raw().await).await
    }

    pub async fn accept_raw(&self) -> UnixStream {
        let (stream, _) = tokio::time::timeout(STEP, self.listener.accept())
            .await
            .expect("plugin did not connect")
            .unwrap();
        stream
    }
}

/// Frame statistics of the bytes a [`Tap`] read.
#[derive(Default, Debug)]
pub struct TapStats {
    buf: Vec<u8>,
    /// Complete frames seen.
    pub frames: usize,
    /// Largest payload seen.
    pub max_payload: usize,
}

impl TapStats {
    fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        while self.buf.len() >= 8 {
            let len =
                u32::from_be_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]]) as usize;
            if self.buf.len() < 8 + len {
                break;
            }
            self.frames += 1;
            self.max_payload = self.max_payload.max(len);
            self.buf.drain(..8 + len);
        }
    }
}

/// Stream wrapper that parses the frame headers of everything read through it, so a
/// test can check what the plugin put on the wire.
pub struct Tap<S> {
    inner: S,
    pub stats: Arc<Mutex<TapStats>>,
}

impl<S> Tap<S> {
    pub fn new(inner: S) -> Self {
        Tap {
            inner,
            stats: Arc::default(),
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Tap<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let polled = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        this.stats.lock().unwrap().feed(&buf.filled()[before..]);
        polled
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Tap<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Waits until the stub processed the RegisterPlugin reply. That races with the runtime's
/// first Configure round trip, so tests that need the handle connected wait for it.
pub async fn wait_connected(handle: &RuntimeHandle) {
    let deadline = tokio::time::Instant::now() + STEP;
    while !handle.is_connected() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "stub never became connected"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
