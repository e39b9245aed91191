//! Reloading the configuration file while running: on SIGHUP, when the file changes (the
//! directory watch of [`super::watch`], for a swapped ConfigMap, after a short quiet time so a
//! burst of events is one reload), and by a slow poll where no watch is possible.
//!
//! One rule for all three: the file is read off the async workers ([`FileReader`]), parsed,
//! validated and applied; a file that fails any step leaves the previous configuration in
//! force and the log says why. A changed file is only reloaded when its bytes differ from the
//! applied ones, and a bad version is reported once, not at every poll; SIGHUP always reloads
//! and always says what happened.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::read::FileReader;
use super::select::{select_in_dir, Identity, Selected};
use super::watch::DirWatch;
use super::{Config, ConfigError};

/// What asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// SIGHUP (`systemctl reload`, `kill -HUP`).
    Signal,
    /// A change in the file's directory.
    FileChanged,
    /// The slow poll.
    Poll,
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Trigger::Signal => "SIGHUP",
            Trigger::FileChanged => "file changed",
            Trigger::Poll => "poll",
        })
    }
}

/// What a check of the file did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new configuration is in force.
    Applied(Trigger),
    /// The file could not be read, parsed, validated or applied; the previous configuration
    /// stays.
    Rejected(Trigger, String),
    /// The file holds what is in force (or the bad version already reported): nothing done.
    Unchanged,
    /// The file went back to what is in force after a rejected version.
    BackToApplied,
}

/// Timing of the reloader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReloadOptions {
    /// Quiet time after a directory event before the file is read (an atomic swap or an
    /// editor's save is several events).
    pub debounce: Duration,
    /// How often the file is read and compared anyway.
    pub poll_every: Duration,
    /// How long a read may take before the reload gives up on it.
    pub read_timeout: Duration,
    /// Whether to watch the directory (off: SIGHUP and the poll only).
    pub watch: bool,
}

impl Default for ReloadOptions {
    fn default() -> Self {
        ReloadOptions {
            debounce: Duration::from_millis(250),
            // The kubelet itself takes up to a minute (its sync period plus the ConfigMap
            // cache) to swap a changed ConfigMap in; a poll at the same pace costs one small
            // read a minute.
            poll_every: Duration::from_secs(60),
            read_timeout: super::read::READ_TIMEOUT,
            watch: true,
        }
    }
}

/// A hash of a file's bytes (`DefaultHasher::new()` has fixed keys: the same bytes give the
/// same hash for the life of the process, which is all a comparison with the applied version
/// needs).
pub fn content_hash(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Reads the node's group label again (from its Node, through the API) for the section
/// reloader: `Ok(None)` when the node is in no group.
pub type Relabel = std::sync::Arc<
    dyn Fn() -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<Option<String>, String>> + Send>,
        > + Send
        + Sync,
>;

/// What the reloader reads: a plain file, or a fleet's section directory (select.rs), of
/// which the section chosen for this node is read (the choice is made again at each check, so
/// a `node.<name>` section added later takes over from `default`; on SIGHUP and on a change of
/// the directory, not at the poll, the node's group label is read again too).
#[derive(Clone)]
enum Target {
    File(PathBuf),
    Sections {
        dir: PathBuf,
        who: Identity,
        relabel: Option<Relabel>,
    },
}

impl Target {
    fn path(&self) -> &Path {
        match self {
            Target::File(p) => p,
            Target::Sections { dir, .. } => dir,
        }
    }

    /// The directory to watch: the file's, or the section directory itself (where the
    /// kubelet swaps `..data`).
    fn watched_dir(&self) -> PathBuf {
        match self {
            Target::Sections { dir, .. } => dir.clone(),
            Target::File(path) => match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ => PathBuf::from("."),
            },
        }
    }
}

/// A version read for a reload: what is applied, and, from a section directory, the section
/// it came from (`None`: no section applies, the built-in defaults).
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The parsed configuration.
    pub config: Config,
    /// The section read, when the target is a section directory and one applies.
    pub section: Option<Selected>,
}

/// The reloader's memory: which version of the file is in force and which was last refused.
struct Versions {
    target: Target,
    reader: FileReader,
    applied: u64,
    rejected: Option<u64>,
}

