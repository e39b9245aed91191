//! Enforcement: NRI event handling, container adjustments, the shared pool, persisted state.

pub mod adjust;
pub mod engine;
pub mod nri_view;
pub mod placer;
pub mod plugin;
pub mod privileges;
pub mod reconcile;
pub mod request;
pub mod state;
#[cfg(test)]
pub(crate) mod testing;
pub mod verify;
pub mod view;
