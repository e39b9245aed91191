//! The allocator through align-core's public API: engine cases, generic devices, overflow, and
//! the properties of the search and the allocator. The cases replayed through `simulate` are
//! the simulate crate's (`crates/simulate/tests/placement/`).

mod engine;
mod generic;
mod gpu_search_props;
mod overflow;
mod props;
