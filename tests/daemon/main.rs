//! The nri-align daemon and its CLI without a container runtime: the state dir under disk-full
//! and faults (a simulated NRI runtime on its socket), the upgrade of an old state file, the
//! start-up checks, a mixed fleet on one ConfigMap, CPU hot-plug under a fake host root, and
//! NodeResourceTopology publishing and the eviction requests of `evict_refused_after`
//! against a real API server.

mod cli;
mod devlinks;
mod diskfull;
mod evict_apiserver;
mod faults;
mod fleet;
mod hangup;
mod hotplug;
mod idle;
mod nrt_apiserver;
mod nrt_crd_missing;
mod state_upgrade;
mod sync_memory;
