//! The allocator and the placement simulator through the library's public API: engine cases,
//! overflow, properties, the shipped host descriptions, the simulator and its CLI.

mod engine;
mod generic;
mod gpu_search_props;
mod overflow;
mod props;
mod refusals;
mod shipped;
mod simulate;
