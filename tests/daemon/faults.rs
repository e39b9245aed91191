//! The daemon recovers on its own from faults that used to wedge it, proven through
//! the `nri-align run` binary with no runtime to connect to (it keeps retrying, so it is alive
//! and not ready, which is also what `/readyz` must say):
//! - out of file descriptors (RLIMIT_NOFILE lowered for the daemon alone), the metrics
//!   listener pauses between failed accepts instead of spinning a core, and serves again once
//!   descriptors are free;
//! - clients holding many connections open take at most the connection cap of descriptors,
//!   and are cut off by the request time limit;
//! - a FIFO in place of the configuration file is refused at once on SIGHUP and by the file
//!   watch, and SIGTERM still ends the daemon;
//! - a state dir whose filesystem is full, or read-only after an ext4 error, at start: the
//!   daemon starts with the records it reads, says so once and in its metrics, and once the
//!   filesystem is writable again its next start rewrites the log (root only: real mounts);
//! - a state dir that cannot even be created (its parent read-only) at start: the daemon
//!   starts, registers and admits with its decisions in memory, says so once and in its
//!   metrics, and creates the dir and writes every record once it can, without an event.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use test_support::e2e::{
    log_events, metric, nri_align_bin, probe, scrape, wait_probe, wait_until, write_private,
    PluginProcess,
};
use test_support::testfs::Mounted;

/// `nri-align run` on this host with a config serving metrics on a free loopback port, dialing
/// a socket nobody listens on; `prefix` runs before it (e.g. `prlimit ...`).
struct Daemon {
    process: PluginProcess,
    addr: String,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start(prefix: &[&str]) -> Daemon {
        Self::start_on(prefix, None)
    }

    /// [`Daemon::start`] with `state` as its state dir (else one in its own temp dir).
    fn start_on(prefix: &[&str], state: Option<&Path>) -> Daemon {
        let dir = tempfile::tempdir().expect("tmp");
        let config = dir.path().join("nri-align.yaml");
        write_private(&config, "metrics_address: \"127.0.0.1:0\"\n").expect("config");
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(nri_align_bin());
                c
            }
            None => Command::new(nri_align_bin()),
        };
        cmd.arg("run")
            .arg("--socket")
            .arg(dir.path().join("no-runtime.sock"))
            .arg("--state-dir")
            .arg(state.map_or_else(|| dir.path().join("state"), Path::to_path_buf))
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info");
        let process =
            PluginProcess::spawn_logged(cmd, dir.path().join("nri-align.log")).expect("start");
        let addr = process.metrics_address().expect("metrics address");
        Daemon {
            process,
            addr,
            config,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.process.pid()
    }

    fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// CPU time (user + system) the daemon used so far, in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).expect("stat");
        // Fields after the command name (which may contain spaces): state is field 3, utime 14.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
    }

    fn log_count(&self, message: &str) -> usize {
        log_events(&self.process.output(), message).len()
    }
}

fn clock_ticks_per_second() -> u64 {
    let out = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("getconf");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("CLK_TCK")
}

/// Opens `per_source` idle connections to `addr` from each of `sources` (loopback addresses).
fn hold_connections(
    rt: &tokio::runtime::Runtime,
    addr: &str,
    sources: &[String],
    per_source: usize,
) -> Vec<tokio::net::TcpStream> {
    let addr: SocketAddr = addr.parse().expect("addr");
    rt.block_on(async {
        let mut held = Vec::new();
        for src in sources {
            for _ in 0..per_source {
                let sock = tokio::net::TcpSocket::new_v4().expect("socket");
                sock.bind(format!("{src}:0").parse().expect("source"))
                    .expect("bind");
                held.push(sock.connect(addr).await.expect("connect"));
            }
        }
        held
    })
}

