//! The NRI adapter: [`plugin::AlignPlugin`] implements the stub's `Plugin` trait by handing each
//! event to the engine, and [`convert`] maps NRI messages to and from the engine's types. The
//! only code of the crate that touches `nri_protocol`.

pub mod convert;
pub mod learning;
pub mod plugin;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use nri_protocol::stub::{LinkState, Stub, StubError, StubOptions};

pub use plugin::AlignPlugin;

use crate::enforce::engine::Placer;

/// How the plugin reaches the runtime: the socket fd the runtime launched it with
/// (`NRI_PLUGIN_SOCKET`), else `socket` to dial. Settled before capabilities are dropped.
pub struct Connection(Stub);

impl Connection {
    /// Registers as `name` with index `idx`.
    pub fn new(name: &str, idx: &str, socket: &Path) -> Result<Self, StubError> {
        let opts = StubOptions::new(name, idx).socket(socket).from_env()?;
        Ok(Self(Stub::new(opts)?))
    }

    /// Follows the connection's state, in the crate's terms ([`Link`]).
    pub fn watch(&self) -> LinkWatch {
        LinkWatch(self.0.handle().link())
    }

    /// Serves `plugin` over the connection (reconnecting as the stub does) until `stop`
    /// completes or the runtime ends a launched plugin.
    pub async fn serve<P: Placer + 'static>(
        self,
        plugin: Arc<AlignPlugin<P>>,
        stop: impl Future<Output = ()>,
    ) -> Result<(), StubError> {
        self.0.run_until(plugin, stop).await
    }
}

/// The runtime connection as the rest of the daemon sees it (health, metrics, systemd): the
/// NRI stub's state without its types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Registered and synchronized on the current connection (see
    /// `nri_protocol::stub::LinkState::is_ready`).
    pub ready: bool,
    /// The connection ended for good (stopped, or a launched plugin's runtime went away).
    pub stopped: bool,
    /// Successful registrations so far (more than one: reconnections).
    pub registrations: u64,
    /// One line: what it is connected to, or why not and what happens next.
    pub description: String,
    /// Ready on Configure alone: the runtime launched the plugin and sends it no Synchronize
    /// (NRI before v0.7.0), so what runs must be learned some other way (`enforce::cri_listing`).
    pub without_synchronize: bool,
    /// The runtime's name as Configure gave it (`containerd`, `cri-o`), once configured.
    pub runtime_name: Option<String>,
    /// The last attempt found no socket at the endpoint (NRI off, or the runtime not running).
    pub socket_missing: bool,
}

impl From<&LinkState> for Link {
    fn from(s: &LinkState) -> Self {
        Link {
            ready: s.is_ready(),
            stopped: s.phase == nri_protocol::stub::LinkPhase::Stopped,
            registrations: s.registrations,
            description: s.to_string(),
            without_synchronize: s.is_ready()
                && s.phase == nri_protocol::stub::LinkPhase::Configured,
            runtime_name: s.runtime.as_ref().map(|r| r.name.clone()),
            socket_missing: s.socket_missing,
        }
    }
}

/// Changes of the runtime connection ([`Connection::watch`]).
pub struct LinkWatch(tokio::sync::watch::Receiver<LinkState>);

impl LinkWatch {
    /// The state now.
    pub fn current(&mut self) -> Link {
        Link::from(&*self.0.borrow_and_update())
    }

    /// Waits for the next change and returns the state then; `None` once the stub is gone.
    pub async fn changed(&mut self) -> Option<Link> {
        self.0.changed().await.ok()?;
        Some(self.current())
    }
}
