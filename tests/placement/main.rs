//! `nri-align simulate` from the command line, and what the daemon and the simulator must
//! agree on (the default GPU mode). The simulator's own cases are the simulate crate's
//! (`crates/simulate/tests/`), the allocator's align-core's (`crates/align-core/tests/placement/`).

mod simulate;
