//! The NRI adapter: [`plugin::AlignPlugin`] implements the stub's `Plugin` trait by handing each
//! event to the engine, and [`convert`] maps NRI messages to and from the engine's types. The
//! only code of the crate that touches `nri_protocol`.

pub mod convert;
pub mod plugin;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use nri_protocol::stub::{Stub, StubError, StubOptions};

pub use plugin::AlignPlugin;

use crate::enforce::engine::Placer;

/// How the plugin reaches the runtime: the socket fd the runtime launched it with
/// (`NRI_PLUGIN_SOCKET`), else `socket` to dial. Settled before capabilities are dropped.
pub struct Connection(StubOptions);

impl Connection {
    /// Registers as `name` with index `idx`.
    pub fn new(name: &str, idx: &str, socket: &Path) -> Result<Self, StubError> {
        Ok(Self(StubOptions::new(name, idx).socket(socket).from_env()?))
    }

    /// Serves `plugin` over the connection (reconnecting as the stub does) until `stop`
    /// completes or the runtime ends a launched plugin.
    pub async fn serve<P: Placer + 'static>(
        self,
        plugin: Arc<AlignPlugin<P>>,
        stop: impl Future<Output = ()>,
    ) -> Result<(), StubError> {
        Stub::new(self.0)?.run_until(plugin, stop).await
    }
}
