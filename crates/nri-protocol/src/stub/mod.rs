//! NRI plugin runner: connects to the runtime, registers, serves the Plugin service through
//! a [`Plugin`] handler and reconnects when the runtime goes away.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use nri_protocol::api::{Event, EventMask};
//! # use nri_protocol::stub::{self, Plugin, StubOptions};
//! struct Mine;
//! #[async_trait::async_trait]
//! impl Plugin for Mine {
//!     fn events(&self) -> EventMask {
//!         EventMask::of(&[Event::CREATE_CONTAINER])
//!     }
//! }
//! # async fn demo() -> Result<(), stub::StubError> {
//! let opts = StubOptions::new("nri-align", "90").from_env()?;
//! stub::run(opts, Arc::new(Mine)).await
//! # }
//! ```
//!
//! Two ways to reach the runtime ([`Endpoint`]):
//! - dial a socket (external plugin, default [`DEFAULT_SOCKET_PATH`]): on connection loss
//!   the stub tells the handler ([`Plugin::disconnected`]), reconnects with exponential
//!   backoff (capped by [`StubOptions::max_backoff`]) and registers again;
//! - an inherited, already connected socket (plugin launched by the runtime, which sets
//!   [`ENV_PLUGIN_SOCKET`], [`ENV_PLUGIN_NAME`], [`ENV_PLUGIN_IDX`]): when the runtime closes
//!   it the runner returns `Ok(())`, when it fails an error, since only the runtime can start
//!   the plugin again (containerd and CRI-O launch plugins only when they start).
//!
//! Either way the connection ends when the runtime's side of it can no longer be followed,
//! not only when the socket closes: a malformed ttrpc header on the Plugin service's
//! connection, or that service's ttrpc server ending, stops the session
//! ([`Mux::service_listener`]).
//!
//! [`RuntimeHandle::link`] follows the connection through its phases ([`LinkState`]):
//! connecting, registered, configured, synchronized; readiness for health checks and service
//! managers is [`LinkState::is_ready`].

mod event_bounds;
mod handler;
mod link;
mod options;
mod service;
mod sync_decode;

