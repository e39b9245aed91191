//! Placement through the simulator: refusals replayed on the shipped hosts (their messages
//! consistent with the engine's own free state), and the shipped host descriptions placed as
//! workloads. On align-core and this crate only; the command-line checks of `nri-align
//! simulate` are the root crate's (`tests/placement/`).

mod refusals;
mod shipped;
