//! Placement: from the topology, what is allocated, and one container's request, the CPUs,
//! memory nodes, GPUs and NICs that belong together, or a precise reason why not.
//!
//! The contract other modules rely on: [`Request`] in, [`Assignment`] or [`PlacementError`]
//! out, through an [`Allocator`] that owns the live allocations.
//!
//! May use: `topology` and `untrusted`; nothing of the host or the wire, so a decision depends
//! on its inputs alone.
//!
//! Layers, each using only those above it in this list (never one below):
//! - values: [`policy`], [`error`], [`hugepages`], [`device_map`], [`assignment`],
//!   [`request`], [`budget`], [`cpus`], the pod's annotations ([`annotations`]) and its
//!   scheduler's choice as read ([`scheduler`]);
//! - the record: [`ledger`] (what is held, the shared pool, what is free);
//! - per node: [`nics`], [`numa`] (capacities, node sets), then the request resolved against
//!   the ledger ([`resolve`], with a scheduler's choice checked in [`resolve::honour`]) and
//!   the CPU spread ([`spread`]);
//! - GPU sets: [`ranking`] (links, candidate sets, look-ahead, symmetries);
//! - the refusal that names what decided ([`reject`]), the joint choice (`choose`);
//! - [`allocator`], and the in-place [`resize`] on top of it.

pub mod allocator;
pub mod annotations;
pub mod assignment;
pub mod budget;
#[cfg(test)]
mod budget_tests;
mod choose;
pub mod cpus;
pub mod device_map;
pub mod error;
pub mod hugepages;
pub mod ledger;
pub mod nics;
pub mod numa;
pub mod policy;
pub mod ranking;
pub mod reject;
pub mod request;
pub mod resize;
pub mod resolve;
pub mod scheduler;
pub mod spread;
#[cfg(test)]
mod test_requests;

pub use allocator::{Allocator, Plan};
pub use assignment::{Assignment, ChoiceOutcome, MemoryPolicy};
pub use choose::GpuSearch;
pub use error::PlacementError;
pub use hugepages::{HugePageNeed, HugePagesHeld};
pub use ledger::{pool, NodeFree};
pub use policy::{
    CpuPreference, CpuSpread, GpuMode, MemPolicy, NumaChoice, PlacementConfig, Policy,
    ResizeShrink, SchedulerChoiceMode, Scope,
};
// `placement::gpus` is where the link table has always been named from outside.
pub use ranking::gpus;
pub use request::{GenericDevice, PodInfo, PodTotals, Request};
pub use scheduler::{Scheduler, SchedulerChoice};