impl Versions {
    /// Reads the target: the key identifying this version and what it parses to.
    async fn read(&self) -> (u64, Result<Loaded, String>) {
        match &self.target {
            Target::File(path) => match self.reader.read(path).await {
                Ok(bytes) => (
                    content_hash(&bytes),
                    Config::from_bytes(&bytes, path)
                        .map(|config| Loaded {
                            config,
                            section: None,
                        })
                        .map_err(|e| e.to_string()),
                ),
                Err(e) => (error_key(&e), Err(e.to_string())),
            },
            Target::Sections { dir, who, .. } => {
                let who = who.clone();
                let chosen = self
                    .reader
                    .read_with(dir, move |d| select_in_dir(d, &who))
                    .await;
                match chosen {
                    Ok(None) => (
                        section_hash(None),
                        Ok(Loaded {
                            config: Config::default(),
                            section: None,
                        }),
                    ),
                    Ok(Some(sel)) => (
                        section_hash(Some(&sel)),
                        Config::from_bytes(&sel.bytes, &sel.path)
                            .map(|config| Loaded {
                                config,
                                section: Some(sel),
                            })
                            .map_err(|e| e.to_string()),
                    ),
                    Err(e) => (error_key(&e), Err(e.to_string())),
                }
            }
        }
    }

