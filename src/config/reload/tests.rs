//! The reloader on real files: a directory laid out the way the kubelet's atomic writer lays
//! out a ConfigMap volume, swapped the way it swaps it; editors' saves; SIGHUP; a FIFO.
//!
//! Unit tests run in parallel in one process, so a SIGHUP raised by one test reaches every
//! reloader: the watch tests only look at outcomes of their own triggers, and a test that
//! raises one waits until no [`Running`] reloader is up ([`NO_SIGHUP`]), since a SIGHUP that
//! reloads another test's file just after it changed leaves that change's own trigger nothing
//! to report.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::*;
use crate::placement::Policy;

const WITHIN: Duration = Duration::from_secs(10);

/// Held shared by every [`Running`] reloader, and exclusively by a test raising SIGHUP.
static NO_SIGHUP: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A ConfigMap volume: `..2026_..._N/config.yaml`, `..data -> ..2026_..._N`,
/// `config.yaml -> ..data/config.yaml`.
struct ConfigMapVolume {
    dir: tempfile::TempDir,
    generation: usize,
}

impl ConfigMapVolume {
    fn new(text: &str) -> Self {
        let dir = tempfile::tempdir().expect("tmp");
        let mut v = ConfigMapVolume { dir, generation: 0 };
        let first = v.write_generation(text);
        symlink(&first, v.dir.path().join("..data")).expect("..data");
        symlink("..data/config.yaml", v.path()).expect("key link");
        v
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("config.yaml")
    }

    fn write_generation(&mut self, text: &str) -> String {
        self.generation += 1;
        let name = format!("..2026_01_01_00_00_{:02}.000000001", self.generation);
        let d = self.dir.path().join(&name);
        std::fs::create_dir(&d).expect("mkdir");
        std::fs::write(d.join("config.yaml"), text).expect("write");
        std::fs::set_permissions(
            d.join("config.yaml"),
            std::fs::Permissions::from_mode(0o644),
        )
        .expect("chmod");
        name
    }

    /// The kubelet's update: the new generation, a `..data_tmp` link to it renamed over
    /// `..data` (atomic), the old generation removed.
    fn swap(&mut self, text: &str) {
        let old = std::fs::read_link(self.dir.path().join("..data")).expect("..data");
        let new = self.write_generation(text);
        let tmp = self.dir.path().join("..data_tmp");
        symlink(&new, &tmp).expect("tmp link");
        std::fs::rename(&tmp, self.dir.path().join("..data")).expect("swap");
        std::fs::remove_dir_all(self.dir.path().join(old)).expect("remove old");
    }
}

struct Running {
    policy: Arc<Mutex<Option<Policy>>>,
    outcomes: mpsc::UnboundedReceiver<Outcome>,
    task: tokio::task::JoinHandle<()>,
    _no_sighup: Option<tokio::sync::RwLockReadGuard<'static, ()>>,
}

impl Running {
    /// Starts a reloader on `path` holding `initial` and waits for its first check (the poll
    /// at start), so that what a test changes afterwards is seen by the trigger it tests.
    async fn start(path: PathBuf, initial: &[u8], opts: ReloadOptions) -> Self {
        let guard = NO_SIGHUP.read().await;
        Self::start_guarded(path, initial, opts, Some(guard)).await
    }

    /// [`Running::start`] for a test that holds [`NO_SIGHUP`] itself (`guard` `None`).
    async fn start_guarded(
        path: PathBuf,
        initial: &[u8],
        opts: ReloadOptions,
        guard: Option<tokio::sync::RwLockReadGuard<'static, ()>>,
    ) -> Self {
        let policy = Arc::new(Mutex::new(None));
        let (tx, outcomes) = mpsc::unbounded_channel();
        let p = policy.clone();
        let task = spawn_reloader(
            path,
            content_hash(initial),
            opts,
            move |cfg: Config| {
                // What validation against the host refuses, `apply` refuses too.
                if cfg.exempt_namespaces.iter().any(|n| n == "refuse-me") {
                    return Err("refused by apply".into());
                }
                *p.lock().expect("lock") = Some(cfg.placement.policy);
                Ok(())
            },
            move |o: &Outcome| {
                let _ = tx.send(o.clone());
            },
        )
        .expect("reloader");
        let mut r = Running {
            policy,
            outcomes,
            task,
            _no_sighup: guard,
        };
        loop {
            let o = tokio::time::timeout(WITHIN, r.outcomes.recv())
                .await
                .expect("the first check in time")
                .expect("reloader alive");
            match o {
                Outcome::Unchanged => break r,
                // Another test's SIGHUP.
                Outcome::Applied(Trigger::Signal) | Outcome::Rejected(Trigger::Signal, _) => {}
                other => panic!("first check: {other:?}"),
            }
        }
    }

