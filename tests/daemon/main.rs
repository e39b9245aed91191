//! The nri-align daemon and its CLI without a container runtime: the state dir under disk-full
//! and faults (a simulated NRI runtime on its socket), the upgrade of an old state file, the
//! start-up checks, and NodeResourceTopology publishing against a real API server.

mod cli;
mod diskfull;
mod faults;
mod nrt_apiserver;
mod nrt_crd_missing;
mod state_upgrade;
mod sync_memory;
