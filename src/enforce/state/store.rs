//! The state log under the state dir: open and lock the dir, replay the log at start (or read
//! and migrate a 0.1.0 `state.json`), append the changed records after each event, and
//! compact the log once it holds more than twice the live records.
//!
//! A shared container's record is kept as a follower of its group's pool (`journal.rs`), so a
//! pool change that moves every shared container is one group line. The store remembers what
//! the log says of each group and which shared records it holds with their own cpuset
//! ([`FileGroups`]): a group line may only be written when every member runs on its cpuset,
//! and those pinned members are rewritten as followers then.
//!
//! Why a log: rewriting the whole document after every event cost time proportional to the
//! number of containers (24 MB and 0.6 s per event at 1,000 containers in 0.1.0). An append
//! costs one `write` of the changed records' lines; a compaction, one record per live
//! container, happens once per as many changes as there are live containers (plus 1,024),
//! so its cost per event stays constant too.
//!
//! A write that fails (the state dir's filesystem full or turned read-only) costs no event
//! more than its own `write`: the store marks the log for a whole rewrite and tries that
//! rewrite again at most every [`RETRY_AFTER`]; writes in between do nothing (their changes
//! are in the table, and the rewrite writes every live record). Without that, every event of
//! the outage compacted the whole log into a temp file that failed (162 ms per event at 5,000
//! live records in a debug build). The [`Outage`] says since when and how many writes were
//! lost, for the caller to log once when it starts and once when it ends. Without events, the
//! daemon's timer asks for that retry ([`StateStore::retry_in`] says when it is due).
//!
//! A state dir its filesystem keeps from being created or opened at start (read-only, full:
//! [`StateError::is_outage`]) is the same outage ([`StateStore::open_or_wait`]): the store
//! starts without it and each retry tries to open it first; once open, the rewrite writes
//! every live record.

use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::file_groups::FileGroups;
use super::{journal, GroupKey, Loaded, Records, StateDoc, StateError, STATE_VERSION};
use crate::host::files::OwnedDir;

/// The log's file name under the state dir.
pub const STATE_FILE: &str = "state.log";
/// The 0.1.0 document, read once to migrate it.
pub const LEGACY_FILE: &str = "state.json";
/// What the 0.1.0 document is renamed to once migrated (kept for a look, never read again).
const MIGRATED_FILE: &str = "state.json.migrated";
/// Prefix of temporary files (compactions in progress).
const TEMP_PREFIX: &str = ".state.log";
/// Changes the log may hold beyond twice the live records before it is compacted.
pub(super) const COMPACT_SLACK: usize = 1024;
/// How many unusable state files are kept aside (`state.log.corrupt`, `.corrupt.1`...).
const CORRUPT_KEPT: usize = 4;
/// After a failed write, how long writes wait before the whole log is rewritten again. A
/// rewrite that fails costs the serialisation of every record and a temp file (ms at 5,000
/// records): once a second is nothing, once per event would slow every CreateContainer while
/// the disk is full. Space back, the first write after this delay persists everything.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The longest pause between two tries of the daemon's timer while writes fail without
/// events (`cli/run/retry.rs`): its pauses double from [`RETRY_AFTER`] up to this.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(5);

/// Writes failing in a row: the state dir cannot be written (full, read-only...).
#[derive(Debug, Clone)]
pub struct Outage {
    /// When the first write failed.
    pub since: Instant,
    /// The first failure.
    pub error: String,
    /// The last failure (the first one until another comes).
    pub latest: String,
    /// Whether the last failure is one the filesystem's condition explains and that passes by
    /// itself ([`StateError::is_outage`]); false once the dir itself went wrong meanwhile (a
    /// planted symlink, its permissions): waiting will not end that.
    pub latest_passes: bool,
    /// The last failure is of the other kind than the one before it.
    pub kind_changed: bool,
    /// Writes with changes that were not persisted (failed, or skipped until the retry).
    pub lost_writes: u64,
    /// Rewrites tried and failed (the first failure included).
    pub attempts: u64,
    retry_at: Instant,
}

/// The state log of one state dir.
#[derive(Debug)]
pub struct StateStore {
    /// `None` while the dir cannot be created or opened ([`StateStore::open_or_wait`]): the
    /// records live in memory only, and each retry tries to open it first.
    dir: Option<OwnedDir>,
    dir_path: PathBuf,
    writable: bool,
    /// Open to append (after the first load or write).
    log: Option<File>,
    /// Change lines in the log.
    lines: usize,
    /// The next write must rewrite the whole log (a damaged or missing one, a failed append).
    rewrite: bool,
    /// fdatasync after every write.
    fsync: bool,
    buf: Vec<u8>,
    /// What the log says of the groups.
    file: FileGroups,
    /// Set while writes fail; `None` once one succeeds.
    outage: Option<Outage>,
    /// The outage the last successful write ended, until [`StateStore::take_recovered`].
    recovered: Option<Outage>,
    retry_after: Duration,
}