    /// The next outcome that is not `Unchanged` and not caused by another test's SIGHUP.
    async fn next(&mut self) -> Outcome {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let o = tokio::time::timeout_at(deadline, self.outcomes.recv())
                .await
                .expect("an outcome in time")
                .expect("reloader alive");
            match &o {
                Outcome::Unchanged
                | Outcome::Applied(Trigger::Signal)
                | Outcome::Rejected(Trigger::Signal, _) => continue,
                _ => return o,
            }
        }
    }

    /// No outcome but `Unchanged` (or another test's SIGHUP) for `d`.
    async fn quiet_for(&mut self, d: Duration) {
        let deadline = tokio::time::Instant::now() + d;
        while let Ok(Some(o)) = tokio::time::timeout_at(deadline, self.outcomes.recv()).await {
            assert!(
                matches!(
                    o,
                    Outcome::Unchanged
                        | Outcome::Applied(Trigger::Signal)
                        | Outcome::Rejected(Trigger::Signal, _)
                ),
                "unexpected {o:?}"
            );
        }
    }

    fn policy(&self) -> Option<Policy> {
        *self.policy.lock().expect("lock")
    }
}

/// A configuration file `name` holding `text`, mode 0644 (the reader refuses files others may
/// change), in a directory of its own that lives as long as the returned guard.
fn config_file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    (dir, path)
}

fn fast() -> ReloadOptions {
    ReloadOptions {
        debounce: Duration::from_millis(50),
        // Long: these tests must see the watch work, not the poll.
        poll_every: Duration::from_secs(3600),
        read_timeout: Duration::from_secs(5),
        watch: true,
    }
}

