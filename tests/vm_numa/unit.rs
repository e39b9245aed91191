//! nri-align as the shipped systemd unit (`packaging/systemd/nri-align.service`) in the
//! systemd guest: installed the way docs/install.md says (the unit file verbatim, the
//! binary at the path its `ExecStart=` names, the config in `/etc/nri-align/`, the runtime's
//! socket in `/etc/default/nri-align`), started with `systemctl start --no-block` before the
//! runtime is up, so its `Type=notify` contract is what systemd reports: `activating` while no
//! runtime answers, `active` once registered. Everything here asks systemd (`systemctl`,
//! `journalctl`), never nri-align.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use test_support::e2e::{nri_align_bin, repo_root, wait_until, PluginProcess, Runtime};

/// How nri-align runs in the guest.
pub enum Daemon {
    /// A process the harness started (`nri-align run --socket ...`), its output in a file.
    Process(PluginProcess),
    /// The systemd unit, its output in the journal; what systemd showed while it started.
    Unit {
        /// `systemctl show` before the runtime was up.
        before: String,
        /// Same, once registered.
        after: String,
    },
}

impl Daemon {
    /// Everything nri-align has logged.
    pub fn output(&self) -> String {
        match self {
            Daemon::Process(p) => p.output(),
            Daemon::Unit { .. } => journal(),
        }
    }
}

/// The unit's name.
pub const UNIT: &str = "nri-align.service";
/// Where the unit keeps its state (`StateDirectory=nri-align`).
pub const STATE_DIR: &str = "/var/lib/nri-align";
/// The config file the unit's `ExecStart=` reads.
pub const CONFIG: &str = "/etc/nri-align/config.yaml";
/// The unit's `EnvironmentFile=`.
const DEFAULTS: &str = "/etc/default/nri-align";

/// Runs `prog args`; its success and stdout (stderr appended on failure).
fn run(prog: &str, args: &[&str]) -> (bool, String) {
    match Command::new(prog).args(args).output() {
        Ok(o) => {
            let mut text = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if !o.status.success() {
                text.push_str(&String::from_utf8_lossy(&o.stderr));
            }
            (o.status.success(), text)
        }
        Err(e) => (false, format!("run {prog}: {e}")),
    }
}

/// `systemctl ARGS`; its output, or why it failed.
pub fn systemctl(args: &[&str]) -> Result<String, String> {
    match run("systemctl", args) {
        (true, out) => Ok(out),
        (false, out) => Err(format!("systemctl {}: {out}", args.join(" "))),
    }
}

/// `systemctl is-active` of the unit (`activating`, `active`, `failed`, ...).
pub fn is_active() -> String {
    // is-active exits non-zero for anything but active: the word is what matters.
    run("systemctl", &["is-active", UNIT]).1
}

/// A few properties of the unit, for messages: state, main PID, restarts, STATUS= text, as
/// `KEY=value ` (each followed by a space, in systemd's order).
pub fn show() -> String {
    let out = run(
        "systemctl",
        &[
            "show",
            UNIT,
            "-p",
            "ActiveState,SubState,MainPID,NRestarts,StatusText",
        ],
    )
    .1;
    out.lines().map(|l| format!("{l} ")).collect()
}

/// The unit's main PID (0 when none runs).
pub fn main_pid() -> u32 {
    run("systemctl", &["show", UNIT, "-p", "MainPID", "--value"])
        .1
        .parse()
        .unwrap_or(0)
}

/// The unit's journal of this boot, message text only.
pub fn journal() -> String {
    run(
        "journalctl",
        &["-b", "-u", UNIT, "-o", "cat", "--no-pager", "-q"],
    )
    .1
}

/// The NRI socket the harness instance `name` of `runtime` listens on, from the hack scripts'
/// own path rules (the unit must be pointed at it before the runtime exists).
pub fn nri_socket_of(runtime: Runtime, name: &str) -> Result<PathBuf, String> {
    let hack = repo_root().join("hack");
    let script = match runtime {
        Runtime::Containerd(f) => format!(
            "source {0}/lib.sh && instance_vars {1} {2} && echo \"$NRI_SOCK\"",
            hack.display(),
            f.name(),
            name
        ),
        Runtime::Crio => format!(
            "source {0}/lib.sh && source {0}/crio-lib.sh && crio_instance_vars {1} && echo \"$NRI_SOCK\"",
            hack.display(),
            name
        ),
    };
    match run("bash", &["-c", &script]) {
        (true, out) if out.starts_with('/') => Ok(PathBuf::from(out)),
        (_, out) => Err(format!("NRI socket of {} {name}: {out}", runtime.name())),
    }
}

