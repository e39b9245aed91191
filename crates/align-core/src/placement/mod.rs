//! Placement: from the topology, what is allocated, and one container's request, the CPUs,
//! memory nodes, GPUs and NICs that belong together, or a precise reason why not.
//!
//! The contract other modules rely on: [`Request`] in, [`Assignment`] or [`PlacementError`]
//! out, through an [`Allocator`] that owns the live allocations.
//!
//! May use: `topology` and `untrusted`; nothing of the host or the wire, so a decision depends
//! on its inputs alone.

pub mod allocator;
pub mod annotations;
mod best_sets;
pub mod budget;
#[cfg(test)]
mod budget_tests;
mod choose;
pub mod cpus;
pub mod device_map;
pub mod error;
mod given;
pub mod gpus;
pub mod hugepages;
pub mod ledger;
mod lookahead;
pub mod nics;
pub mod numa;
mod orbits;
mod partitions;
pub mod policy;
pub mod pool;
pub mod reject;
pub mod request;
pub mod resize;
pub mod resolve;
pub mod scheduler;
pub mod spread;
#[cfg(test)]
mod test_requests;
mod twins;

pub use allocator::{Allocator, Plan};
pub use choose::GpuSearch;
pub use error::PlacementError;
pub use hugepages::{HugePageNeed, HugePagesHeld};
pub use ledger::NodeFree;
pub use policy::{
    CpuPreference, CpuSpread, GpuMode, MemPolicy, NumaChoice, PlacementConfig, Policy,
    ResizeShrink, SchedulerChoiceMode, Scope,
};
pub use request::{Assignment, GenericDevice, MemoryPolicy, PodInfo, PodTotals, Request};
pub use scheduler::{Scheduler, SchedulerChoice};
