//! NRI wire protocol: generated `nri.pkg.api.v1alpha1` types and ttrpc services, plus the
//! connection multiplexer that carries both services over one socket.
//!
//! - [`api`]: every message and enum of the NRI API (written in `proto/nri/api.proto`),
//!   plus [`api::EventMask`] and the protobuf helpers needed to build messages.
//! - [`services`]: the generated async ttrpc `Plugin`/`Runtime` traits and clients.
//! - [`mux`]: the NRI connection multiplexer (frame format, connection ids 1 and 2).
//! - [`version`]: runtime and NRI version parsing, and which events each NRI release knows.
//! - [`stub`]: a ready plugin runner: connect, register, configure, synchronize, dispatch
//!   events to a [`stub::Plugin`] handler, reconnect.
#![warn(missing_docs)]

// Generated code follows rust-protobuf's and ttrpc-compiler's conventions (non-snake-case
// field names such as `NRI_version`, unused imports); allowances stay confined here.
#[allow(
    warnings,
    missing_docs,
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    unreachable_pub,
    non_snake_case,
    non_camel_case_types
)]
mod generated;

pub mod api;
pub mod mux;
pub mod services;
pub mod stub;
pub mod version;
