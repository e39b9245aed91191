//! The daemon's `container_local_memory_ratio`: every [`SAMPLE_EVERY`], the share of each
//! running container's resident memory on its NUMA nodes. The daemon has no periodic
//! reconcile to ride on, so this is its own task: it copies the few fields it needs under the
//! engine lock, then reads the host on a blocking thread, never holding the lock while it
//! reads. The series are the live records' only: a container removed loses its series at the
//! next sample.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::enforce::engine::{Engine, Placer};
use crate::enforce::memloc::{sample, sample_targets};
use crate::metrics::Metrics;

/// How often the shares are sampled: memory moves in minutes (a container filling it, the
/// kernel's NUMA balancing), and a sample reads one small cgroup file per container.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(60);

/// Samples the shares of `engine`'s containers into `metrics` every [`SAMPLE_EVERY`], the
/// host read under `host_root`.
pub fn spawn<P: Placer + Send + 'static>(
    engine: Arc<Mutex<Engine<P>>>,
    metrics: Arc<Metrics>,
    host_root: PathBuf,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let targets = {
                let engine = engine.lock().unwrap_or_else(|p| p.into_inner());
                sample_targets(&engine.records().containers)
            };
            let root = host_root.clone();
            match tokio::task::spawn_blocking(move || sample(&root, &targets)).await {
                Ok(samples) => metrics.set_local_memory(&samples),
                Err(e) => tracing::warn!("memory locality sample failed: {e}"),
            }
        }
    })
}
