//! The CDI spec registry: every device the CDI spec files on this host declare, resolved to
//! the host devices it gives a container, kept in memory so that a container's creation only
//! looks names up.
//!
//! Spec files are read from the configured directories (`cdi_spec_dirs`, under the host root)
//! when the daemon starts (once its capabilities are dropped) and again within a second of any
//! change to them (an inotify watch, `watch.rs`, whose thread a guard replaces when it ends or
//! stalls, `guard.rs`); a lookup never reads a file. A spec that cannot be used (unparseable,
//! aliases that expand beyond its size, over the size cap or past the total caps of all files
//! together, a symlink loop, not a regular file, a device node outside `/dev`) is skipped with
//! one log line, and its devices are unknown: a container naming them is placed as if CDI had
//! not named them. Files are opened non-blocking and checked with `fstat`: a FIFO is never
//! waited on.
//!
//! As in the reference library (cncf-tags/container-device-interface `pkg/cdi/cache.go`), a
//! later directory takes precedence over an earlier one, and a device two files of one
//! directory declare is a conflict: neither is used.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod guard;
mod injected;
mod metrics;
mod reuse;
mod scan;
pub mod sysfs;
mod watch;

pub use metrics::CdiMetrics;
pub use reuse::FileDevices;
pub use scan::{
    scan, scan_after, Scan, Skipped, MAX_SPEC_FILES, MAX_TOTAL_DEVICES, MAX_TOTAL_SPEC_BYTES,
};
pub use watch::WatchTiming;

/// The directories read when the configuration names none (relative to the host root).
pub const DEFAULT_SPEC_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];

/// A PCI function a CDI device node stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciFunction {
    /// Bus id in sysfs form, lowercase.
    pub bus_id: String,
    /// NUMA node sysfs gives (`None` for -1 or unreadable).
    pub numa_node: Option<u32>,
    /// Root complex (`pci0000:3a`), then the bridges down to the function itself.
    pub pcie_path: Vec<String>,
}

/// A host device one device node of a CDI device stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CdiTarget {
    /// `/dev/nvidiaN`: the NVIDIA GPU with minor number N.
    NvidiaGpu {
        /// The minor number.
        minor: u32,
    },
    /// A `/dev/nvidia-caps/` node: the GPU node beside it is the parent of a MIG device.
    MigCapability,
    /// `/dev/infiniband/uverbsN`.
    Uverbs {
        /// `uverbsN`.
        name: String,
        /// Its PCI function, when sysfs links one.
        pci: Option<PciFunction>,
    },
    /// A PCI function the kernel links the node to (DRM, accel, VFIO).
    Pci(PciFunction),
}

/// One device node a CDI device's edits add, as the container sees it: what a runtime that
/// applied the spec puts in the container's `linux.devices` (the container path; the type and
/// numbers where the spec gives them, else those of the host node, which the runtime stats).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecNode {
    /// Path in the container (`path`).
    pub path: String,
    /// `c`, `b`, ...: the spec's, else the host node's; empty when neither says.
    pub kind: String,
    /// Major and minor number: the spec's (non-zero major), else the host node's; `None` when
    /// neither gives them (no such node on the host).
    pub numbers: Option<(i64, i64)>,
}

/// One device of a CDI spec, resolved on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CdiDevice {
    /// Qualified name, `vendor/class=name`.
    pub name: String,
    /// The spec file it came from.
    pub spec: PathBuf,
    /// Host devices its device nodes (device-level and spec-level) stand for.
    pub targets: Vec<CdiTarget>,
    /// Device nodes that stand for nothing sysfs links (`path: why`).
    pub unmapped: Vec<String>,
    /// Host interfaces of its `netDevices`.
    pub net_devices: Vec<String>,
    /// Env entries its edits add.
    pub env: Vec<String>,
    /// Container paths of the mounts its edits add.
    pub mounts: Vec<String>,
    /// The device nodes its edits add (device-level, then spec-level): what matching a
    /// container's injected nodes back to the device compares.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<SpecNode>,
}

/// The devices of every usable spec, by qualified name, with the lookups that match what a
/// runtime injected back to them (built once per scan, `injected.rs`).
#[derive(Debug, Clone, Default)]
pub struct CdiIndex {
    devices: HashMap<String, Arc<CdiDevice>>,
    /// Devices with device nodes, by the container path of their first node.
    by_node: HashMap<String, Vec<Arc<CdiDevice>>>,
    /// Devices with no device node and some env, by their first env entry.
    by_env: HashMap<String, Vec<Arc<CdiDevice>>>,
}

impl CdiIndex {
    /// The device named `name` (`vendor/class=name`).
    pub fn get(&self, name: &str) -> Option<&Arc<CdiDevice>> {
        self.devices.get(name)
    }

    /// How many devices are known.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// Whether no device is known.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// The known devices among `names`, each once, in the order first named.
    pub fn resolve<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Vec<CdiDevice> {
        let mut out: Vec<CdiDevice> = Vec::new();
        // A set of the names taken, not a scan of `out` per name: linear in the names.
        let mut taken: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for n in names {
            let n = n.trim();
            if let Some((name, d)) = self.devices.get_key_value(n) {
                if taken.insert(name.as_str()) {
                    out.push(CdiDevice::clone(d));
                }
            }
        }
        out
    }
}