#[tokio::test]
async fn a_swapped_configmap_is_reloaded_and_a_bad_one_keeps_the_old_config() {
    let v1 = "policy: none\n";
    let mut vol = ConfigMapVolume::new(v1);
    let mut r = Running::start(vol.path(), v1.as_bytes(), fast()).await;

    vol.swap("policy: restricted\n");
    assert_eq!(r.next().await, Outcome::Applied(Trigger::FileChanged));
    assert_eq!(r.policy(), Some(Policy::Restricted));

    // A bad version: refused once, with the reason, and the running config stays.
    vol.swap("policy: sometimes\n");
    match r.next().await {
        Outcome::Rejected(Trigger::FileChanged, why) => {
            assert!(why.contains("sometimes"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.policy(), Some(Policy::Restricted));
    // Nested aliases (10^9 strings from a few hundred bytes): refused before they expand.
    let mut bomb = format!("policy: &l0 [{}]\n", ["\"lol\""; 10].join(", "));
    for i in 1..=9 {
        let row = vec![format!("*l{}", i - 1); 10].join(", ");
        bomb.push_str(&format!("x{i}: &l{i} [{row}]\n"));
    }
    vol.swap(&bomb);
    match r.next().await {
        Outcome::Rejected(Trigger::FileChanged, why) => {
            assert!(why.contains("YAML aliases"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.policy(), Some(Policy::Restricted));
    // An event that does not change the file again (a new file beside it) reports nothing.
    std::fs::write(vol.dir.path().join("unrelated"), "x").expect("write");
    r.quiet_for(Duration::from_millis(500)).await;

    // Back to the version in force, then a valid new one.
    vol.swap("policy: restricted\n");
    assert_eq!(r.next().await, Outcome::BackToApplied);
    vol.swap("policy: single-numa-node\n");
    assert_eq!(r.next().await, Outcome::Applied(Trigger::FileChanged));
    assert_eq!(r.policy(), Some(Policy::SingleNumaNode));

    // A version that parses but that applying refuses (validation against the host) keeps the
    // old config too.
    vol.swap("policy: none\nexempt_namespaces: [refuse-me]\n");
    assert!(matches!(
        r.next().await,
        Outcome::Rejected(Trigger::FileChanged, why) if why == "refused by apply"
    ));
    assert_eq!(r.policy(), Some(Policy::SingleNumaNode));
    r.task.abort();
}

#[tokio::test]
async fn editors_saves_in_place_and_by_rename_are_reloaded() {
    let (dir, path) = config_file("nri-align.yaml", "policy: none\n");
    let mut r = Running::start(path.clone(), b"policy: none\n", fast()).await;

    // In place (truncate and write: IN_CLOSE_WRITE).
    std::fs::write(&path, "policy: restricted\n").expect("write");
    assert_eq!(r.next().await, Outcome::Applied(Trigger::FileChanged));
    assert_eq!(r.policy(), Some(Policy::Restricted));

    // Write a temporary file, rename it over (vim, sed -i).
    let tmp = dir.path().join(".nri-align.yaml.swp");
    std::fs::write(&tmp, "policy: best-effort\n").expect("write");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::rename(&tmp, &path).expect("rename");
    assert_eq!(r.next().await, Outcome::Applied(Trigger::FileChanged));
    assert_eq!(r.policy(), Some(Policy::BestEffort));

    // Delete and re-create: the moment without a file is one refusal at most, then applied.
    std::fs::remove_file(&path).expect("rm");
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::write(&path, "policy: single-numa-node\n").expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut o = r.next().await;
    if let Outcome::Rejected(_, why) = &o {
        assert!(why.contains("No such file"), "{why}");
        o = r.next().await;
    }
    assert_eq!(o, Outcome::Applied(Trigger::FileChanged));
    assert_eq!(r.policy(), Some(Policy::SingleNumaNode));
    r.task.abort();
}

#[tokio::test]
async fn without_a_watch_the_poll_notices_a_change() {
    let (_dir, path) = config_file("c.yaml", "policy: none\n");
    let opts = ReloadOptions {
        watch: false,
        poll_every: Duration::from_millis(100),
        ..fast()
    };
    let mut r = Running::start(path.clone(), b"policy: none\n", opts).await;
    r.quiet_for(Duration::from_millis(300)).await;
    std::fs::write(&path, "policy: restricted\n").expect("write");
    assert_eq!(r.next().await, Outcome::Applied(Trigger::Poll));
    assert_eq!(r.policy(), Some(Policy::Restricted));
    r.task.abort();
}

#[tokio::test]
async fn a_poll_never_applies_a_file_caught_in_the_middle_of_a_write() {
    let (_dir, path) = config_file("c.yaml", "policy: none\n");
    // Polls far more often than the write below takes, so one lands on the truncated file.
    let opts = ReloadOptions {
        watch: false,
        poll_every: Duration::from_millis(5),
        debounce: Duration::from_millis(200),
        ..fast()
    };
    let mut r = Running::start(path.clone(), b"policy: none\n", opts).await;
    r.quiet_for(Duration::from_millis(100)).await;
    // What `>` or an editor does: truncate (an empty file is every default), then write.
    std::fs::write(&path, "").expect("truncate");
    tokio::time::sleep(Duration::from_millis(20)).await;
    std::fs::write(&path, "policy: restricted\n").expect("write");
    assert_eq!(r.next().await, Outcome::Applied(Trigger::Poll));
    assert_eq!(
        r.policy(),
        Some(Policy::Restricted),
        "the empty file was applied"
    );
    r.task.abort();
}

#[tokio::test]
async fn a_fifo_in_place_of_the_file_is_refused_without_blocking() {
    let t = tempfile::tempdir().expect("tmp");
    let path = t.path().join("c.yaml");
    std::fs::write(&path, "policy: none\n").expect("write");
    let mut r = Running::start(path.clone(), b"policy: none\n", fast()).await;
    std::fs::remove_file(&path).expect("rm");
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
    // Events of the removal and the FIFO's creation may be reported separately; the FIFO is
    // refused for what it is.
    loop {
        match r.next().await {
            Outcome::Rejected(Trigger::FileChanged, why) if why.contains("a FIFO") => break,
            Outcome::Rejected(Trigger::FileChanged, why) if why.contains("No such file") => {}
            other => panic!("{other:?}"),
        }
    }
    // The reloader still works: a regular file again is applied.
    std::fs::remove_file(&path).expect("rm fifo");
    std::fs::write(&path, "policy: restricted\n").expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let o = loop {
        match r.next().await {
            Outcome::Rejected(_, why) if why.contains("No such file") => continue,
            o => break o,
        }
    };
    assert_eq!(o, Outcome::Applied(Trigger::FileChanged));
    r.task.abort();
}

#[tokio::test]
async fn sighup_reloads_even_an_unchanged_file_and_reports_a_bad_one_every_time() {
    let (_dir, path) = config_file("c.yaml", "policy: restricted\n");
    let opts = ReloadOptions {
        watch: false,
        ..fast()
    };
    let _only_reloader = NO_SIGHUP.write().await;
    let (policy, mut outcomes, task) = {
        let r = Running::start_guarded(path.clone(), b"policy: restricted\n", opts, None).await;
        (r.policy, r.outcomes, r.task)
    };
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGHUP).expect("raise");
    assert_eq!(
        next_signal(&mut outcomes).await,
        Outcome::Applied(Trigger::Signal)
    );
    assert_eq!(*policy.lock().expect("lock"), Some(Policy::Restricted));
    std::fs::write(&path, "policy: sometimes\n").expect("write");
    for _ in 0..2 {
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGHUP).expect("raise");
        assert!(matches!(
            next_signal(&mut outcomes).await,
            Outcome::Rejected(Trigger::Signal, why) if why.contains("sometimes")
        ));
    }
    assert_eq!(*policy.lock().expect("lock"), Some(Policy::Restricted));
    task.abort();
}

/// The next outcome of a SIGHUP (the poll's outcomes in between are skipped).
async fn next_signal(outcomes: &mut mpsc::UnboundedReceiver<Outcome>) -> Outcome {
    loop {
        let o = tokio::time::timeout(WITHIN, outcomes.recv())
            .await
            .expect("in time")
            .expect("alive");
        if matches!(
            o,
            Outcome::Applied(Trigger::Signal) | Outcome::Rejected(Trigger::Signal, _)
        ) {
            return o;
        }
    }
}

/// Waits until the last section applied is `key` (by a change of the directory, or by another
/// test's SIGHUP, which also reads the labels again), draining the outcomes meanwhile.
async fn applied_key(
    outcomes: &mut mpsc::UnboundedReceiver<Outcome>,
    seen: &Mutex<Vec<(String, Policy)>>,
    key: &str,
) -> Policy {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        if let Some((k, p)) = seen.lock().expect("lock").last() {
            if k == key {
                return *p;
            }
        }
        let o = tokio::time::timeout_at(deadline, outcomes.recv()).await;
        let o = o.unwrap_or_else(|_| panic!("{key} not applied in time: {seen:?}"));
        assert!(!matches!(o, Some(Outcome::Rejected(..)) | None), "{o:?}");
    }
}

/// A fleet's section directory: a node relabelled into a group takes its group's section at
/// the next change of the directory (its labels are read again then; `relabel` stands for the
/// read of its Node), and a `node.` section added later wins over the group's.
#[tokio::test]
async fn a_section_directory_is_chosen_again_at_each_change() {
    let t = tempfile::tempdir().expect("tmp");
    let write = |name: &str, text: &str| {
        let p = t.path().join(name);
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    };
    write("default", "policy: none\n");
    write("group.gpu", "policy: restricted\n");
    let who = super::Identity {
        node: Some("w1".into()),
        group: None,
    };
    let start = crate::config::select::select_in_dir(t.path(), &who)
        .expect("read")
        .expect("default");
    let group: Arc<Mutex<Option<String>>> = Arc::default();
    let g = group.clone();
    let relabel: super::Relabel = Arc::new(move || {
        let now = g.lock().expect("lock").clone();
        Box::pin(async move { Ok(now) })
    });
    let seen: Arc<Mutex<Vec<(String, Policy)>>> = Arc::default();
    let s = seen.clone();
    let (tx, mut outcomes) = mpsc::unbounded_channel();
    let task = spawn_section_reloader(
        t.path().to_path_buf(),
        (who, Some(relabel)),
        (section_hash(Some(&start)), None),
        fast(),
        move |l: super::Loaded| {
            let key = l.section.map_or_else(|| "(none)".to_string(), |s| s.key);
            s.lock()
                .expect("lock")
                .push((key, l.config.placement.policy));
            Ok(())
        },
        move |o: &Outcome| {
            let _ = tx.send(o.clone());
        },
    )
    .expect("reloader");
    // The first check (the poll at start) before anything changes, as `Running::start` does.
    loop {
        match tokio::time::timeout(WITHIN, outcomes.recv()).await {
            Ok(Some(Outcome::Unchanged)) => break,
            Ok(Some(Outcome::Applied(Trigger::Signal))) => {}
            other => panic!("first check: {other:?}"),
        }
    }
    // Relabelled into group gpu; the next change of the directory reads the label again.
    *group.lock().expect("lock") = Some("gpu".into());
    write("unrelated", "x");
    let policy = applied_key(&mut outcomes, &seen, "group.gpu").await;
    assert_eq!(policy, Policy::Restricted);
    // A section of its own then wins over the group's.
    write("node.w1", "policy: single-numa-node\n");
    let policy = applied_key(&mut outcomes, &seen, "node.w1").await;
    assert_eq!(policy, Policy::SingleNumaNode);
    task.abort();
}