/// How many of `held` the server has closed (a read gives end of file or an error).
fn closed(rt: &tokio::runtime::Runtime, held: &mut [tokio::net::TcpStream]) -> usize {
    use tokio::io::AsyncReadExt;
    rt.block_on(async {
        let mut n = 0;
        for c in held.iter_mut() {
            let mut b = [0u8; 1];
            if matches!(
                tokio::time::timeout(Duration::from_millis(20), c.read(&mut b)).await,
                Ok(Ok(0)) | Ok(Err(_))
            ) {
                n += 1;
            }
        }
        n
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio")
}

#[test]
fn without_a_runtime_it_is_alive_not_ready_says_why_and_ready_once_nri_is_clearly_off() {
    let d = Daemon::start(&[]);
    let (code, body) = wait_probe(&d.addr, "/healthz", 200, Duration::from_secs(10));
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    let (code, body) = probe(&d.addr, "/readyz").expect("readyz");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.starts_with("not ready: nri: socket missing: ") && body.contains("no-runtime.sock"),
        "{body}"
    );
    let m = scrape(&d.addr).expect("metrics");
    assert_eq!(metric(&m, "nri_align_runtime_connected"), Some(0.0), "{m}");
    assert_eq!(
        metric(&m, "nri_align_runtime_connections_total"),
        Some(0.0),
        "{m}"
    );
    assert!(
        m.lines()
            .any(|l| l.starts_with("nri_align_build_info{version=\"")
                && l.contains(&format!("revision=\"{}\"", env!("NRI_ALIGN_GIT_REVISION")))),
        "{m}"
    );
    // Still no socket after the grace period: NRI is off here, and the DaemonSet's rollout
    // must not wait for this node. Ready, degraded with the socket's path; the connection
    // gauge still 0 for alerts.
    let (code, body) = wait_probe(&d.addr, "/readyz", 200, Duration::from_secs(45));
    assert_eq!(code, 200, "{body}");
    assert!(
        body.starts_with("ready: NRI is off on this node")
            && body
                .lines()
                .any(|l| l.starts_with("degraded: nri: socket missing: ")
                    && l.contains("no-runtime.sock")),
        "{body}"
    );
    let m = scrape(&d.addr).expect("metrics");
    assert_eq!(metric(&m, "nri_align_runtime_connected"), Some(0.0), "{m}");
}

#[test]
fn out_of_file_descriptors_the_listener_pauses_instead_of_spinning_and_recovers() {
    // 48 descriptors: enough to start, then a few dozen connections exhaust them.
    let d = Daemon::start(&["prlimit", "--nofile=48:48", "--"]);
    assert_eq!(
        wait_probe(&d.addr, "/healthz", 200, Duration::from_secs(10)).0,
        200
    );
    let rt = runtime();
    let sources: Vec<String> = (2..6).map(|i| format!("127.0.0.{i}")).collect();
    let held = hold_connections(&rt, &d.addr, &sources, 15);
    assert!(
        d.process.wait_for_output(
            "metrics listener cannot accept connections",
            Duration::from_secs(10)
        ),
        "no accept failure logged:\n{}",
        d.process.output()
    );
    let failure = &log_events(
        &d.process.output(),
        "metrics listener cannot accept connections; pausing",
    )[0];
    assert!(
        failure["error"].contains("Too many open files"),
        "{failure:?}"
    );
    // Out of descriptors, it must not spin: a core's worth would be ~1 tick per tick.
    let hz = clock_ticks_per_second();
    let before = d.cpu_ticks();
    std::thread::sleep(Duration::from_secs(2));
    let used = d.cpu_ticks() - before;
    assert!(
        used * 4 < 2 * hz,
        "the daemon used {used} ticks of CPU in 2 s ({hz}/s) while out of descriptors"
    );
    // The clients go away: the listener accepts again and the daemon is healthy.
    drop(held);
    assert!(
        d.process.wait_for_output(
            "metrics listener accepts connections again",
            Duration::from_secs(15)
        ),
        "{}",
        d.process.output()
    );
    let (code, body) = wait_probe(&d.addr, "/healthz", 200, Duration::from_secs(10));
    assert_eq!(code, 200, "{body}");
}

#[test]
fn clients_holding_connections_take_at_most_the_cap_and_are_cut_off() {
    let d = Daemon::start(&[]);
    assert_eq!(
        wait_probe(&d.addr, "/healthz", 200, Duration::from_secs(10)).0,
        200
    );
    let baseline = d.open_fds();
    let rt = runtime();
    // 10 addresses x 20 connections, none sending a byte (slowloris).
    let sources: Vec<String> = (10..20).map(|i| format!("127.0.0.{i}")).collect();
    let mut held = hold_connections(&rt, &d.addr, &sources, 20);
    std::thread::sleep(Duration::from_millis(500));
    let during = d.open_fds();
    // The cap (64) plus slack for descriptors the daemon opens meanwhile (a reconnection try).
    assert!(
        during <= baseline + 64 + 4,
        "{during} descriptors open while 200 connections are held ({baseline} before)"
    );
    // Past the per-address cap connections are closed at once; the rest by the time limit.
    assert!(wait_until(Duration::from_secs(20), || closed(
        &rt, &mut held
    ) == held.len()));
    let (code, _) = wait_probe(&d.addr, "/healthz", 200, Duration::from_secs(10));
    assert_eq!(code, 200);
    assert!(wait_until(Duration::from_secs(10), || d.open_fds() <= baseline + 2));
}

fn replace_with_fifo(path: &Path) {
    std::fs::remove_file(path).expect("rm config");
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
}

#[test]
fn a_fifo_in_place_of_the_config_is_refused_and_sigterm_still_stops_the_daemon() {
    let mut d = Daemon::start(&[]);
    assert_eq!(
        wait_probe(&d.addr, "/healthz", 200, Duration::from_secs(10)).0,
        200
    );
    // The file watch sees the swap and refuses the FIFO without opening it for a writer.
    replace_with_fifo(&d.config);
    assert!(
        wait_until(Duration::from_secs(10), || d.log_count(
            "configuration not reloaded, keeping the previous one: cannot read config"
        ) >= 1),
        "{}",
        d.process.output()
    );
    // SIGHUP: the same refusal, at once, every time.
    d.process.signal(nix::sys::signal::Signal::SIGHUP);
    assert!(
        wait_until(Duration::from_secs(10), || d.log_count(
            "configuration not reloaded, keeping the previous one: cannot read config"
        ) >= 2),
        "{}",
        d.process.output()
    );
    let out = d.process.output();
    assert!(out.contains("it is a FIFO, not a regular file"), "{out}");
    // The event loop is fine and the metrics say the file is refused.
    assert_eq!(probe(&d.addr, "/healthz").expect("healthz").0, 200);
    let m = scrape(&d.addr).expect("metrics");
    assert_eq!(
        metric(&m, "nri_align_config_last_reload_successful"),
        Some(0.0),
        "{m}"
    );
    assert!(
        metric(&m, "nri_align_config_reloads_total{outcome=\"rejected\"}")
            .is_some_and(|n| n >= 2.0),
        "{m}"
    );
    // SIGTERM ends it promptly and cleanly.
    d.process.signal(nix::sys::signal::Signal::SIGTERM);
    let mut status = None;
    assert!(
        wait_until(Duration::from_secs(10), || {
            status = d.process.exited();
            status.is_some()
        }),
        "still running 10 s after SIGTERM:\n{}",
        d.process.output()
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        d.process.output()
    );
}

/// A state log under `state` holding three containers (none visible on this host: the daemon
/// keeps them, it never releases on a guess), its last line torn when `torn`.
fn write_records(state: &Path, torn: bool) {
    use nri_align::enforce::state::{Record, Records, StateStore};
    let mut store = StateStore::open(state).expect("state dir");
    store.load();
    let mut records = Records::new();
    for i in 0..3 {
        let mut r = Record::default();
        r.assignment.container_id = format!("gone-{i}");
        r.cgroups_path = format!("/nri-align-test-gone/gone-{i}");
        records.insert(format!("gone-{i}"), r);
    }
    store.write(&mut records).expect("write the log");
    drop(store);
    if torn {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(state.join("state.log"))
            .expect("log");
        f.write_all(b"0123456789abcdef {\"put\":\"cut-sh")
            .expect("torn tail");
    }
}

/// The daemon on `state`, which cannot be written: alive with the records it read, the
/// failure said once and in the metrics.
fn starts_on_unwritable_state(state: &Path, error: &str) {
    let mut d = Daemon::start_on(&[], Some(state));
    let (code, body) = wait_probe(&d.addr, "/healthz", 200, Duration::from_secs(10));
    assert_eq!(code, 200, "{body}\n{}", d.process.output());
    assert!(
        wait_until(Duration::from_secs(10), || {
            scrape(&d.addr)
                .map(|m| metric(&m, "nri_align_state_write_failing") == Some(1.0))
                .unwrap_or(false)
        }),
        "{}",
        d.process.output()
    );
    // Still up a moment later (no crash loop), with its records, and said why once.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(d.process.exited().is_none(), "{}", d.process.output());
    let out = d.process.output();
    let restored = log_events(&out, "previous decisions restored");
    assert_eq!(restored.len(), 1, "{out}");
    assert_eq!(restored[0]["restored"], "3", "{out}");
    let said: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("cannot rewrite") || l.contains("decision not persisted"))
        .collect();
    assert_eq!(said.len(), 1, "{out}");
    assert!(said[0].contains(error), "{out}");
    d.process.stop(nix::sys::signal::Signal::SIGTERM);
    let names: Vec<String> = std::fs::read_dir(state)
        .expect("ls")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    assert_eq!(names, vec!["state.log".to_string()], "no temp file left");
}