impl StateStore {
    /// Opens the state dir for the daemon: creates it (mode 0700) when missing, refuses one
    /// that others could change, and locks it, so a second daemon on it fails here.
    pub fn open(dir: &Path) -> Result<StateStore, StateError> {
        Ok(Self::with(dir, Some(Self::open_dir(dir)?), true))
    }

    /// [`StateStore::open`] for the daemon: when the dir cannot be created or opened for a
    /// reason that is the filesystem's state, not the configuration (read-only, full, an I/O
    /// error: [`StateError::is_outage`]), the store starts without it, in the same outage as
    /// a full disk: nothing is loaded, every write is deferred until the retry, and the retry
    /// opens (creates) the dir and rewrites every live record. Said once, here. Any other
    /// failure (not a directory, a symlink, permissions, another daemon) is returned as
    /// `open` returns it: a state dir that is wrong stops the daemon at start.
    pub fn open_or_wait(dir: &Path) -> Result<StateStore, StateError> {
        match Self::open_dir(dir) {
            Ok(d) => Ok(Self::with(dir, Some(d), true)),
            Err(e) if e.is_outage() => {
                tracing::error!(
                    "state dir not usable: {e}; containers are still placed and their \
                     decisions kept in memory only: make its filesystem writable (or free \
                     space), or set state_dir to a writable directory; it is tried again \
                     every {}-{}s and every live record written once it can be (logged then)",
                    RETRY_AFTER.as_secs(),
                    RETRY_AFTER_MAX.as_secs()
                );
                let mut store = Self::with(dir, None, true);
                store.failed(&e, false);
                Ok(store)
            }
            Err(e) => Err(e),
        }
    }

    fn open_dir(dir: &Path) -> Result<OwnedDir, StateError> {
        let dir = OwnedDir::open_exclusive(dir)?;
        // Compactions a crash interrupted.
        for name in dir.names_with_prefix(TEMP_PREFIX) {
            let _ = dir.remove(&name);
        }
        Ok(dir)
    }

    /// The dir, once open.
    fn opened(&self) -> Result<&OwnedDir, StateError> {
        self.dir
            .as_ref()
            .ok_or_else(|| StateError::NotOpen(self.dir_path.clone()))
    }

    /// Opens the state dir to read only (`verify`, while the daemon runs): no lock, no
    /// migration, the same checks.
    pub fn open_read_only(dir: &Path) -> Result<StateStore, StateError> {
        Ok(Self::with(dir, Some(OwnedDir::open_read_only(dir)?), false))
    }

    fn with(path: &Path, dir: Option<OwnedDir>, writable: bool) -> StateStore {
        StateStore {
            dir,
            dir_path: path.to_path_buf(),
            writable,
            log: None,
            lines: 0,
            rewrite: true,
            fsync: false,
            buf: Vec::new(),
            file: FileGroups::default(),
            outage: None,
            recovered: None,
            retry_after: RETRY_AFTER,
        }
    }

    /// Sets how long writes wait after a failure before the next try (tests).
    #[cfg(test)]
    pub(crate) fn set_retry_after(&mut self, after: Duration) {
        self.retry_after = after;
    }

    /// The writes failing now, if they do.
    pub fn outage(&self) -> Option<&Outage> {
        self.outage.as_ref()
    }

    /// While writes fail: how long until the next write tries again (zero: due now). `None`
    /// when nothing fails.
    pub fn retry_in(&self) -> Option<Duration> {
        let o = self.outage.as_ref()?;
        Some(o.retry_at.saturating_duration_since(Instant::now()))
    }

    /// Whether the state dir is open (it is not while creating or opening it fails).
    pub fn is_open(&self) -> bool {
        self.dir.is_some()
    }

    /// The outage a write just ended (everything live is persisted again), once.
    pub fn take_recovered(&mut self) -> Option<Outage> {
        self.recovered.take()
    }

