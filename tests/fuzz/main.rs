//! Fuzz targets for every parser of outside input, on stable Rust: the
//! NRI socket's multiplexer framing, ttrpc and NRI message decoding, the placement
//! annotations, the configuration, `simulate` workloads, the sysfs reader and the hwloc
//! importer. `harness.rs` has the mutation loop and its budget; `hack/test` runs each target
//! time-boxed (`NRI_ALIGN_FUZZ_SECS`), a plain `cargo test` a few hundred inputs each.
//!
//! Every target asserts more than "no panic": bounded error messages (a hostile value is never
//! echoed whole), and where a format has one, a round trip.
// Test code: a failed unwrap is a test failure with its input saved.
#![allow(clippy::unwrap_used)]

mod harness;
mod parsers;
mod protocol;
mod topology;
