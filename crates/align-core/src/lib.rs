//! The pure core of nri-align: what a placement is computed from and how, with no access to
//! the live host beyond reading a topology tree under a root directory, and no wire protocol.
//!
//! - [`untrusted`]: how much input from outside is read at all, and how much of a bad value an
//!   error message repeats.
//! - [`topology`]: the host model and every way to read it (sysfs under a root, NVML, hwloc XML,
//!   host descriptions), emulated hosts.
//! - [`placement`]: the allocator, from a [`placement::Request`] and the
//!   [`placement::ledger`] to a [`placement::Assignment`] or a [`placement::PlacementError`].
//!
//! The `nri-align` crate re-exports the three modules under the same names; `simulate`, the
//! benches and the property tests use them from there or from here.

pub mod placement;
pub mod topology;
pub mod untrusted;