use std::future::Future;
use std::io;
use std::os::unix::io::{FromRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::UnixStream;
use ttrpc::asynchronous::{Client, Server};

pub use handler::{HandlerError, HandlerResult, Plugin};
pub use link::{LinkPhase, LinkState};
pub use options::{
    Endpoint, EventLimits, KeptFields, StubError, StubOptions, SyncKeep, SyncLimits,
    DEFAULT_SOCKET_PATH, ENV_PLUGIN_IDX, ENV_PLUGIN_NAME, ENV_PLUGIN_SOCKET,
};

use crate::api::{
    ContainerEviction, ContainerUpdate, RegisterPluginRequest, UpdateContainersRequest,
};
use crate::mux::{Mux, MuxError, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::services::RuntimeClient;
use crate::version::RuntimeInfo;
use link::LinkTracker;
use service::{PluginService, Session};

/// Timeout of unsolicited UpdateContainers requests.
const UPDATE_TIMEOUT: Duration = Duration::from_secs(10);

tokio::task_local! {
    /// Set while a handler method runs, so re-entrant UpdateContainers calls are refused.
    static IN_EVENT_HANDLER: bool;
}

#[derive(Default)]
struct HandleState {
    client: Option<RuntimeClient>,
    runtime: Option<RuntimeInfo>,
}

/// Handle to the current runtime connection, usable from any task.
#[derive(Clone)]
pub struct RuntimeHandle {
    state: Arc<Mutex<HandleState>>,
    link: Arc<LinkTracker>,
}

impl Default for RuntimeHandle {
    fn default() -> Self {
        Self::new(String::new(), false)
    }
}

impl RuntimeHandle {
    fn new(endpoint: String, launched: bool) -> Self {
        RuntimeHandle {
            state: Arc::default(),
            link: Arc::new(LinkTracker::new(endpoint, launched)),
        }
    }

    /// Follows the connection's phases: the receiver sees every change (and always the
    /// latest state), from any task, across reconnections.
    pub fn link(&self) -> tokio::sync::watch::Receiver<LinkState> {
        self.link.subscribe()
    }

    /// The connection's state now.
    pub fn link_state(&self) -> LinkState {
        self.link.current()
    }

    fn lock(&self) -> MutexGuard<'_, HandleState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_client(&self, client: Option<RuntimeClient>) {
        let mut state = self.lock();
        if client.is_none() {
            state.runtime = None;
        }
        state.client = client;
    }

    fn set_runtime(&self, info: RuntimeInfo) {
        self.lock().runtime = Some(info);
    }

    /// The runtime of the current connection, once it sent Configure.
    pub fn runtime_info(&self) -> Option<RuntimeInfo> {
        self.lock().runtime.clone()
    }

    /// Whether the plugin is registered with a runtime right now.
    pub fn is_connected(&self) -> bool {
        self.lock().client.is_some()
    }

    /// Asks the runtime for unsolicited updates (and evictions) of containers; returns the
    /// updates the runtime failed to apply.
    ///
    /// Must not be called from inside a [`Plugin`] method: the runtime waits for that
    /// method's answer while holding the lock UpdateContainers needs, so the call would
    /// hang until the runtime's timeout and the plugin would be dropped. Such calls fail
    /// with [`StubError::CalledFromHandler`]. Call it from a separate task.
    ///
    /// Even from a separate task it is unsafe on containerd up to 2.1 (NRI up to v0.11): the
    /// runtime takes its locks for UpdateContainers in the reverse order of lifecycle events,
    /// and a container created or started at the same moment deadlocks containerd's NRI for
    /// good (containerd#13733). Prefer returning updates in the next response that can carry
    /// them.
    pub async fn update_containers(
        &self,
        update: Vec<ContainerUpdate>,
        evict: Vec<ContainerEviction>,
    ) -> Result<Vec<ContainerUpdate>, StubError> {
        if IN_EVENT_HANDLER.try_with(|inside| *inside).unwrap_or(false) {
            return Err(StubError::CalledFromHandler);
        }
        let client = self.lock().client.clone().ok_or(StubError::NotConnected)?;
        let req = UpdateContainersRequest {
            update,
            evict,
            ..Default::default()
        };
        let ctx = ttrpc::context::with_duration(UPDATE_TIMEOUT);
        let reply = client
            .update_containers(ctx, &req)
            .await
            .map_err(StubError::Update)?;
        Ok(reply.failed)
    }
}

/// The plugin runner. [`run`] covers the common case.
pub struct Stub {
    opts: StubOptions,
    handle: RuntimeHandle,
    inherited_used: bool,
}

impl Stub {
    /// Validates `opts` and builds a stub.
    pub fn new(opts: StubOptions) -> Result<Self, StubError> {
        opts.validate()?;
        let endpoint = match &opts.endpoint {
            Endpoint::Socket(path) => path.display().to_string(),
            Endpoint::InheritedFd(fd) => format!("inherited fd {fd}"),
        };
        let handle = RuntimeHandle::new(endpoint, opts.is_launched());
        Ok(Stub {
            opts,
            handle,
            inherited_used: false,
        })
    }

    /// Handle for unsolicited updates and runtime information; stays valid across
    /// reconnections.
    pub fn handle(&self) -> RuntimeHandle {
        self.handle.clone()
    }

    /// Runs until the runtime connection ends for good (launched mode: `Ok(())`) or a
    /// fatal error. In dial mode this only returns on errors that retrying cannot fix.
    pub async fn run<P: Plugin>(self, plugin: Arc<P>) -> Result<(), StubError> {
        self.run_until(plugin, std::future::pending()).await
    }

    /// Like [`Stub::run`], and also returns `Ok(())` when `stop` completes (e.g. on
    /// SIGTERM); the connection is closed first.
    pub async fn run_until<P: Plugin>(
        mut self,
        plugin: Arc<P>,
        stop: impl Future<Output = ()>,
    ) -> Result<(), StubError> {
        tokio::pin!(stop);
        let link = self.handle.link.clone();
        tokio::select! {
            result = self.connection_loop(plugin) => result,
            () = &mut stop => {
                tracing::info!("stopping NRI plugin");
                link.stopped("stop requested".into());
                Ok(())
            }
        }
    }

    async fn connection_loop<P: Plugin>(&mut self, plugin: Arc<P>) -> Result<(), StubError> {
        let mut backoff = self.opts.initial_backoff;
        let link = self.handle.link.clone();
        // The registration error last logged at warning level.
        let mut said: Option<String> = None;
        loop {
            let connection = link.attempt();
            let end = match self.connect().await {
                Ok(stream) => self.session(stream, plugin.clone(), connection).await,
                Err(err) => Err(err),
            };
            let launched = self.opts.is_launched();
            let reason = match end {
                // Registered, then the connection ended.
                Ok((cause, reason)) => {
                    backoff = self.opts.initial_backoff;
                    said = None;
                    plugin.disconnected(&reason).await;
                    if launched {
                        // The runtime starts launched plugins only when it starts itself:
                        // exit, with an error when the connection broke rather than closed.
                        link.stopped(reason.clone());
                        if cause.is_clean_close() {
                            tracing::info!(%reason, "runtime connection closed; exiting");
                            return Ok(());
                        }
                        tracing::error!(%reason, "runtime connection failed; exiting");
                        return Err(StubError::Mux(cause));
                    }
                    reason
                }
                Err(err) if launched => {
                    link.stopped(err.to_string());
                    return Err(err);
                }
                Err(err) => {
                    let text = err.to_string();
                    // Said once per cause, then quietly: a node where NRI is off retries every
                    // few seconds for as long as it stays off, and a warning each time would
                    // bury the log. The link state (and so /readyz) always has the latest.
                    if said.as_deref() != Some(text.as_str()) {
                        tracing::warn!(error = %text, retry_in = ?backoff, "cannot register with the runtime; retrying quietly while this lasts");
                        said = Some(text.clone());
                    } else {
                        tracing::debug!(error = %text, retry_in = ?backoff, "cannot register with the runtime");
                    }
                    let missing = matches!(&err, StubError::Connect { source, .. }
                        if source.kind() == std::io::ErrorKind::NotFound);
                    link.set_socket_missing(missing);
                    link.failed(text, backoff, false);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.opts.max_backoff);
                    continue;
                }
            };
            link.failed(reason.clone(), backoff, true);
            tracing::warn!(%reason, retry_in = ?backoff, "NRI connection lost; reconnecting");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.opts.max_backoff);
        }
    }

    async fn connect(&mut self) -> Result<UnixStream, StubError> {
        match &self.opts.endpoint {
            Endpoint::Socket(path) => {
                UnixStream::connect(path)
                    .await
                    .map_err(|source| StubError::Connect {
                        path: path.clone(),
                        source,
                    })
            }
            Endpoint::InheritedFd(fd) => {
                if self.inherited_used {
                    return Err(StubError::InheritedFdUsed);
                }
                self.inherited_used = true;
                stream_from_fd(*fd).map_err(|source| StubError::InheritedFd { fd: *fd, source })
            }
        }
    }

    /// Registers and serves one connection; returns why it ended (the multiplexer's reason and
    /// its description), or the error that kept the plugin from registering.
    async fn session<P: Plugin>(
        &self,
        stream: UnixStream,
        plugin: Arc<P>,
        connection: u64,
    ) -> Result<(MuxError, String), StubError> {
        let plugin_id = format!("{}-{}", self.opts.index, self.opts.name);
        // Reading waits until both connections are open, as the Go stub does.
        let mux = Mux::blocked(stream);
        // The ttrpc tasks keep their connections (and so the socket) alive; close the
        // socket explicitly however this function ends, including cancellation.
        let _close = CloseOnDrop(mux.clone());
        let session = Arc::new(Session::new(
            plugin_id.clone(),
            self.opts.sync_limits,
            self.opts.sync_keep.clone(),
            connection,
        ));
        let service = PluginService {
            plugin,
            session: session.clone(),
            handle: self.handle.clone(),
        };
        let mut server = Server::new()
            .register_service(service::service_map(service, self.opts.event_limits))
            // A runtime whose calls can no longer be followed ends the session, like a hang-up.
            .add_listener(mux.service_listener(PLUGIN_SERVICE_CONN)?);
        server.start().await.map_err(StubError::Serve)?;
        let server = ServingServer(server);
        let runtime = RuntimeClient::new(Client::new(mux.socket(RUNTIME_SERVICE_CONN)?));
        mux.unblock();

        let registered = self.register(&runtime, &plugin_id).await;
        let end = match registered {
            Ok(()) => {
                self.handle.set_client(Some(runtime));
                self.handle.link.registered(connection);
                let reason = mux.closed().await;
                self.handle.set_client(None);
                let shutdown = session.shutdown_received.load(Ordering::SeqCst);
                let description = describe_end(&reason, shutdown);
                Ok((reason, description))
            }
            Err(err) => Err(err),
        };
        mux.close();
        session.release();
        server.shutdown().await;
        end
    }

    async fn register(&self, runtime: &RuntimeClient, plugin_id: &str) -> Result<(), StubError> {
        tracing::info!(plugin = %plugin_id, endpoint = ?self.opts.endpoint, "registering with the runtime");
        let req = RegisterPluginRequest {
            plugin_name: self.opts.name.clone(),
            plugin_idx: self.opts.index.clone(),
            ..Default::default()
        };
        let timeout = self.opts.registration_timeout;
        let ctx = ttrpc::context::with_duration(timeout);
        match tokio::time::timeout(timeout, runtime.register_plugin(ctx, &req)).await {
            Ok(Ok(_)) => {
                tracing::info!(plugin = %plugin_id, "registered");
                Ok(())
            }
            Ok(Err(err)) => Err(StubError::Register(err)),
            Err(_) => Err(StubError::RegisterTimeout(timeout)),
        }
    }
}

