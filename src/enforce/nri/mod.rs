//! The NRI adapter: [`plugin::AlignPlugin`] implements the stub's `Plugin` trait by handing each
//! event to the engine, and [`convert`] maps NRI messages to and from the engine's types. The
//! only code of the crate that touches `nri_protocol`.

pub mod convert;
pub mod plugin;

pub use plugin::AlignPlugin;
