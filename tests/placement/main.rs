//! The placement simulator through the library's public API: refusals replayed, the shipped
//! host descriptions, the simulator and its CLI. The allocator's own cases are align-core's
//! tests (`crates/align-core/tests/placement/`).

mod refusals;
mod shipped;
mod simulate;