/// The Plugin service's ttrpc server while it serves a session.
///
/// ttrpc 0.10's `Server::shutdown` must run to its end once begun: its `stop_listen` sends the
/// accept task a channel and awaits the listener back on it, and the accept task unwraps that
/// send (`server.rs`: `fd_tx.send(incoming).await.unwrap()`). A session abandoned in between
/// (the stop signal as the runtime hangs up: [`Stub::run_until`] drops the session where it
/// waits) dropped the receiver, and the accept task panicked. So the shutdown runs on a task of
/// its own, which nothing that cancels the session reaches. A server dropped before its
/// shutdown began is safe as it is: the accept task sees the stop channel closed and ends.
struct ServingServer(Server);

impl ServingServer {
    /// Stops accepting, ends the server's connection and waits for its tasks (ttrpc bounds the
    /// wait); finishes even if the caller is dropped meanwhile.
    async fn shutdown(self) {
        let mut server = self.0;
        let done = tokio::spawn(async move {
            if let Err(e) = server.shutdown().await {
                tracing::debug!(error = %e, "stopping the Plugin service's ttrpc server");
            }
        });
        let _ = done.await;
    }
}

struct CloseOnDrop(Mux);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

fn describe_end(reason: &MuxError, shutdown: bool) -> String {
    match (reason, shutdown) {
        (MuxError::PeerClosed, true) => "runtime shut down".into(),
        (MuxError::PeerClosed, false) => "runtime closed the connection".into(),
        (other, _) => other.to_string(),
    }
}

/// Takes ownership of the inherited socket `fd`.
fn stream_from_fd(fd: RawFd) -> io::Result<UnixStream> {
    // SAFETY: fstat only writes into the zeroed stat buffer we own; an invalid fd is
    // reported through the return value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a socket"));
    }
    // Children of the plugin must not inherit the runtime connection.
    // SAFETY: plain fcntl on an fd verified open above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd is an open socket handed to this process by the runtime, and the stub
    // takes it only once (`inherited_used`), so no other owner closes it.
    let std_stream = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
    std_stream.set_nonblocking(true)?;
    UnixStream::from_std(std_stream)
}

/// Builds a [`Stub`] from `opts` and runs `plugin` with it (see [`Stub::run`]).
pub async fn run<P: Plugin>(opts: StubOptions, plugin: Arc<P>) -> Result<(), StubError> {
    Stub::new(opts)?.run(plugin).await
}

#[cfg(test)]
mod tests;
