//! When the running containers are listed over CRI: each time the plugin registers with a
//! runtime that sends it no Synchronize. The listing itself is `enforce::cri_listing`'s; this
//! side follows the NRI link and holds creations back meanwhile, so the listing needs nothing
//! of the plugin.

use std::sync::Arc;

use super::{AlignPlugin, LinkWatch};
use crate::enforce::cri_listing::learn;
use crate::enforce::engine::Placer;

/// Follows the runtime link and, each time the plugin registers with a runtime that sends it
/// no Synchronize, lists the running containers over the CRI socket the configuration in force
/// names (retrying while the runtime's CRI is not serving yet, for up to two minutes) and hands
/// the listing to `plugin` (creations wait meanwhile, [`AlignPlugin::learning_begins`]). A
/// listing that cannot be had is said in the log, with what to change.
pub fn spawn<P: Placer + 'static>(
    mut link: LinkWatch,
    plugin: Arc<AlignPlugin<P>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut done_for = 0u64;
        let mut state = link.current();
        loop {
            if state.without_synchronize && state.registrations > done_for {
                done_for = state.registrations;
                let runtime = state.runtime_name.clone().unwrap_or_default();
                match plugin.cri_socket(&runtime) {
                    None => tracing::warn!(
                        runtime = %runtime,
                        "the runtime sends this plugin no Synchronize and no CRI socket is set to list what runs: containers the state file does not record are not accounted for (set cri_socket in the config)"
                    ),
                    Some(socket) => {
                        plugin.learning_begins();
                        let listing = learn(&socket, || plugin.stop_waiting()).await;
                        plugin.learned(listing);
                    }
                }
            }
            match link.changed().await {
                Some(next) => state = next,
                None => return,
            }
        }
    })
}
