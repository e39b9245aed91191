//! The background publisher: the daemon hands it snapshots (topology, free resources, pods)
//! through a watch channel and never waits for it; a task builds the object and makes the
//! server's copy equal to it.
//!
//! - Debounced: a burst of snapshots within `debounce` publishes once, the latest.
//! - Create-or-replace with the resourceVersion last seen; a 409 Conflict re-reads the object
//!   and tries again with the fresh version (a few times, then backoff).
//! - Unreachable, 429 or 5xx, 401/403, 422: the attempt fails, is counted, and is retried with
//!   exponential backoff (jittered, capped); newer snapshots replace what it will publish.
//! - Every `resync` the object is read again and repaired if someone edited or deleted it.
//! - An object nri-align does not own is left alone, and looked at again every `resync`:
//!   one without its label (another producer's, or left behind; replaced only with
//!   `nrt.take_over_foreign`), or one another field manager keeps rewriting ([`ownership`]).
//!
//! Other controllers' labels and annotations on the object are kept; nri-align owns the
//! zones, attributes, policies, its label and the owner reference.
//!
//! [`ownership`]: super::ownership

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kube::api::PostParams;
use kube::Api;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::builder::{build, NrtSettings, ZoneFree};
use super::failure::{Failure, CRD_MISSING};
use super::fingerprint::PodId;
use super::metrics::NrtMetrics;
use super::object::NodeResourceTopology;
use super::ownership::{self, Decision, NotOwned, Rewrites, FIELD_MANAGER};
use crate::topology::Topology;

/// What the node looks like right now.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The host topology.
    pub topology: Arc<Topology>,
    /// Free resources per NUMA node.
    pub free: Vec<ZoneFree>,
    /// Pods on the node, when known (adds the pod-set fingerprint).
    pub pods: Option<Arc<[PodId]>>,
}

/// Brings what changes without any event up to date before each attempt, on the publisher's
/// task (never the caller's): free huge pages, which processes take and give back.
pub type Refresh = Arc<dyn Fn(&Topology, &mut [ZoneFree]) + Send + Sync>;

/// Timing of the publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishOptions {
    /// Quiet time after a snapshot before publishing (coalesces bursts).
    pub debounce: Duration,
    /// How often the server's copy is re-read and repaired when nothing changed.
    pub resync: Duration,
    /// First retry delay after a failure.
    pub backoff_min: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// Conflicts answered by re-reading within one attempt before it counts as failed.
    pub conflict_retries: u32,
    /// Retry delay while the CRD is not installed: someone has to install it, which a quick
    /// retry does not hasten.
    pub crd_retry: Duration,
}

impl Default for PublishOptions {
    fn default() -> Self {
        PublishOptions {
            debounce: Duration::from_millis(500),
            resync: Duration::from_secs(60),
            backoff_min: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            conflict_retries: 5,
            crd_retry: Duration::from_secs(300),
        }
    }
}

/// What the publisher has achieved, for callers that want to wait for it (tests, readiness).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishStatus {
    /// Generation of the newest input (snapshot or settings) handed over.
    pub requested: u64,
    /// Generation the server's object was last made equal to.
    pub published: u64,
    /// resourceVersion of the server's object after that.
    pub resource_version: Option<String>,
    /// Failed attempts since the last success.
    pub consecutive_failures: u32,
    /// The last failure, if the last attempt failed.
    pub last_error: Option<String>,
    /// Set while the server's object is left alone because nri-align does not own it (its
    /// message says whose it is and what to do).
    pub not_owned: Option<NotOwned>,
    /// Set while the API server does not serve the NodeResourceTopology resource (the CRD is
    /// not installed): said once in the log, and on `/readyz` until it is installed.
    pub crd_missing: bool,
}

#[derive(Debug, Clone)]
struct Input {
    generation: u64,
    snapshot: Option<Arc<Snapshot>>,
    settings: Arc<NrtSettings>,
}