/// The next start, the filesystem writable again: the same records, the log whole.
fn restarts_and_rewrites(state: &Path) {
    use nri_align::enforce::state::{Loaded, StateStore};
    let mut d = Daemon::start_on(&[], Some(state));
    assert_eq!(
        wait_probe(&d.addr, "/healthz", 200, Duration::from_secs(10)).0,
        200
    );
    assert!(d
        .process
        .wait_for_output("previous decisions restored", Duration::from_secs(10)));
    d.process.stop(nix::sys::signal::Signal::SIGTERM);
    let out = d.process.output();
    assert!(
        !out.contains("cannot rewrite") && !out.contains("not persisted"),
        "{out}"
    );
    match StateStore::open_read_only(state).expect("reader").load() {
        Loaded::Doc(doc) => assert_eq!(doc.containers.len(), 3, "{:?}", doc.containers),
        other => panic!("{other:?}"),
    }
    let log = std::fs::read(state.join("state.log")).expect("log");
    assert!(log.ends_with(b"\n"), "a torn tail is rewritten away");
}

#[test]
fn a_full_state_disk_at_start_does_not_stop_the_daemon_and_is_said_once() {
    let Some(fs) = Mounted::tmpfs("daemon_faults::full_state_disk", 256) else {
        return;
    };
    let state = fs.root.join("state");
    write_records(&state, true);
    fs.fill();
    starts_on_unwritable_state(&state, "No space left on device");
    fs.free();
    restarts_and_rewrites(&state);
}