    /// Reads the node's group again, where it can be; a failed read keeps the group known.
    async fn relabel(&mut self) {
        let Target::Sections {
            who,
            relabel: Some(relabel),
            ..
        } = &mut self.target
        else {
            return;
        };
        match relabel().await {
            Ok(group) if group != who.group => {
                tracing::info!(
                    was = who.group.as_deref().unwrap_or("(none)"),
                    now = group.as_deref().unwrap_or("(none)"),
                    "this node's configuration group changed"
                );
                who.group = group;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(
                group = who.group.as_deref().unwrap_or("(none)"),
                "cannot read this node's labels again ({e}); keeping its group"
            ),
        }
    }

    async fn check<A>(&mut self, trigger: Trigger, settle: Duration, apply: &mut A) -> Outcome
    where
        A: FnMut(Loaded) -> Result<(), String>,
    {
        if trigger != Trigger::Poll {
            self.relabel().await;
        }
        let (mut key, mut parsed) = self.read().await;
        // A watch reloads once a burst of events has settled; a poll has no events and can
        // catch a file in the middle of a write (an editor, or `>`, truncates it first: an
        // empty file is all defaults, which would be applied). So a new version found by a
        // poll is taken only once it reads the same `settle` later; one still changing after
        // ten reads is left to the next poll.
        if trigger == Trigger::Poll && key != self.applied && self.rejected != Some(key) {
            let mut settled = false;
            for _ in 0..10 {
                tokio::time::sleep(settle).await;
                let (again, reparsed) = self.read().await;
                if again == key {
                    settled = true;
                    break;
                }
                (key, parsed) = (again, reparsed);
            }
            if !settled {
                return Outcome::Unchanged;
            }
        }
        if trigger != Trigger::Signal {
            if key == self.applied {
                return match self.rejected.take() {
                    Some(_) => Outcome::BackToApplied,
                    None => Outcome::Unchanged,
                };
            }
            if self.rejected == Some(key) {
                return Outcome::Unchanged;
            }
        }
        match parsed.and_then(apply) {
            Ok(()) => {
                self.applied = key;
                self.rejected = None;
                Outcome::Applied(trigger)
            }
            Err(why) => {
                self.rejected = Some(key);
                Outcome::Rejected(trigger, why)
            }
        }
    }
}

/// The version key of a section: its key and its bytes (the same text moved from `default`
/// to `node.<name>` is another version: the source in force changes); `None`: no section
/// applies.
pub fn section_hash(sel: Option<&Selected>) -> u64 {
    let Some(sel) = sel else {
        return content_hash(b"\0no section");
    };
    let mut bytes = sel.key.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend_from_slice(&sel.bytes);
    content_hash(&bytes)
}

/// A read error stands for a version of the file, so that the same error is reported once:
/// keyed by its text, except a hung read, whose text changes with the time it has hung.
fn error_key(e: &ConfigError) -> u64 {
    match e {
        ConfigError::ReadTimeout { .. } | ConfigError::ReadHung { .. } => {
            content_hash(b"\0read hangs")
        }
        other => content_hash(format!("\0{other}").as_bytes()),
    }
}

/// Logs an outcome the way operators read it.
fn log(path: &Path, outcome: &Outcome) {
    match outcome {
        Outcome::Applied(trigger) => {
            tracing::info!(config = %path.display(), %trigger, "configuration reloaded")
        }
        Outcome::Rejected(trigger, why) => tracing::warn!(
            config = %path.display(),
            %trigger,
            "configuration not reloaded, keeping the previous one: {why}"
        ),
        Outcome::BackToApplied => tracing::info!(
            config = %path.display(),
            "configuration file is back to the configuration in force"
        ),
        Outcome::Unchanged => {}
    }
}

/// Keeps `path` and the running configuration in step until the process ends: on SIGHUP, on a
/// change in the file's directory and every `poll_every`. `applied` is the hash
/// ([`content_hash`]) of the bytes the running configuration came from. `apply` gets each new
/// configuration that parsed (validation against the host is its job); `report` sees every
/// outcome (for metrics). Must be called inside a tokio runtime.
pub fn spawn_reloader<A, R>(
    path: PathBuf,
    applied: u64,
    opts: ReloadOptions,
    mut apply: A,
    report: R,
) -> std::io::Result<tokio::task::JoinHandle<()>>
where
    A: FnMut(Config) -> Result<(), String> + Send + 'static,
    R: FnMut(&Outcome) + Send + 'static,
{
    let versions = Versions {
        target: Target::File(path),
        reader: FileReader::new(opts.read_timeout),
        applied,
        rejected: None,
    };
    spawn(versions, opts, move |l: Loaded| apply(l.config), report)
}

/// [`spawn_reloader`] for a fleet's section directory `dir`: each check chooses this node's
/// section again (as at start; `relabel`, where the API can be reached, reads its group again
/// on SIGHUP and on a change of the directory) and hands `apply` what it read. `applied` is the
/// [`section_hash`] of the section in force, `rejected` that of a section refused at start
/// (reported then, so a poll does not report it again).
pub fn spawn_section_reloader<A, R>(
    dir: PathBuf,
    (who, relabel): (Identity, Option<Relabel>),
    (applied, rejected): (u64, Option<u64>),
    opts: ReloadOptions,
    apply: A,
    report: R,
) -> std::io::Result<tokio::task::JoinHandle<()>>
where
    A: FnMut(Loaded) -> Result<(), String> + Send + 'static,
    R: FnMut(&Outcome) + Send + 'static,
{
    let versions = Versions {
        target: Target::Sections { dir, who, relabel },
        reader: FileReader::new(opts.read_timeout),
        applied,
        rejected,
    };
    spawn(versions, opts, apply, report)
}

fn spawn<A, R>(
    mut versions: Versions,
    opts: ReloadOptions,
    mut apply: A,
    mut report: R,
) -> std::io::Result<tokio::task::JoinHandle<()>>
where
    A: FnMut(Loaded) -> Result<(), String> + Send + 'static,
    R: FnMut(&Outcome) + Send + 'static,
{
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup())?;
    let dir = versions.target.watched_dir();
    let mut watch = if opts.watch {
        match DirWatch::new(&dir) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(
                    dir = %dir.display(),
                    "cannot watch the configuration's directory ({e}); the file is checked every {:?} and on SIGHUP",
                    opts.poll_every
                );
                None
            }
        }
    } else {
        None
    };
    Ok(tokio::spawn(async move {
        let mut poll = tokio::time::interval(opts.poll_every);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let trigger = tokio::select! {
                got = hup.recv() => match got {
                    Some(()) => Trigger::Signal,
                    None => return,
                },
                changed = next_change(&mut watch, opts.debounce) => {
                    if let Err(e) = changed {
                        tracing::warn!("configuration directory watch failed ({e}); checking every {:?} instead", opts.poll_every);
                        watch = None;
                    }
                    Trigger::FileChanged
                },
                // The first tick is at once: it catches a change made between start-up and
                // the watch.
                _ = poll.tick() => {
                    if let Some(w) = watch.as_mut() {
                        if !w.is_watching() && w.rewatch().is_ok() {
                            tracing::info!(dir = %w.dir().display(), "watching the configuration's directory again");
                        }
                    }
                    Trigger::Poll
                },
            };
            let outcome = versions.check(trigger, opts.debounce, &mut apply).await;
            log(versions.target.path(), &outcome);
            report(&outcome);
        }
    }))
}

/// Waits for a change in the watched directory and then for `debounce` of quiet (at most ten
/// times as long in all, so a directory that never settles still reloads). Never returns
/// without a watch.
async fn next_change(watch: &mut Option<DirWatch>, debounce: Duration) -> std::io::Result<()> {
    let Some(w) = watch.as_mut().filter(|w| w.is_watching()) else {
        return std::future::pending().await;
    };
    let names = w.changed().await?;
    tracing::debug!(?names, "change in the configuration's directory");
    let deadline = tokio::time::Instant::now() + debounce * 10;
    while w.is_watching() {
        let quiet = tokio::time::sleep(debounce);
        tokio::select! {
            more = w.changed() => { more?; }
            () = quiet => break,
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