/// Handle on the publishing task. Dropping it stops the task.
#[derive(Debug)]
pub struct Publisher {
    input: watch::Sender<Input>,
    status: watch::Receiver<PublishStatus>,
    metrics: NrtMetrics,
    /// Set by [`Publisher::reread`]: the next attempt reads the server's copy first.
    reread: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Publisher {
    /// Starts publishing with `client` (must run inside a tokio runtime). Nothing is sent
    /// until the first [`Publisher::update`].
    pub fn spawn(
        client: kube::Client,
        settings: NrtSettings,
        options: PublishOptions,
        metrics: NrtMetrics,
    ) -> Publisher {
        Self::spawn_refreshing(client, settings, options, metrics, None)
    }

    /// [`Publisher::spawn`] with `refresh` applied to the free resources of every snapshot
    /// before each attempt (resyncs included).
    pub fn spawn_refreshing(
        client: kube::Client,
        settings: NrtSettings,
        options: PublishOptions,
        metrics: NrtMetrics,
        refresh: Option<Refresh>,
    ) -> Publisher {
        let (input, rx) = watch::channel(Input {
            generation: 0,
            snapshot: None,
            settings: Arc::new(settings),
        });
        let (status_tx, status) = watch::channel(PublishStatus::default());
        let reread = Arc::new(AtomicBool::new(false));
        let worker = Worker {
            reread: Arc::clone(&reread),
            api: Api::all(client),
            options,
            metrics: metrics.clone(),
            status: status_tx,
            seen: None,
            refresh,
            rewrites: Rewrites::default(),
        };
        let task = tokio::spawn(worker.run(rx));
        Publisher {
            input,
            status,
            metrics,
            reread,
            task,
        }
    }

    /// Hands over the node's current state; returns at once. Returns the input's generation.
    pub fn update(&self, snapshot: Snapshot) -> u64 {
        let snapshot = Arc::new(snapshot);
        let mut generation = 0;
        self.input.send_modify(|i| {
            i.generation += 1;
            i.snapshot = Some(snapshot);
            generation = i.generation;
        });
        generation
    }

    /// Has the next attempt (within the debounce) read the server's copy before comparing,
    /// instead of trusting the copy last written, and repair it if it differs.
    pub fn reread(&self) -> u64 {
        self.reread.store(true, Ordering::Relaxed);
        let mut generation = 0;
        self.input.send_modify(|i| {
            i.generation += 1;
            generation = i.generation;
        });
        generation
    }

    /// New settings (configuration reload); republishes with the last snapshot.
    pub fn set_settings(&self, settings: NrtSettings) -> u64 {
        let settings = Arc::new(settings);
        let mut generation = 0;
        self.input.send_modify(|i| {
            i.generation += 1;
            i.settings = settings;
            generation = i.generation;
        });
        generation
    }

    /// The publisher's progress.
    pub fn status(&self) -> PublishStatus {
        self.status.borrow().clone()
    }

    /// The publisher's progress, as it changes.
    pub fn follow_status(&self) -> watch::Receiver<PublishStatus> {
        self.status.clone()
    }

    /// Waits until generation `generation` (or a newer one) is on the server, or `timeout`
    /// passes; returns the status either way.
    pub async fn wait_published(&self, generation: u64, timeout: Duration) -> PublishStatus {
        let mut rx = self.status.clone();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|s| s.published >= generation)).await;
        self.status()
    }

    /// The publisher's counters.
    pub fn metrics(&self) -> &NrtMetrics {
        &self.metrics
    }
}

/// What one successful attempt did.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Created,
    Replaced,
    Unchanged,
    /// A foreign object replaced, as `nrt.take_over_foreign` asks.
    TakenOver(NotOwned),
    /// Not nri-align's: nothing written.
    LeftAlone(NotOwned),
}

impl Outcome {
    fn label(&self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Replaced => "replaced",
            Outcome::Unchanged => "unchanged",
            Outcome::TakenOver(_) => "taken-over",
            Outcome::LeftAlone(n) => n.reason(),
        }
    }
}

/// When the worker acts without a new input, and how long it waits after failures.
struct Schedule {
    backoff: Duration,
    /// When to act without a new input: the retry after a failure or the next resync.
    deadline: Option<Instant>,
    /// Set while the last attempt failed: when the next one may start.
    retry_at: Option<Instant>,
}

impl Schedule {
    /// After a success: the shortest backoff, no retry, the next resync.
    fn settled(options: &PublishOptions) -> Schedule {
        Schedule {
            backoff: options.backoff_min,
            deadline: Some(Instant::now() + options.resync),
            retry_at: None,
        }
    }
}

struct Worker {
    api: Api<NodeResourceTopology>,
    options: PublishOptions,
    metrics: NrtMetrics,
    status: watch::Sender<PublishStatus>,
    /// The object as last read from or written to the server.
    seen: Option<NodeResourceTopology>,
    refresh: Option<Refresh>,
    /// Other field managers' rewrites of the object, counted across attempts.
    rewrites: Rewrites,
    /// [`Publisher::reread`]'s request.
    reread: Arc<AtomicBool>,
}