    /// Notes a failed write (or rewrite): the next write rewrites the whole log, not before
    /// [`RETRY_AFTER`].
    fn failed(&mut self, e: &StateError, lost: bool) {
        // What the store knows of the log is no longer sure, and the changes taken from the
        // table are in no file: only a whole rewrite makes the log right again.
        self.rewrite = true;
        self.log = None;
        let now = Instant::now();
        let (text, passes) = (e.to_string(), e.is_outage());
        let o = self.outage.get_or_insert_with(|| Outage {
            since: now,
            error: text.clone(),
            latest: text.clone(),
            latest_passes: passes,
            kind_changed: false,
            lost_writes: 0,
            attempts: 0,
            retry_at: now,
        });
        o.kind_changed = o.latest_passes != passes;
        o.latest = text;
        o.latest_passes = passes;
        o.attempts += 1;
        o.lost_writes += u64::from(lost);
        o.retry_at = now + self.retry_after;
    }

    /// Makes every write durable (fdatasync) before the event is answered.
    pub fn set_fsync(&mut self, on: bool) {
        self.fsync = on;
    }

    /// Path of the log.
    pub fn path(&self) -> PathBuf {
        self.dir_path.join(STATE_FILE)
    }

    /// Whether the dir holds any state (the log or a 0.1.0 document).
    pub fn exists(&self) -> bool {
        self.dir.is_some()
            && (self.dir_path.join(STATE_FILE).exists() || self.dir_path.join(LEGACY_FILE).exists())
    }

    /// Loads the records: from the log, else from a 0.1.0 `state.json` (migrated to a log
    /// when the store is writable). A missing state is fresh; an unusable one is corrupt (with
    /// why) and, when writable, set aside as `*.corrupt` so the next write starts a new log.
    pub fn load(&mut self) -> Loaded {
        let mut loaded = self.load_any();
        if let Loaded::Doc(doc) = &mut loaded {
            // Upgrade path: records of earlier versions carry no `found_running` flag, only
            // their reason says they were recorded as running (`Record::upgrade`). Not marked
            // changed: every load derives it again, and the next compaction writes it.
            let old: Vec<String> = doc
                .containers
                .iter()
                .filter(|(_, r)| r.predates_found_running())
                .map(|(id, _)| id.clone())
                .collect();
            for id in old {
                if let Some(mut r) = doc.containers.get_mut(&id) {
                    r.upgrade();
                }
            }
            doc.containers.clear_dirty();
        }
        loaded
    }

    fn load_any(&mut self) -> Loaded {
        let path = self.path();
        let Some(dir) = self.dir.as_ref() else {
            // Not open (`open_or_wait`): nothing to read; Synchronize brings what runs.
            return Loaded::Fresh;
        };
        let bytes = match dir.read(STATE_FILE) {
            Ok(Some(b)) => b,
            Ok(None) => return self.load_legacy(),
            Err(e) => return self.corrupt(STATE_FILE, e.to_string()),
        };
        let replayed = match journal::replay(&bytes) {
            Ok(r) => r,
            Err(why) => return self.corrupt(STATE_FILE, format!("{} {why}", path.display())),
        };
        if replayed.torn > 0 {
            tracing::warn!(
                lines = replayed.torn,
                "{}: dropped unreadable lines at its end (a write cut short)",
                path.display()
            );
        }
        self.file = FileGroups {
            cpus: replayed.groups,
            pinned: replayed.pinned,
        };
        let containers: Records = replayed.records.into_iter().collect();
        let mut doc = StateDoc {
            version: STATE_VERSION,
            containers,
        };
        doc.containers.clear_dirty();
        self.lines = replayed.lines;
        // A torn tail must not have the next line glued to it; a layout 2 log gets no
        // layout 3 lines.
        self.rewrite = replayed.torn > 0 || replayed.old_layout;
        if self.writable && !self.rewrite {
            match dir.open_append(STATE_FILE) {
                Ok(Some(f)) => self.log = Some(f),
                _ => self.rewrite = true,
            }
        }
        if self.writable && self.rewrite {
            if let Err(e) = self.compact(&doc.containers) {
                // Not fatal: the records are loaded, the rewrite is tried again later.
                tracing::error!("cannot rewrite {}: {e}", path.display());
                self.failed(&e, false);
            }
        }
        Loaded::Doc(doc)
    }

