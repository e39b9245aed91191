//! Enforcement: NRI event handling, container adjustments, the shared pool, persisted state.

pub mod adjust;
pub mod engine;
#[cfg(any())] // MERGE: enable with nri-protocol (helper A).
pub mod nri_view;
#[cfg(any())] // MERGE: enable with nri-protocol (helper A).
pub mod plugin;
pub mod privileges;
pub mod reconcile;
pub mod request;
pub mod state;
#[cfg(test)]
pub(crate) mod testing;
pub mod verify;
pub mod view;