impl Worker {
    async fn run(mut self, mut rx: watch::Receiver<Input>) {
        // Nothing to do before the first input.
        let mut next = Schedule {
            backoff: self.options.backoff_min,
            deadline: None,
            retry_at: None,
        };
        loop {
            let changed = match next.deadline {
                Some(at) => tokio::select! {
                    r = rx.changed() => Some(r),
                    _ = tokio::time::sleep_until(at) => None,
                },
                None => Some(rx.changed().await),
            };
            match changed {
                Some(Err(_)) => return, // the Publisher is gone
                Some(Ok(())) => {
                    // Let a burst settle; later inputs replace this one. After a failure, new
                    // inputs wait for the retry time too: a down server sees one attempt per
                    // backoff period, however busy the node is.
                    tokio::time::sleep(self.options.debounce).await;
                    if let Some(at) = next.retry_at {
                        tokio::time::sleep_until(at).await;
                    }
                }
                None => {
                    // Resync or retry: read the server's copy again before trusting it.
                    self.seen = None;
                }
            }
            let input = rx.borrow_and_update().clone();
            self.status
                .send_modify(|s| s.requested = s.requested.max(input.generation));
            let Some(snapshot) = input.snapshot.as_deref() else {
                next.deadline = None;
                continue;
            };
            if self.reread.swap(false, Ordering::Relaxed) {
                self.seen = None;
            }
            match self.attempt(snapshot, &input.settings).await {
                Ok(outcome) => {
                    self.succeeded(&outcome, input.generation);
                    next = Schedule::settled(&self.options);
                }
                Err(f) => self.failed(&f, &mut next),
            }
        }
    }

    /// One attempt: the object built from `snapshot` (the free resources refreshed first
    /// where a refresh is set) and reconciled with the server's.
    async fn attempt(
        &mut self,
        snapshot: &Snapshot,
        settings: &NrtSettings,
    ) -> Result<Outcome, Failure> {
        self.metrics.attempt();
        let refreshed;
        let free = match &self.refresh {
            Some(refresh) => {
                let mut f = snapshot.free.clone();
                refresh(&snapshot.topology, &mut f);
                refreshed = f;
                &refreshed
            }
            None => &snapshot.free,
        };
        match build(&snapshot.topology, free, snapshot.pods.as_deref(), settings) {
            Ok(desired) => self.reconcile(desired, settings.take_over_foreign).await,
            Err(e) => Err(Failure {
                reason: "build",
                message: e.to_string(),
            }),
        }
    }

    /// Counts and reports an attempt that succeeded for input `generation`.
    fn succeeded(&mut self, outcome: &Outcome, generation: u64) {
        self.metrics.success(outcome.label());
        self.report_ownership(outcome);
        if !matches!(outcome, Outcome::Unchanged | Outcome::LeftAlone(_)) {
            tracing::debug!(outcome = outcome.label(), "NodeResourceTopology published");
        }
        let rv = self
            .seen
            .as_ref()
            .and_then(|o| o.metadata.resource_version.clone());
        let published = !matches!(outcome, Outcome::LeftAlone(_));
        self.status.send_modify(|s| {
            if s.consecutive_failures > 0 {
                tracing::info!(
                    after = s.consecutive_failures,
                    "the API server answers the NodeResourceTopology publisher again after failures"
                );
            }
            if published {
                s.published = s.published.max(generation);
                s.resource_version = rv;
            }
            s.consecutive_failures = 0;
            s.last_error = None;
            s.crd_missing = false;
        });
    }

    /// Counts and reports a failed attempt, and schedules the next one in `next`.
    fn failed(&mut self, f: &Failure, next: &mut Schedule) {
        self.metrics.failure(f.reason);
        self.seen = None;
        let failures = self.status.borrow().consecutive_failures + 1;
        let crd_missing = f.reason == CRD_MISSING;
        let said = crd_missing && self.status.borrow().crd_missing;
        // The first failure and then every tenth are warnings; the rest debug. A missing CRD
        // is said once: only an installation fixes it.
        if !said && (crd_missing || failures == 1 || failures % 10 == 0) {
            tracing::warn!(reason = f.reason, failures, retry_in = ?next.backoff,
                "publishing NodeResourceTopology failed: {}", f.message);
        } else {
            tracing::debug!(
                reason = f.reason,
                failures,
                "publishing NodeResourceTopology failed: {}",
                f.message
            );
        }
        self.status.send_modify(|s| {
            s.consecutive_failures = failures;
            s.last_error = Some(format!("{}: {}", f.reason, f.message));
            s.crd_missing = crd_missing;
        });
        if f.reason == "build" {
            // Only a new input can fix it.
            next.deadline = None;
            next.retry_at = None;
        } else if crd_missing {
            let at = Instant::now() + jitter(self.options.crd_retry);
            next.deadline = Some(at);
            next.retry_at = Some(at);
        } else {
            let at = Instant::now() + jitter(next.backoff);
            next.deadline = Some(at);
            next.retry_at = Some(at);
            next.backoff = (next.backoff * 2).min(self.options.backoff_max);
        }
    }

