//! nri-align: an NRI plugin that places each container's CPUs, memory, GPUs and NICs on the same
//! part of the machine.
//!
//! The concerns, lowest layer first (docs/architecture.md has what each may touch):
//! - [`untrusted`]: how much input from outside is read at all, and how much of a bad value an
//!   error message repeats.
//! - [`topology`]: the host model and every way to read it (sysfs under a root, NVML, hwloc XML,
//!   host descriptions), emulated hosts.
//! - [`placement`]: the allocator, from a request and the ledger to an assignment or a reason.
//! - [`host`]: the only code that touches the live host (cgroups, /proc, /dev, capabilities,
//!   file permissions).
//! - [`config`]: the configuration file and its reload.
//! - [`metrics`]: the Prometheus registry and its HTTP responder.
//! - [`enforce`]: the plugin: NRI adapter, engine, adjustments, persisted state, drift check.
//! - [`simulate`]: workload replay against the allocator or a kubelet-like baseline.
//! - [`cli`]: the subcommands.

pub mod cli;
pub mod config;
pub mod enforce;
pub mod host;
pub mod metrics;
pub mod nrt;
pub mod simulate;

// The pure core lives in its own crate so that it cannot reach the host or the wire; its
// modules keep their paths here.
pub use align_core::{placement, topology, untrusted};