    fn load_legacy(&mut self) -> Loaded {
        let path = self.dir_path.join(LEGACY_FILE);
        let Some(dir) = self.dir.as_ref() else {
            return Loaded::Fresh;
        };
        let bytes = match dir.read(LEGACY_FILE) {
            Ok(Some(b)) => b,
            Ok(None) => return Loaded::Fresh,
            Err(e) => return self.corrupt(LEGACY_FILE, e.to_string()),
        };
        let mut doc = match serde_json::from_slice::<StateDoc>(&bytes) {
            Ok(doc) if doc.version == STATE_VERSION => doc,
            Ok(doc) => {
                let why = format!(
                    "{} has version {}, this build reads {STATE_VERSION}",
                    path.display(),
                    doc.version
                );
                return self.corrupt(LEGACY_FILE, why);
            }
            Err(e) => {
                let why = format!("{} is not valid state: {e}", path.display());
                return self.corrupt(LEGACY_FILE, why);
            }
        };
        doc.containers.clear_dirty();
        if self.writable {
            match self.compact(&doc.containers) {
                Ok(()) => {
                    if let Some(dir) = &self.dir {
                        let _ = dir.rename(LEGACY_FILE, MIGRATED_FILE);
                    }
                    tracing::info!(
                        records = doc.containers.len(),
                        "migrated {} to {} (the old file is kept as {MIGRATED_FILE})",
                        path.display(),
                        self.path().display()
                    );
                }
                Err(e) => {
                    tracing::error!("cannot migrate {}: {e}", path.display());
                    self.failed(&e, false);
                }
            }
        }
        Loaded::Doc(doc)
    }

    /// Reports `name` unusable; a writer sets it aside (`*.corrupt`, see [`set_aside`]) so the
    /// next write starts a new log.
    fn corrupt(&mut self, name: &str, why: String) -> Loaded {
        if let Some(dir) = self.dir.as_ref().filter(|_| self.writable) {
            if let Some(aside) = set_aside(dir, name, "corrupt") {
                tracing::warn!("kept the unusable state as {}", aside.display());
            }
            self.rewrite = true;
        }
        Loaded::Corrupt(why)
    }

    /// Persists what changed in `records` since the last write: one line per changed record
    /// and one per group moved whole, in one append; the whole log is rewritten instead when
    /// it is due for compaction or must be (first write, a failed append).
    ///
    /// After a failure, writes until [`RETRY_AFTER`] has passed only forget what changed
    /// ([`StateError::Deferred`]); the next one rewrites the whole log, so it persists every
    /// change of the outage (a record removed meanwhile included) or fails again.
    pub fn write(&mut self, records: &mut Records) -> Result<(), StateError> {
        let waiting = self
            .outage
            .as_ref()
            .is_some_and(|o| Instant::now() < o.retry_at);
        if waiting {
            let dirty = records.take_dirty();
            let moved = records.take_moved();
            let changed = !dirty.is_empty() || !moved.is_empty();
            if let Some(o) = self.outage.as_mut().filter(|_| changed) {
                o.lost_writes += 1;
                return Err(StateError::Deferred {
                    since: o.since.elapsed(),
                });
            }
            return Ok(());
        }
        // A retry of the daemon's timer comes without changes: it loses nothing.
        let changed = !records.is_clean();
        if self.dir.is_none() && self.writable {
            // The dir could not be created or opened so far: try again; the whole log is
            // written below if it opens (`rewrite` is set).
            match Self::open_dir(&self.dir_path) {
                Ok(dir) => {
                    // nri-align started without reading this dir (EIO...): a log in it holds
                    // decisions never loaded, which the rewrite below would replace with
                    // the records rebuilt meanwhile. Kept aside as evidence instead.
                    for name in [STATE_FILE, LEGACY_FILE] {
                        if dir.names_with_prefix(name).iter().any(|n| n == name) {
                            if let Some(aside) = set_aside(&dir, name, "unloaded") {
                                tracing::warn!(
                                    "the state dir opened late and held a state log nri-align \
                                     never read: kept as {}, the live records are written anew",
                                    aside.display()
                                );
                            }
                        }
                    }
                    self.dir = Some(dir);
                }
                Err(e) => {
                    records.take_dirty();
                    records.take_moved();
                    self.failed(&e, changed);
                    return Err(e);
                }
            }
        }
        match self.write_now(records) {
            Ok(()) => {
                self.recovered = self.outage.take();
                Ok(())
            }
            Err(e) => {
                self.failed(&e, changed);
                Err(e)
            }
        }
    }

    fn write_now(&mut self, records: &mut Records) -> Result<(), StateError> {
        let dirty = records.take_dirty();
        let moved = records.take_moved();
        if dirty.is_empty() && moved.is_empty() && !self.rewrite {
            return Ok(());
        }
        if self.rewrite
            || self.lines + dirty.len() + moved.len() > 2 * records.len() + COMPACT_SLACK
        {
            return self.compact(records);
        }
        // On an error, `write` has the whole log rewritten.
        let lines = self.changes(records, &dirty, moved)?;
        let path = self.path();
        let result = match self.log.as_mut() {
            Some(f) => {
                f.write_all(&self.buf).and_then(
                    |()| {
                        if self.fsync {
                            f.sync_data()
                        } else {
                            Ok(())
                        }
                    },
                )
            }
            None => Err(std::io::ErrorKind::NotFound.into()),
        };
        match result {
            Ok(()) => {
                self.lines += lines;
                Ok(())
            }
            Err(source) => {
                // Part of the lines may be in the file (a short write on a full disk): the
                // whole rewrite `write` sets up replaces it, and until then a restart drops
                // that torn tail.
                Err(StateError::Io {
                    op: "append to",
                    path,
                    source,
                })
            }
        }
    }