    /// Logs a change of ownership once (the first time an object is left alone, with what to
    /// do; when nri-align owns it again), and sets the status and the gauge.
    fn report_ownership(&self, outcome: &Outcome) {
        let (now, taken_over) = match outcome {
            Outcome::LeftAlone(n) => (Some(n.clone()), None),
            Outcome::TakenOver(n) => (None, Some(n)),
            _ => (None, None),
        };
        let before = self.status.borrow().not_owned.clone();
        ownership::log_change(before.as_ref(), now.as_ref(), taken_over);
        self.metrics
            .set_not_owned(now.as_ref().map(NotOwned::reason));
        if before != now {
            self.status.send_modify(|s| s.not_owned = now);
        }
    }

    /// Makes the server's object equal to `desired`, if it is nri-align's to change.
    async fn reconcile(
        &mut self,
        desired: NodeResourceTopology,
        take_over_foreign: bool,
    ) -> Result<Outcome, Failure> {
        let name = desired.metadata.name.clone().unwrap_or_default();
        let pp = PostParams {
            dry_run: false,
            field_manager: Some(FIELD_MANAGER.into()),
        };
        let mut conflicts = 0;
        loop {
            let current = match self.seen.take() {
                Some(o) => Some(o),
                None => self.api.get_opt(&name).await?,
            };
            let window = ownership::window(self.options.resync);
            let decision = ownership::decide(
                current.as_ref(),
                &desired,
                take_over_foreign,
                window,
                &mut self.rewrites,
            );
            let (cur, outcome) = match (decision, current) {
                (Decision::Unchanged, cur) => {
                    self.seen = cur;
                    return Ok(Outcome::Unchanged);
                }
                (Decision::LeaveAlone(n), _) => {
                    // Read again next time: the object may be gone or relabelled by then.
                    self.seen = None;
                    return Ok(Outcome::LeftAlone(n));
                }
                (Decision::Replace, Some(cur)) => (Some(cur), Outcome::Replaced),
                (Decision::TakeOver(n), Some(mut cur)) => {
                    // The previous producer's owner goes with it: its deletion (NFD's
                    // namespace) would otherwise collect nri-align's object.
                    cur.metadata.owner_references = None;
                    (Some(cur), Outcome::TakenOver(n))
                }
                // Create (decide answers it whenever there is no object).
                (_, _) => (None, Outcome::Created),
            };
            let creating = cur.is_none();
            let result = match cur {
                None => self.api.create(&pp, &desired).await,
                Some(cur) => {
                    let obj = merge_metadata(&cur, desired.clone());
                    self.api.replace(&name, &pp, &obj).await
                }
            }
            .map(|o| (o, outcome));
            match result {
                Ok((obj, outcome)) => {
                    self.seen = Some(obj);
                    return Ok(outcome);
                }
                // 409: someone changed it since we read it (replace), or created it meanwhile
                // (create); 404 on replace: deleted meanwhile. Read again and retry.
                // The collection of a served cluster-scoped type always exists.
                Err(e @ kube::Error::Api(_)) if creating && is_404(&e) => {
                    return Err(Failure::crd_missing(&e))
                }
                Err(kube::Error::Api(s))
                    if (s.code == 409 || (s.code == 404 && self.seen.is_none()))
                        && conflicts < self.options.conflict_retries =>
                {
                    if s.code == 409 {
                        self.metrics.conflict();
                    }
                    conflicts += 1;
                    self.seen = None;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

fn is_404(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// `desired` carrying the server's metadata: its resourceVersion (optimistic concurrency),
/// and other controllers' labels and annotations, with nri-align's label and owner on top.
fn merge_metadata(
    current: &NodeResourceTopology,
    mut desired: NodeResourceTopology,
) -> NodeResourceTopology {
    let mut meta = current.metadata.clone();
    let mut labels = meta.labels.take().unwrap_or_default();
    labels.extend(desired.metadata.labels.take().unwrap_or_default());
    meta.labels = Some(labels);
    if desired.metadata.owner_references.is_some() {
        meta.owner_references = desired.metadata.owner_references.take();
    }
    // The server keeps its own record of field managers on an update without them.
    meta.managed_fields = None;
    desired.metadata = meta;
    desired
}

/// `d` plus up to 25% (from the clock's nanoseconds: no RNG dependency for this), so many
/// nodes that lost the same API server do not retry in lockstep.
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(0);
    d + d.mul_f64(f64::from(nanos % 1000) / 4000.0)
}

#[cfg(test)]
#[path = "publish_tests.rs"]
mod tests;
