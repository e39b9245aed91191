//! Enforcement: NRI event handling, container adjustments, the shared pool, persisted state.

pub mod adjust;
pub mod engine;
pub mod privileges;
pub mod reconcile;
pub mod request;
pub mod state;
pub mod view;