    /// The lines of one append into `self.buf`: the groups first (a record written after
    /// them may then follow its group's new line), then the changed records.
    fn changes(
        &mut self,
        records: &Records,
        dirty: &BTreeSet<String>,
        moved: HashSet<GroupKey>,
    ) -> Result<usize, StateError> {
        self.buf.clear();
        let mut lines = 0;
        let mut keys = moved;
        keys.extend(dirty.iter().filter_map(|id| records.get(id)?.group_key()));
        for key in &keys {
            lines += self.file.write_group(&mut self.buf, key, records, dirty)?;
        }
        for id in dirty {
            lines += self.file.write_record(&mut self.buf, id, records.get(id))?;
        }
        Ok(lines)
    }

    /// Writes `doc` as the whole state (tests, tools).
    pub fn save(&mut self, doc: &StateDoc) -> Result<(), StateError> {
        self.compact(&doc.containers)
    }

    /// Rewrites the log as one line per record: a new file under a name nobody can guess,
    /// renamed over the log, then reopened to append.
    fn compact(&mut self, records: &Records) -> Result<(), StateError> {
        if !self.writable {
            return Ok(());
        }
        // The file first: on a read-only filesystem (or one out of inodes) the retry fails
        // here, before every record is serialised.
        let (mut f, tmp) = self.opened()?.create_temp(TEMP_PREFIX)?;
        let (file, lines) = match self.serialise(records) {
            Ok(done) => done,
            Err(e) => {
                let _ = self.opened()?.remove(&tmp);
                return Err(e);
            }
        };
        let dir = self.opened()?;
        let written =
            f.write_all(&self.buf)
                .and_then(|()| if self.fsync { f.sync_data() } else { Ok(()) });
        if let Err(source) = written {
            let _ = dir.remove(&tmp);
            return Err(StateError::Io {
                op: "write",
                path: dir.join(&tmp),
                source,
            });
        }
        drop(f);
        if let Err(e) = dir.rename(&tmp, STATE_FILE) {
            let _ = dir.remove(&tmp);
            return Err(e.into());
        }
        if self.fsync {
            dir.sync()?;
        }
        self.log = dir.open_append(STATE_FILE)?;
        self.lines = lines;
        self.file = file;
        self.rewrite = self.log.is_none();
        Ok(())
    }

    /// The whole log for `records` into `self.buf`: what the log will say of the groups, and
    /// its number of change lines.
    fn serialise(&mut self, records: &Records) -> Result<(FileGroups, usize), StateError> {
        self.buf.clear();
        journal::header(&mut self.buf);
        let mut file = FileGroups::default();
        let mut lines = 0;
        for (key, g) in records.groups() {
            if let Some(cpus) = g.aligned_to() {
                journal::group(&mut self.buf, key, cpus).map_err(StateError::Encode)?;
                file.cpus.insert(key.clone(), cpus.clone());
                lines += 1;
            }
        }
        for (id, rec) in records {
            lines += file.write_record(&mut self.buf, id, Some(rec))?;
        }
        Ok((file, lines))
    }

    /// Lines in the log (records and changes since the last compaction), for tests.
    pub fn lines(&self) -> usize {
        self.lines
    }
}

/// Renames `name` in `dir` to `name.SUFFIX`, earlier copies moving down one (`.SUFFIX` to
/// `.SUFFIX.1`...), the oldest of [`CORRUPT_KEPT`] dropping out: a second rollback or crash
/// keeps the first one's evidence, and the disk used stays bounded. Where it went, if moved.
fn set_aside(dir: &OwnedDir, name: &str, suffix: &str) -> Option<PathBuf> {
    let aside = format!("{name}.{suffix}");
    for k in (1..CORRUPT_KEPT).rev() {
        let older = if k == 1 {
            aside.clone()
        } else {
            format!("{aside}.{}", k - 1)
        };
        // A missing copy is the usual case: nothing to move.
        let _ = dir.rename(&older, &format!("{aside}.{k}"));
    }
    dir.rename(name, &aside).is_ok().then(|| dir.join(&aside))
}
