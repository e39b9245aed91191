//! The pure core of nri-align: what a placement is computed from and how, with no access to
//! the live host beyond reading a topology tree under a root directory, and no wire protocol.
//!
//! | module | what it is | what it may use |
//! |---|---|---|
//! | [`untrusted`] | how much input from outside is read at all, and how much of a bad value an error message repeats | nothing of the crate |
//! | [`topology`] | the host model and every way to read it (sysfs under a root, NVML, hwloc XML, host descriptions), emulated hosts, the loader [`topology::load::load`] | `untrusted` |
//! | [`placement`] | the allocator, from a [`placement::Request`] and the [`placement::ledger`] to a [`placement::Assignment`] or a [`placement::PlacementError`] | `topology`, `untrusted` |
//!
//! The crate's dependencies are the layering rule the compiler keeps: no NRI or CRI wire, no
//! cgroup, `/proc` or device-node code (that is the main crate's `host` module), no async
//! runtime. [`placement::Allocator::plan_in`] decides from the topology, the ledger and the
//! request alone, so the plugin, `nri-align simulate`, the benches and the property tests all
//! run the same code.
//!
//! The `nri-align` crate re-exports the three modules under the same names; its crate page has
//! the whole architecture walk (the CreateContainer path and the start-up).

pub mod placement;
pub mod topology;
pub mod untrusted;