/// Installs the unit for a runtime whose NRI socket is `socket`, with `config` as the config
/// file and `env` (KEY=VALUE lines: the fake NVML library and fixture) in its environment file.
/// A unit left by an earlier pass (another runtime) is stopped and its state removed first.
pub fn install(
    socket: &Path,
    config: &str,
    extra_args: &[&str],
    env: &[String],
) -> Result<(), String> {
    let _ = run("systemctl", &["stop", UNIT]);
    let _ = run("systemctl", &["reset-failed", UNIT]);
    let _ = std::fs::remove_dir_all(STATE_DIR);
    let unit_src = repo_root().join("packaging/systemd/nri-align.service");
    let text = std::fs::read_to_string(&unit_src)
        .map_err(|e| format!("read {}: {e}", unit_src.display()))?;
    std::fs::write(Path::new("/etc/systemd/system").join(UNIT), &text)
        .map_err(|e| format!("install the unit: {e}"))?;
    // The binary at the path ExecStart names: a link to the shared (read-only) build, which is
    // what `install -m 0755 target/release/nri-align /usr/local/bin/` puts there.
    let exec = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .and_then(|l| l.split_whitespace().next())
        .ok_or("the unit has no ExecStart=")?;
    let exec = Path::new(exec);
    if let Some(dir) = exec.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    }
    let _ = std::fs::remove_file(exec);
    std::os::unix::fs::symlink(nri_align_bin(), exec)
        .map_err(|e| format!("link {}: {e}", exec.display()))?;
    write_config(config)?;
    let mut args = vec!["--socket".to_string(), socket.display().to_string()];
    args.extend(extra_args.iter().map(|a| a.to_string()));
    let mut defaults = format!("NRI_ALIGN_ARGS=\"{}\"\n", args.join(" "));
    for line in env {
        defaults.push_str(line);
        defaults.push('\n');
    }
    std::fs::write(DEFAULTS, defaults).map_err(|e| format!("write {DEFAULTS}: {e}"))?;
    let mut used = vec![nri_align_bin(), socket.to_path_buf()];
    used.extend(
        env.iter()
            .filter_map(|l| l.split_once('=').map(|(_, v)| v.trim_matches('"')))
            .filter(|v| v.starts_with('/'))
            .map(PathBuf::from),
    );
    write_path_dropin(&used)?;
    systemctl(&["daemon-reload"]).map(|_| ())
}

/// Directories the unit hides from its own process: `PrivateTmp=yes` gives it an empty
/// `/tmp` and `/var/tmp`, `ProtectHome=yes` makes the homes inaccessible.
const HIDDEN_BY_THE_UNIT: [&str; 5] = ["/tmp/", "/var/tmp/", "/home/", "/root/", "/run/user/"];

/// The harness keeps the binary, the runtime's socket and the fake NVML under the checkout
/// (`target/`, `_output/`). A checkout in one of the directories the unit hides (CI clones into
/// `/tmp`) would leave the unit without them: the daemon failed with 203/EXEC. An operator's
/// install has none of this (the binary in `/usr/local/bin`, the socket in `/var/run/nri`), so
/// the unit file stays verbatim and a drop-in, as an operator would write one, binds just the
/// directories of those paths back, read-only. Without such paths no drop-in is written.
fn write_path_dropin(used: &[PathBuf]) -> Result<(), String> {
    let dir = Path::new("/etc/systemd/system").join(format!("{UNIT}.d"));
    let _ = std::fs::remove_dir_all(&dir);
    let mut binds: Vec<String> = used
        .iter()
        .filter(|p| {
            HIDDEN_BY_THE_UNIT
                .iter()
                .any(|h| p.to_string_lossy().starts_with(h))
        })
        .filter_map(|p| p.parent().map(|d| d.display().to_string()))
        .collect();
    binds.sort();
    binds.dedup();
    if binds.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let text = format!(
        "# Written by the test suite: the checkout is in a directory the unit hides.\n\
         [Service]\nBindReadOnlyPaths={}\n",
        binds.join(" ")
    );
    let file = dir.join("checkout-paths.conf");
    std::fs::write(&file, text).map_err(|e| format!("write {}: {e}", file.display()))
}

/// Writes the unit's config file.
pub fn write_config(text: &str) -> Result<(), String> {
    std::fs::create_dir_all("/etc/nri-align").map_err(|e| format!("mkdir /etc/nri-align: {e}"))?;
    std::fs::write(CONFIG, text).map_err(|e| format!("write {CONFIG}: {e}"))
}

/// `systemctl start --no-block` with no runtime up yet: the daemon must be running and the
/// unit still `activating` (no READY=1 without a runtime), also a few seconds later. Returns
/// what systemd showed, for the test's notes.
pub fn start_before_runtime() -> Result<String, String> {
    systemctl(&["start", "--no-block", UNIT])?;
    let running = wait_until(Duration::from_secs(120), || waiting_for_ready(&show()));
    if !running {
        return Err(format!(
            "the unit's daemon did not start: {}\n{}",
            show(),
            journal()
        ));
    }
    // Long enough for the daemon to have tried the missing socket (it retries within a second).
    std::thread::sleep(Duration::from_secs(5));
    let state = is_active();
    let seen = show();
    if state != "activating" || !waiting_for_ready(&seen) {
        return Err(format!(
            "with no runtime the unit must stay activating (no READY=1 before registration), \
             systemd says {state}: {seen}\n{}",
            journal()
        ));
    }
    Ok(seen)
}

/// The daemon runs and systemd waits for its READY=1 (`SubState=start` of a notify service;
/// a daemon that failed and waits to be restarted shows `auto-restart` and no main PID).
fn waiting_for_ready(show: &str) -> bool {
    show.contains("ActiveState=activating")
        && show.contains("SubState=start ")
        && !show.contains("MainPID=0 ")
}

/// Waits (up to `secs`) for the unit to become `active` once the runtime is up, and for the
/// daemon to say it registered.
pub fn wait_active(secs: u64) -> Result<String, String> {
    let ok = wait_until(Duration::from_secs(secs), || {
        is_active() == "active" && journal().contains("configured by runtime")
    });
    if !ok {
        return Err(format!(
            "the unit did not become active after the runtime came up: {}\n{}",
            show(),
            journal()
        ));
    }
    Ok(show())
}

/// `systemctl reload` (ExecReload: SIGHUP to the main PID).
pub fn reload() -> Result<(), String> {
    systemctl(&["reload", UNIT]).map(|_| ())
}
