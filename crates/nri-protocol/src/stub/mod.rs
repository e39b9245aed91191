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
//!   [`ENV_PLUGIN_SOCKET`], [`ENV_PLUGIN_NAME`], [`ENV_PLUGIN_IDX`]): when it breaks the
//!   runner returns `Ok(())`, since only the runtime can start the plugin again.

mod handler;
mod service;

use std::future::Future;
use std::io;
use std::os::unix::io::{FromRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::UnixStream;
use ttrpc::asynchronous::{Client, Server};

pub use handler::{HandlerError, HandlerResult, Plugin};

use crate::api::{
    ContainerEviction, ContainerUpdate, RegisterPluginRequest, UpdateContainersRequest,
};
use crate::mux::{Mux, MuxError, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::services::{create_plugin, RuntimeClient};
use crate::version::RuntimeInfo;
use service::{PluginService, Session};

/// Default NRI socket of containerd and CRI-O.
pub const DEFAULT_SOCKET_PATH: &str = "/var/run/nri/nri.sock";
/// Environment variable with the plugin name, set by a runtime that launches the plugin.
pub const ENV_PLUGIN_NAME: &str = "NRI_PLUGIN_NAME";
/// Environment variable with the plugin index, set by a runtime that launches the plugin.
pub const ENV_PLUGIN_IDX: &str = "NRI_PLUGIN_IDX";
/// Environment variable with the connected socket's fd number, set by a launching runtime.
pub const ENV_PLUGIN_SOCKET: &str = "NRI_PLUGIN_SOCKET";
/// Timeout of unsolicited UpdateContainers requests.
const UPDATE_TIMEOUT: Duration = Duration::from_secs(10);

tokio::task_local! {
    /// Set while a handler method runs, so re-entrant UpdateContainers calls are refused.
    static IN_EVENT_HANDLER: bool;
}

/// Errors of the stub.
#[derive(Debug, thiserror::Error)]
pub enum StubError {
    /// The plugin name is empty or contains characters other than `[A-Za-z0-9._-]`.
    #[error("invalid plugin name {0:?}: use letters, digits, '.', '_' or '-'")]
    InvalidName(String),
    /// The plugin index is not exactly two digits.
    #[error("invalid plugin index {0:?}: must be exactly two digits")]
    InvalidIndex(String),
    /// An NRI_PLUGIN_* environment variable has an unusable value.
    #[error("invalid {var}={value:?}: {reason}")]
    InvalidEnv {
        /// Variable name.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Dialing the runtime socket failed.
    #[error("cannot connect to NRI socket {path}: {source}")]
    Connect {
        /// Socket path.
        path: PathBuf,
        /// Underlying error.
        source: io::Error,
    },
    /// The socket inherited from the runtime cannot be used.
    #[error("cannot use inherited NRI socket fd {fd}: {source}")]
    InheritedFd {
        /// File descriptor number.
        fd: RawFd,
        /// Underlying error.
        source: io::Error,
    },
    /// The inherited socket was already used by an earlier connection.
    #[error("the inherited NRI socket was already used")]
    InheritedFdUsed,
    /// The ttrpc server for the Plugin service could not start.
    #[error("cannot start the plugin service: {0}")]
    Serve(ttrpc::Error),
    /// RegisterPlugin failed.
    #[error("registration with the runtime failed: {0}")]
    Register(ttrpc::Error),
    /// RegisterPlugin did not answer in time.
    #[error("registration with the runtime timed out after {0:?}")]
    RegisterTimeout(Duration),
    /// The multiplexed connection failed.
    #[error("NRI connection: {0}")]
    Mux(#[from] MuxError),
    /// No connection to the runtime right now.
    #[error("not connected to the runtime")]
    NotConnected,
    /// UpdateContainers was called from inside a handler method (it would deadlock).
    #[error("UpdateContainers called from inside an NRI event handler; return updates in the response instead")]
    CalledFromHandler,
    /// An unsolicited UpdateContainers request failed.
    #[error("UpdateContainers failed: {0}")]
    Update(ttrpc::Error),
}

/// How to reach the runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Dial this unix socket (external plugin); reconnect when it breaks.
    Socket(PathBuf),
    /// Use this already connected socket fd (plugin launched by the runtime); ownership of
    /// the fd passes to the stub.
    InheritedFd(RawFd),
}

/// Settings of the stub.
#[derive(Clone, Debug)]
pub struct StubOptions {
    /// Plugin name sent in RegisterPlugin.
    pub name: String,
    /// Two-digit plugin index: plugins are called in ascending index order.
    pub index: String,
    /// Where the runtime is.
    pub endpoint: Endpoint,
    /// How long to wait for the RegisterPlugin answer.
    pub registration_timeout: Duration,
    /// First reconnection delay (dial mode).
    pub initial_backoff: Duration,
    /// Longest reconnection delay (dial mode).
    pub max_backoff: Duration,
}

impl StubOptions {
    /// Options for plugin `name` at `index`, dialing [`DEFAULT_SOCKET_PATH`].
    pub fn new(name: impl Into<String>, index: impl Into<String>) -> Self {
        StubOptions {
            name: name.into(),
            index: index.into(),
            endpoint: Endpoint::Socket(PathBuf::from(DEFAULT_SOCKET_PATH)),
            registration_timeout: Duration::from_secs(5),
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        }
    }

    /// Dial `path` instead of the default socket.
    pub fn socket(mut self, path: impl Into<PathBuf>) -> Self {
        self.endpoint = Endpoint::Socket(path.into());
        self
    }

    /// Switches to launched mode when the process environment says the runtime started
    /// this plugin (see [`StubOptions::from_env_with`]).
    pub fn from_env(self) -> Result<Self, StubError> {
        self.from_env_with(|var| std::env::var(var).ok())
    }

    /// Like [`StubOptions::from_env`], reading variables through `lookup`. When
    /// [`ENV_PLUGIN_SOCKET`] is set, the endpoint becomes that fd and the name and index
    /// come from [`ENV_PLUGIN_NAME`] / [`ENV_PLUGIN_IDX`] when present. Without it the
    /// options are returned unchanged.
    pub fn from_env_with(
        mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, StubError> {
        let Some(fd_text) = lookup(ENV_PLUGIN_SOCKET) else {
            return Ok(self);
        };
        let fd: RawFd = fd_text.trim().parse().map_err(|e| StubError::InvalidEnv {
            var: ENV_PLUGIN_SOCKET,
            value: fd_text.clone(),
            reason: format!("not a file descriptor number ({e})"),
        })?;
        if fd < 0 {
            return Err(StubError::InvalidEnv {
                var: ENV_PLUGIN_SOCKET,
                value: fd_text,
                reason: "negative file descriptor".into(),
            });
        }
        self.endpoint = Endpoint::InheritedFd(fd);
        if let Some(name) = lookup(ENV_PLUGIN_NAME).filter(|n| !n.is_empty()) {
            self.name = name;
        }
        if let Some(idx) = lookup(ENV_PLUGIN_IDX).filter(|i| !i.is_empty()) {
            self.index = idx;
        }
        Ok(self)
    }

    /// Whether the plugin runs in launched mode (inherited socket).
    pub fn is_launched(&self) -> bool {
        matches!(self.endpoint, Endpoint::InheritedFd(_))
    }

    /// Checks the name and the two-digit index.
    pub fn validate(&self) -> Result<(), StubError> {
        let name_ok = !self.name.is_empty()
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !name_ok {
            return Err(StubError::InvalidName(self.name.clone()));
        }
        if self.index.len() != 2 || !self.index.chars().all(|c| c.is_ascii_digit()) {
            return Err(StubError::InvalidIndex(self.index.clone()));
        }
        Ok(())
    }
}

#[derive(Default)]
struct HandleState {
    client: Option<RuntimeClient>,
    runtime: Option<RuntimeInfo>,
}

/// Handle to the current runtime connection, usable from any task.
#[derive(Clone, Default)]
pub struct RuntimeHandle {
    state: Arc<Mutex<HandleState>>,
}

impl RuntimeHandle {
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

/// How a connection ended.
struct SessionEnd {
    registered: bool,
    reason: String,
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
        Ok(Stub {
            opts,
            handle: RuntimeHandle::default(),
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
        tokio::select! {
            result = self.connection_loop(plugin) => result,
            () = &mut stop => {
                tracing::info!("stopping NRI plugin");
                Ok(())
            }
        }
    }

    async fn connection_loop<P: Plugin>(&mut self, plugin: Arc<P>) -> Result<(), StubError> {
        let mut backoff = self.opts.initial_backoff;
        loop {
            let end = match self.connect().await {
                Ok(stream) => self.session(stream, plugin.clone()).await,
                Err(err) => Err(err),
            };
            let launched = self.opts.is_launched();
            let reason = match end {
                Ok(end) => {
                    if end.registered {
                        backoff = self.opts.initial_backoff;
                        plugin.disconnected(&end.reason).await;
                        if launched {
                            tracing::info!(reason = %end.reason, "runtime connection closed; exiting");
                            return Ok(());
                        }
                    }
                    end.reason
                }
                Err(err) if launched => return Err(err),
                Err(err) => err.to_string(),
            };
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

    /// Serves one connection until it ends.
    async fn session<P: Plugin>(
        &self,
        stream: UnixStream,
        plugin: Arc<P>,
    ) -> Result<SessionEnd, StubError> {
        let plugin_id = format!("{}-{}", self.opts.index, self.opts.name);
        let mux = Mux::new(stream);
        // The ttrpc tasks keep their connections (and so the socket) alive; close the
        // socket explicitly however this function ends, including cancellation.
        let _close = CloseOnDrop(mux.clone());
        let session = Arc::new(Session::new(plugin_id.clone()));
        let service = PluginService {
            plugin,
            session: session.clone(),
            handle: self.handle.clone(),
        };
        let mut server = Server::new()
            .register_service(create_plugin(Arc::new(service)))
            .add_listener(mux.listener(PLUGIN_SERVICE_CONN)?);
        server.start().await.map_err(StubError::Serve)?;
        let runtime = RuntimeClient::new(Client::new(mux.socket(RUNTIME_SERVICE_CONN)?));

        let registered = self.register(&runtime, &plugin_id).await;
        let end = match registered {
            Ok(()) => {
                self.handle.set_client(Some(runtime));
                let reason = mux.closed().await;
                self.handle.set_client(None);
                let shutdown = session.shutdown_received.load(Ordering::SeqCst);
                Ok(SessionEnd {
                    registered: true,
                    reason: describe_end(&reason, shutdown),
                })
            }
            Err(err) => Err(err),
        };
        mux.close();
        server.shutdown().await.ok();
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
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn env_switches_to_launched_mode() {
        let opts = StubOptions::new("nri-align", "90")
            .from_env_with(env(&[
                (ENV_PLUGIN_SOCKET, "3"),
                (ENV_PLUGIN_IDX, "07"),
                (ENV_PLUGIN_NAME, "nri-align"),
            ]))
            .unwrap();
        assert_eq!(opts.endpoint, Endpoint::InheritedFd(3));
        assert_eq!(opts.index, "07");
        assert!(opts.is_launched());
        opts.validate().unwrap();
    }

    #[test]
    fn without_socket_env_options_stay_in_dial_mode() {
        let opts = StubOptions::new("nri-align", "90")
            .socket("/tmp/x.sock")
            .from_env_with(env(&[(ENV_PLUGIN_IDX, "07")]))
            .unwrap();
        assert_eq!(opts.endpoint, Endpoint::Socket("/tmp/x.sock".into()));
        assert_eq!(opts.index, "90");
    }

    #[test]
    fn bad_env_and_identity_are_rejected() {
        let err = StubOptions::new("a", "10").from_env_with(env(&[(ENV_PLUGIN_SOCKET, "three")]));
        assert!(matches!(
            err,
            Err(StubError::InvalidEnv {
                var: ENV_PLUGIN_SOCKET,
                ..
            })
        ));
        for idx in ["1", "100", "a1", ""] {
            let err = StubOptions::new("nri-align", idx).validate();
            assert!(matches!(err, Err(StubError::InvalidIndex(_))), "{idx:?}");
        }
        for name in ["", "a b", "x/y"] {
            let err = StubOptions::new(name, "10").validate();
            assert!(matches!(err, Err(StubError::InvalidName(_))), "{name:?}");
        }
    }

    #[test]
    fn inherited_fd_must_be_a_socket() {
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let fd = std::os::unix::io::AsRawFd::as_raw_fd(&file);
        let err = stream_from_fd(fd).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(stream_from_fd(-1).is_err());
    }

    #[tokio::test]
    async fn update_containers_refused_inside_handlers_and_when_disconnected() {
        let handle = RuntimeHandle::default();
        let inside = IN_EVENT_HANDLER
            .scope(true, handle.update_containers(vec![], vec![]))
            .await;
        assert!(matches!(inside, Err(StubError::CalledFromHandler)));
        let outside = handle.update_containers(vec![], vec![]).await;
        assert!(matches!(outside, Err(StubError::NotConnected)));
    }
}
