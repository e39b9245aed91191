//! The NRI adapter: [`plugin::AlignPlugin`] implements the stub's `Plugin` trait by handing each
//! event to the engine, and [`convert`] maps NRI messages to and from the engine's types. The
//! only code of the crate that touches `nri_protocol`.

pub mod convert;
pub mod learning;
mod node_facts;
pub mod plugin;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use nri_protocol::stub::{KeptFields, LinkState, Stub, StubError, StubOptions, SyncKeep};

pub use plugin::AlignPlugin;

use crate::enforce::engine::Placer;

/// How the plugin reaches the runtime: the socket fd the runtime launched it with
/// (`NRI_PLUGIN_SOCKET`), else `socket` to dial. Settled before capabilities are dropped.
pub struct Connection(Stub);

impl Connection {
    /// Registers as `name` with index `idx`.
    pub fn new(name: &str, idx: &str, socket: &Path) -> Result<Self, StubError> {
        let mut opts = StubOptions::new(name, idx).socket(socket).from_env()?;
        opts.sync_keep = SyncKeep::Only(kept_fields());
        opts.sync_limits.max_objects = MAX_SYNC_OBJECTS;
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

/// Most pods plus containers one Synchronize may carry. The largest nodes run a few hundred
/// pods (kubelet `maxPods` 110 by default, 250 on most managed clusters, 737 at most on EKS),
/// each with a few containers the runtime still lists (init containers included): this is
/// twice that, and it bounds what the engine builds for each of them during a Synchronize
/// (about 7 KiB per container, measured in `tests/daemon/sync_memory.rs`), which the stub's
/// default of 65,536 would let reach 450 MiB.
pub const MAX_SYNC_OBJECTS: usize = 8192;

/// What nri-align reads of the open-ended fields of a Synchronize's pods and containers; the
/// stub skips every other entry on the wire, so that a node's worth of environments, labels,
/// annotations and mounts never sits in memory (see docs/install.md on the daemon's memory).
/// Every reader of these fields in `enforce` is covered: the GPU variables
/// (`inputs::devices`, `adjust`), the decision variable and annotation (`engine::reconcile`),
/// the `nri-align.io` annotations (placement), the `cdi.k8s.io/` annotations and the
/// volume-mounts mounts (`inputs`), and the container-name label (`convert`).
pub fn kept_fields() -> KeptFields {
    use k8s_devices::{cdi, nvidia};
    KeptFields {
        env: vec![
            nvidia::VISIBLE_DEVICES_ENV.to_string(),
            "CUDA_VISIBLE_DEVICES".to_string(),
            crate::enforce::adjust::DECISION_ENV.to_string(),
        ],
        annotation_domains: vec![
            crate::placement::annotations::DOMAIN.to_string(),
            cdi::ANNOTATION_PREFIX.trim_end_matches('/').to_string(),
        ],
        labels: vec!["io.kubernetes.container.name".to_string()],
        mount_prefixes: vec![nvidia::VOLUME_MOUNTS_ROOT.to_string()],
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
