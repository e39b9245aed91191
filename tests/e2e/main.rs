//! End to end against real runtimes (containerd 1.7 and 2.1, CRI-O), one module per area; each
//! test brings up its own instance (`test_support::e2e`), so they run in parallel. Root only:
//! `NRI_ALIGN_E2E=skip` skips them knowingly. One runtime: `cargo test --test e2e crio`.

mod daemon;
mod devices;
mod dra;
mod enforce;
mod enforce_load;
mod evict;
mod image;
mod kubelet_shapes;
mod mig;
mod nrt;
mod nrt_refresh;
mod observe;
mod others;
mod plugin;
mod required_plugins;
mod scheduler;
mod soak;
