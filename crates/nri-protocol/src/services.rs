//! Generated async ttrpc services of the NRI API.
//!
//! [`Plugin`] is served by a plugin (multiplexed connection 1) and called through
//! [`PluginClient`] by the runtime; [`Runtime`] is served by the runtime (connection 2) and
//! called through [`RuntimeClient`]. [`create_plugin`] and [`create_runtime`] build the
//! service maps for `ttrpc::asynchronous::Server::register_service`.
//!
//! The generated trait defaults answer `NOT_FOUND`; [`crate::stub`] overrides every
//! method, so nothing built on the stub ever sends that code.

pub use crate::generated::api_ttrpc::{
    create_plugin, create_runtime, Plugin, PluginClient, Runtime, RuntimeClient,
};

/// Fully qualified name of the Plugin service.
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// Fully qualified name of the Runtime service.
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
