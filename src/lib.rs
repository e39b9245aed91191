//! nri-align: an NRI plugin that places each container's CPUs, memory, GPUs and NICs on the same
//! part of the machine.

pub mod cli;
pub mod config;
pub mod enforce;
pub mod metrics;
pub mod nrt;
pub mod placement;
pub mod topology;
