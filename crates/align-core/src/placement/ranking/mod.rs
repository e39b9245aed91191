//! GPU-set ranking: which sets of a decision's free GPUs are worth growing into candidates,
//! and how each scores, from the links between the GPUs alone.
//!
//! The contract: a [`gpus::LinkTable`] built once per topology and a decision's free GPU
//! indices in; the candidate sets ([`gpus::candidates`], [`gpus::candidate_masks`]), each
//! set's link score, the look-ahead of what it leaves (`lookahead`) and the classes of
//! interchangeable sets (`orbits`) out. Nothing here knows CPUs, memory, policies or
//! requests: the joint choice (`placement::choose`) grows each set into a candidate with its
//! nodes and NICs, and ranks those. The walks that take the sets in rank order
//! (`choose::in_turn`) sit with that choice for the same reason: each set they take is grown
//! into a candidate before the next is scored.
//!
//! The tables computed once per topology (`best_sets`, `partitions`, `twins`) hold no
//! occupancy: a decision hands in its free set, so they stay right however the GPUs are held.
//!
//! May use: `topology`, and the `ledger` read-only (the NIC paths a symmetry must keep).

mod best_sets;
pub mod gpus;
pub(super) mod lookahead;
pub(super) mod orbits;
mod partitions;
mod twins;
