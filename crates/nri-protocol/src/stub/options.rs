//! Settings of the stub (plugin identity, where the runtime is, backoff) and its errors.

use std::io;
use std::os::unix::io::RawFd;
use std::path::PathBuf;
use std::time::Duration;

use crate::mux::MuxError;

/// Default NRI socket of containerd and CRI-O.
pub const DEFAULT_SOCKET_PATH: &str = "/var/run/nri/nri.sock";
/// Environment variable with the plugin name, set by a runtime that launches the plugin.
pub const ENV_PLUGIN_NAME: &str = "NRI_PLUGIN_NAME";
/// Environment variable with the plugin index, set by a runtime that launches the plugin.
pub const ENV_PLUGIN_IDX: &str = "NRI_PLUGIN_IDX";
/// Environment variable with the connected socket's fd number, set by a launching runtime.
pub const ENV_PLUGIN_SOCKET: &str = "NRI_PLUGIN_SOCKET";
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

/// Bounds on one Synchronize. NRI v0.7+ runtimes split it into chunks marked `more=true`
/// that the stub joins before calling [`Plugin::synchronize`](super::Plugin::synchronize);
/// without a bound a runtime (or anything on its socket) could make the plugin hold chunks
/// without end. A Synchronize over any bound fails with RESOURCE_EXHAUSTED and what was
/// collected so far is dropped.
///
/// The defaults leave room for far more than a node runs: a dense node (250 pods, 1,000
/// containers with their env, mounts and hooks) sends about 10 MiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncLimits {
    /// Most chunks of one Synchronize.
    pub max_chunks: usize,
    /// Most pods plus containers in all chunks together; with [`SyncKeep::Only`] the entries
    /// kept of them (variables, labels, annotations, mounts, device nodes, device rules, CDI
    /// devices) are bounded by the same number, counted apart.
    pub max_objects: usize,
    /// Most bytes of encoded pods and containers in all chunks together.
    pub max_bytes: u64,
}

impl Default for SyncLimits {
    fn default() -> Self {
        SyncLimits {
            max_chunks: 1024,
            max_objects: 65_536,
            max_bytes: 64 << 20,
        }
    }
}

/// Bounds on every other request of the Plugin service that carries pods or containers
/// (CreateContainer, UpdateContainer, the other container and pod events, StateChange). Each
/// is counted on the wire before it is decoded (`event_bounds`); one over the bound fails with
/// RESOURCE_EXHAUSTED (for CreateContainer the runtime then fails the creation with that
/// message) and is never decoded.
///
/// The default leaves room for far more than a container holds: a pod in a namespace of a
/// thousand services gets seven thousand service-link variables, a privileged container every
/// device node of its host (a few thousand), the runtime's default seccomp profile about 400
/// syscall names. At the bound the decoded request takes about 11 MiB at most (empty mounts,
/// the dearest entries), against 348 MiB for 4 MiB of empty mounts unbounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventLimits {
    /// Most entries of the request's repeated fields and maps, at every depth, together
    /// (variables, arguments, mounts and their options, labels, annotations, hooks and their
    /// arguments, device nodes and rules, namespaces, rlimits, CDI devices, sysctls, seccomp
    /// syscalls, hugepage limits, pod IPs; a packed list counts one per byte).
    pub max_entries: usize,
}

impl Default for EventLimits {
    fn default() -> Self {
        EventLimits {
            max_entries: 65_536,
        }
    }
}

/// What the stub keeps of each pod and container of a Synchronize. The request is walked on
/// the wire, never decoded whole: a runtime's Synchronize carries every environment variable,
/// label, annotation and mount of every container on the node (tens of MiB within
/// [`SyncLimits`]), and the generated types cost about twenty times their encoded size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SyncKeep {
    /// Every field (the generated types, one pod or container at a time, each counted
    /// against [`SyncLimits`] before it is decoded).
    #[default]
    All,
    /// Only what [`KeptFields`] names, besides the identity, state, resources, device nodes,
    /// CDI devices, cgroups path and pid of each container and the identity and pod resources
    /// of each pod; everything else is skipped on the wire without being allocated.
    Only(KeptFields),
}

/// The entries of the open-ended fields that [`SyncKeep::Only`] keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeptFields {
    /// Environment variables kept, by exact name (`NAME=value` entries whose `NAME` is one).
    pub env: Vec<String>,
    /// Annotations kept, by domain: a key `D/...` or `sub.D/...` for each domain `D`.
    pub annotation_domains: Vec<String>,
    /// Labels kept, by exact key.
    pub labels: Vec<String>,
    /// Mounts kept, by destination prefix (destination, type and source; options dropped).
    pub mount_prefixes: Vec<String>,
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
    /// Bounds on a chunked Synchronize.
    pub sync_limits: SyncLimits,
    /// What is kept of each pod and container of a Synchronize.
    pub sync_keep: SyncKeep,
    /// Bounds on the other requests that carry pods and containers.
    pub event_limits: EventLimits,
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
            sync_limits: SyncLimits::default(),
            sync_keep: SyncKeep::All,
            event_limits: EventLimits::default(),
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

#[cfg(test)]
#[path = "options_tests.rs"]
mod tests;