#[test]
fn a_state_dir_read_only_after_an_ext4_error_at_start_does_not_stop_the_daemon() {
    let Some(mut fs) = Mounted::ext4("daemon_faults::read_only_state", 16) else {
        return;
    };
    let state = fs.root.join("state");
    write_records(&state, false);
    nix::unistd::sync();
    fs.fail_ext4();
    starts_on_unwritable_state(&state, "Read-only file system");
    fs.repair_ext4();
    restarts_and_rewrites(&state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario against a running daemon, step by step: each step checks what the steps before left in its state and its answers"
)]
async fn a_state_dir_that_cannot_be_created_at_start_is_waited_for_and_written_once_it_can() {
    use test_support::daemon::{connect, create, gauge, recorded, start_daemon};
    let Some(fs) = Mounted::tmpfs("daemon_faults::uncreatable_state", 256) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let state = fs.root.join("lib/nri-align");
    fs.set_read_only(true);
    let listener =
        tokio::net::UnixListener::bind(dir.path().join("nri.sock")).expect("runtime socket");
    let mut d = start_daemon(dir.path(), &state);
    let addr = d.metrics_address().expect("metrics address");
    // It registers and admits: before, it exited at start (`state dir ...: create ...`).
    let rt = connect(&listener).await;
    let want: Vec<String> = (0..3).map(|i| format!("mem-{i}")).collect();
    for id in &want {
        create(&rt, id).await;
    }
    assert_eq!(gauge(&addr, "nri_align_state_write_failing"), Some(1.0));
    let out = d.output();
    let said: Vec<&str> = out
        .lines()
        .filter(|l| {
            l.contains("state dir not usable")
                || l.contains("not persisted")
                || l.contains("cannot rewrite")
        })
        .collect();
    assert_eq!(said.len(), 1, "one line for the outage:\n{out}");
    assert!(
        said[0].contains("Read-only file system (os error 30)")
            && said[0].contains(&state.display().to_string()),
        "{out}"
    );
    eprintln!("{}", said[0]);
    assert!(d.exited().is_none() && !state.exists(), "{out}");
    // `/readyz` lists the state as degraded, with the error.
    let (_, body) = probe(&addr, "/readyz").expect("readyz");
    assert!(
        body.lines()
            .any(|l| l.starts_with("degraded: state: writes failing for ")
                && l.contains("Read-only file system")),
        "{body}"
    );

    // Writable, but a file where the dir should be: a failure that waiting does not end,
    // said once at error level and shown by `/readyz` beside the first one.
    // (The retry sleeps a second or more between tries: it does not come between these.)
    fs.set_read_only(false);
    std::fs::create_dir_all(state.parent().expect("parent")).expect("parent");
    std::fs::write(&state, b"not a dir").expect("a file in the dir's place");
    let told = "now for a reason that does not pass by itself";
    assert!(
        wait_until(Duration::from_secs(15), || d.output().contains(told)),
        "{}",
        d.output()
    );
    let (_, body) = probe(&addr, "/readyz").expect("readyz");
    assert!(
        body.lines().any(|l| l.starts_with("degraded: state: ")
            && l.contains(&state.display().to_string())
            && l.contains("(first: ")
            && l.contains("Read-only file system")),
        "{body}"
    );
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(d.output().matches(told).count(), 1, "{}", d.output());
    // Put right, and no event: the dir is created and every record written.
    std::fs::remove_file(&state).expect("the file removed");
    let log = state.join("state.log");
    assert!(
        wait_until(Duration::from_secs(15), || log.exists()
            && recorded(&state) == want),
        "{}",
        d.output()
    );
    assert!(
        wait_until(Duration::from_secs(5), || d
            .output()
            .contains("state persisted again")),
        "{}",
        d.output()
    );
    assert_eq!(gauge(&addr, "nri_align_state_write_failing"), Some(0.0));
    assert_eq!(d.output().matches("state persisted again").count(), 1);
    let (_, body) = probe(&addr, "/readyz").expect("readyz");
    assert!(!body.contains("degraded:"), "{body}");
    rt.hang_up().await;
    d.stop(nix::sys::signal::Signal::SIGTERM);
}