/// The registry shared by the watcher (which replaces the index) and the create path (which
/// reads it).
#[derive(Debug)]
pub struct CdiRegistry {
    root: PathBuf,
    dirs: Vec<PathBuf>,
    index: RwLock<Arc<CdiIndex>>,
    files_read: AtomicU64,
    skipped: RwLock<Vec<Skipped>>,
    /// How many rescans swapped an index in, and the signal of each: a caller that changed a
    /// spec can wait for the rescan that follows instead of guessing a delay.
    rescans: Mutex<u64>,
    rescanned: Condvar,
    metrics: CdiMetrics,
    /// Each used file's devices at the last scan: what the next one takes over unchanged.
    files: Mutex<FileDevices>,
    /// When the registry was made: the origin of `beat_ms`.
    origin: std::time::Instant,
    /// Milliseconds after `origin` of the watcher's last sign of life.
    beat_ms: AtomicU64,
    /// The watcher that should run: one that finds a later number here ends.
    generation: AtomicU64,
}

impl CdiRegistry {
    /// A registry of the specs in `dirs` under `root`, read once now.
    pub fn new(root: &Path, dirs: &[PathBuf]) -> Arc<Self> {
        Self::with_metrics(root, dirs, CdiMetrics::default())
    }

    /// [`CdiRegistry::new`], counting in `metrics`.
    pub fn with_metrics(root: &Path, dirs: &[PathBuf], metrics: CdiMetrics) -> Arc<Self> {
        let r = Arc::new(CdiRegistry {
            root: root.to_path_buf(),
            dirs: dirs.to_vec(),
            index: RwLock::new(Arc::new(CdiIndex::default())),
            files_read: AtomicU64::new(0),
            skipped: RwLock::new(Vec::new()),
            rescans: Mutex::new(0),
            rescanned: Condvar::new(),
            metrics,
            files: Mutex::new(FileDevices::new()),
            origin: std::time::Instant::now(),
            beat_ms: AtomicU64::new(0),
            generation: AtomicU64::new(0),
        });
        r.rescan();
        r
    }

    /// The current index: a lookup costs a lock-free clone of an `Arc` under a read lock.
    pub fn snapshot(&self) -> Arc<CdiIndex> {
        match self.index.read() {
            Ok(g) => Arc::clone(&g),
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    /// How many spec files were read since start (a rescan reads again only the files that
    /// changed).
    pub fn files_read(&self) -> u64 {
        self.files_read.load(Ordering::Relaxed)
    }

    /// Reads every spec again and swaps the index in. Each skipped file is logged once, when it
    /// is first seen broken (not on every later rescan).
    pub fn rescan(&self) {
        // Only the watcher rescans (and `new`, before it starts): the lock is never waited on.
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let s = scan_after(&self.root, &self.dirs, &files);
        *files = s.files;
        drop(files);
        self.files_read.fetch_add(s.files_read, Ordering::Relaxed);
        {
            let mut old = match self.skipped.write() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            for k in s.skipped.iter().filter(|k| !old.contains(k)) {
                tracing::warn!(file = %k.file.display(), "CDI spec skipped: {}", k.why);
            }
            self.metrics.skipped.set(gauge(s.skipped.len()));
            *old = s.skipped;
        }
        tracing::debug!(devices = s.index.len(), "CDI specs read");
        self.metrics.devices.set(gauge(s.index.len()));
        self.metrics.over_cap.set(gauge(s.over_cap));
        let new = Arc::new(s.index);
        match self.index.write() {
            Ok(mut g) => *g = new,
            Err(p) => *p.into_inner() = new,
        }
        let mut n = self.rescans.lock().unwrap_or_else(|p| p.into_inner());
        *n += 1;
        self.rescanned.notify_all();
    }

    /// How many times the specs were read since start (the first read counts).
    pub fn rescans(&self) -> u64 {
        *self.rescans.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the specs were read more than `seen` times ([`CdiRegistry::rescans`]), at
    /// most `timeout`; the count then. Woken by the rescan itself, never by polling.
    pub fn wait_rescan(&self, seen: u64, timeout: Duration) -> u64 {
        let g = self.rescans.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = self
            .rescanned
            .wait_timeout_while(g, timeout, |n| *n <= seen)
            .unwrap_or_else(|p| p.into_inner());
        *g
    }

    /// Watches the spec directories and rescans within a second of a change, until the
    /// registry is the watcher's last owner. Runs on a thread of its own: a rescan reads files
    /// and must never stall the runtime's calls.
    pub fn watch(self: &Arc<Self>) -> std::io::Result<std::thread::JoinHandle<()>> {
        watch::spawn(Arc::clone(self), WatchTiming::default())
    }

    /// [`CdiRegistry::watch`], with a guard thread that notices a watcher that ended or made
    /// no progress for `timing.stall_after`, starts another, and reports it: `degraded` gets
    /// the reason (or `None` once a watcher runs again), the metrics count the restart.
    pub fn watch_guarded(
        self: &Arc<Self>,
        timing: WatchTiming,
        degraded: impl Fn(Option<String>) + Send + 'static,
    ) -> std::io::Result<()> {
        guard::spawn_guarded(Arc::clone(self), timing, Box::new(degraded))
    }

    /// The watcher is alive and at work now.
    fn beat(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.beat_ms.store(ms, Ordering::Relaxed);
    }

    /// Time since the watcher's last sign of life.
    fn since_beat(&self) -> Duration {
        let last = Duration::from_millis(self.beat_ms.load(Ordering::Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }

    fn watched_dirs(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .map(|d| self.root.join(d.strip_prefix("/").unwrap_or(d)))
            .collect()
    }
}

/// A count as a gauge's value.
fn gauge(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

#[cfg(test)]
#[path = "cdi_tests.rs"]
mod tests;
