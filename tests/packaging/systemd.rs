//! `packaging/systemd/nri-align.service`. systemd's own checker accepts it
//! with no warning (and does warn about a broken copy), its offline security review scores it
//! as hardened, and the daemon really works with the privileges the unit leaves it: uid 0 with
//! the unit's capability bounding set (empty) and no_new_privs, against a real containerd, it
//! registers and places a container. Its `Type=notify` contract holds: on a notification socket
//! of its own, as systemd passes one, the daemon sends `READY=1` only once registered and
//! synchronized with a real containerd, `STATUS=` while the runtime is away, `WATCHDOG=1` while
//! alive and `STOPPING=1` on SIGTERM. Starting the unit under systemd as PID 1 (ProtectSystem
//! and the rest enforced) is the systemd guest's job (tests/vm_numa).
//!
//! `systemd-analyze verify` insists that ExecStart's binary exists, so it runs in a private mount
//! namespace where this test's nri-align is bind-mounted at the unit's path; the host is not
//! changed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use test_support::e2e;

use test_support::e2e::{
    log_events, nri_align_bin, repo_root, skip_unless_root, status_field, AlignRun, ContainerSpec,
    Containerd, Flavor, PodSpec,
};

const MIB: i64 = 1 << 20;

fn unit_path() -> PathBuf {
    repo_root().join("packaging/systemd/nri-align.service")
}

/// `KEY=value` lines of the unit, in order (a key may repeat).
fn directives(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn value<'a>(d: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    d.iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The binary ExecStart runs.
fn exec_start_binary(d: &[(String, String)]) -> PathBuf {
    let exec = value(d, "ExecStart");
    PathBuf::from(
        exec.first()
            .and_then(|e| e.split_whitespace().next())
            .expect("ExecStart"),
    )
}

/// Runs `systemd-analyze ARGS` in a private mount namespace where the unit's binary path holds
/// this test's nri-align.
fn analyze(unit: &Path, args: &[&str]) -> Output {
    let d = directives(&fs::read_to_string(unit).expect("unit"));
    let bin = exec_start_binary(&d);
    let stage = tempfile::tempdir().expect("tmp");
    let name = bin.file_name().expect("binary name");
    fs::copy(nri_align_bin(), stage.path().join(name)).expect("stage binary");
    let script = r#"mount --bind "$1" "$2" && shift 2 && exec systemd-analyze "$@""#;
    Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(stage.path())
        .arg(bin.parent().expect("binary dir"))
        .args(args)
        .arg(unit)
        .current_dir(stage.path())
        .output()
        .expect("run unshare + systemd-analyze")
}

#[test]
fn unit_passes_systemd_analyze_verify_and_security_review() {
    if skip_unless_root("unit_passes_systemd_analyze_verify_and_security_review") {
        return;
    }
    let unit = unit_path();
    // --man=no: the man page is generated at release time, not installed here.
    let out = analyze(&unit, &["verify", "--man=no"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "verify failed: {stderr}");
    assert!(stderr.trim().is_empty(), "verify warns: {stderr}");

    // The checker is not vacuous: a misspelt directive and a bad value are reported.
    let dir = tempfile::tempdir().expect("tmp");
    let broken = dir.path().join("nri-align.service");
    let text = fs::read_to_string(&unit).expect("unit");
    fs::write(
        &broken,
        text.replace("ProtectSystem=strict", "ProtectSystem=sometimes")
            .replace("NoNewPrivileges=yes", "NoNewPrivilege=yes"),
    )
    .expect("write");
    let out = analyze(&broken, &["verify", "--man=no"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sometimes") && stderr.contains("NoNewPrivilege"),
        "{stderr}"
    );

    // systemd's offline review: exposure at most 3.0 of 10 ("OK").
    let out = analyze(
        &unit,
        &["security", "--offline=true", "--no-pager", "--threshold=30"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_default()
        .to_string();
    eprintln!("systemd-analyze security: {}", line.trim());
    assert!(out.status.success(), "exposure over 3.0: {line}\n{text}");
}

#[test]
fn unit_declares_what_the_daemon_needs() {
    let d = directives(&fs::read_to_string(unit_path()).expect("unit"));
    let one = |k: &str| value(&d, k).first().copied().unwrap_or("<unset>");
    assert_eq!(one("Type"), "notify");
    assert_eq!(one("NotifyAccess"), "main");
    assert_eq!(one("WatchdogSec"), "30s");
    assert_eq!(one("Restart"), "on-failure");
    let after = one("After");
    assert!(
        after.contains("containerd.service") && after.contains("crio.service"),
        "{after}"
    );
    assert!(value(&d, "Wants").is_empty(), "no Wants= on a runtime");
    assert_eq!(one("Before"), "kubelet.service");
    assert_eq!(one("CapabilityBoundingSet"), "");
    assert_eq!(one("NoNewPrivileges"), "yes");
    assert_eq!(one("ProtectSystem"), "strict");
    assert_eq!(one("ReadWritePaths"), "/sys/fs/cgroup");
    assert_eq!(one("StateDirectory"), "nri-align");
    assert_eq!(one("RestrictAddressFamilies"), "AF_UNIX AF_INET AF_INET6");
    let exec = one("ExecStart");
    assert!(
        exec.contains(" run ")
            && exec.contains("--config /etc/nri-align/config.yaml")
            && exec.contains("--state-dir /var/lib/nri-align"),
        "{exec}"
    );
}

/// setpriv's `--bounding-set` argument for the unit's CapabilityBoundingSet= (empty: none).
fn bounding_set_arg(d: &[(String, String)]) -> String {
    let caps = value(d, "CapabilityBoundingSet")
        .first()
        .copied()
        .unwrap_or_default()
        .split_whitespace()
        .map(|c| format!(",+{}", c.to_lowercase()))
        .collect::<String>();
    format!("-all{caps}")
}

#[test]
fn daemon_registers_and_places_with_the_units_privileges() {
    let test = "daemon_registers_and_places_with_the_units_privileges";
    if skip_unless_root(test) {
        return;
    }
    let d = directives(&fs::read_to_string(unit_path()).expect("unit"));
    assert_eq!(value(&d, "NoNewPrivileges"), ["yes"]);
    let ctrd = Containerd::fresh(Flavor::Sid, "e2e-unit").expect("containerd comes up");

    // nri-align behind setpriv: the unit's bounding set, no inheritable or ambient
    // capabilities, no_new_privs; uid 0 stays (the unit sets no User=).
    let wrapper = ctrd.dir().join("nri-align-unit-privileges");
    fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec setpriv --bounding-set={} --inh-caps=-all --ambient-caps=-all \
             --no-new-privs -- {} \"$@\"\n",
            bounding_set_arg(&d),
            nri_align_bin().display()
        ),
    )
    .expect("write wrapper");
    fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let run = AlignRun::new(ctrd.dir().join("unit-state"));
    let args = run.args().expect("args");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let plugin = ctrd
        .start_external_plugin_with_env(&wrapper, &args, &run.envs())
        .expect("start");
    plugin
        .wait_registrations(1, Duration::from_secs(20))
        .expect("registers without any capability");
    let pid = plugin.pid();
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    for set in ["CapBnd", "CapPrm", "CapEff"] {
        assert_eq!(
            status_field(&status, set).as_deref(),
            Some("0000000000000000"),
            "{set}"
        );
    }
    assert_eq!(status_field(&status, "NoNewPrivs").as_deref(), Some("1"));

    let pod = ctrd.run_pod(&PodSpec::new("unit")).expect("pod");
    let id = ctrd
        .run_container(
            &pod,
            &ContainerSpec::new("pinned")
                .cpu_millis(1000, Some(1000))
                .memory(64 * MIB),
        )
        .expect("container");
    let st = ctrd.cri().proc_status(&id).expect("status");
    let cpus = status_field(&st, "Cpus_allowed_list").unwrap_or_default();
    assert!(
        cpus.parse::<u32>().is_ok(),
        "one exclusive CPU, got {cpus:?}"
    );
    assert!(
        run.state().expect("state").contains_key(&id),
        "decision persisted without capabilities"
    );
    assert!(
        !log_events(&plugin.output(), "decision").is_empty(),
        "{}",
        plugin.output()
    );
}

/// Datagrams received on a notification socket, collected by a thread.
struct NotifySocket {
    path: PathBuf,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl NotifySocket {
    fn bind(path: PathBuf) -> NotifySocket {
        let _ = fs::remove_file(&path);
        let sock = std::os::unix::net::UnixDatagram::bind(&path).expect("bind notify socket");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = sock.recv(&mut buf) {
                s.lock()
                    .expect("lock")
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        });
        NotifySocket { path, seen }
    }

    fn messages(&self) -> Vec<String> {
        self.seen.lock().expect("lock").clone()
    }

    /// Waits for a datagram with a line starting with `prefix`; returns its index.
    fn wait_for(&self, prefix: &str, after: usize) -> usize {
        let mut found = None;
        e2e::wait_until(Duration::from_secs(30), || {
            found = self
                .messages()
                .iter()
                .enumerate()
                .skip(after)
                .find(|(_, m)| m.lines().any(|l| l.starts_with(prefix)))
                .map(|(i, _)| i);
            found.is_some()
        });
        found.unwrap_or_else(|| panic!("no {prefix:?} after #{after} in {:#?}", self.messages()))
    }

    fn count(&self, line: &str) -> usize {
        self.messages()
            .iter()
            .filter(|m| m.lines().any(|l| l == line))
            .count()
    }
}

#[test]
fn daemon_tells_systemd_ready_only_once_registered_and_its_status_while_reconnecting() {
    let test = "daemon_tells_systemd_ready_only_once_registered_and_its_status_while_reconnecting";
    if skip_unless_root(test) {
        return;
    }
    let mut ctrd = Containerd::fresh(Flavor::Sid, "e2e-notify").expect("containerd comes up");
    let notify = NotifySocket::bind(ctrd.dir().join("notify.sock"));
    // Not up yet when nri-align starts, as at boot when the unit starts before containerd.
    ctrd.kill(nix::sys::signal::Signal::SIGKILL)
        .expect("stop containerd");
    let run = AlignRun::new(ctrd.dir().join("notify-state"));
    let args = run.args().expect("args");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut envs = run.envs();
    envs.push(("NOTIFY_SOCKET".into(), notify.path.display().to_string()));
    envs.push(("WATCHDOG_USEC".into(), "3000000".into()));
    let mut plugin = ctrd
        .start_external_plugin_with_env(&nri_align_bin(), &args, &envs)
        .expect("start");
    let connecting = notify.wait_for("STATUS=connecting to ", 0);
    assert_eq!(notify.count("READY=1"), 0, "{:#?}", notify.messages());

    // containerd comes: READY=1 with the status, once registered and synchronized.
    ctrd.start().expect("containerd starts");
    let ready = notify.wait_for("READY=1", connecting);
    let msg = &notify.messages()[ready];
    assert!(
        msg.contains("STATUS=registered and synchronized with containerd"),
        "{msg}"
    );
    assert!(plugin.registrations() >= 1, "{}", plugin.output());
    // The watchdog: pinged every second while alive.
    let watchdog_before = notify.count("WATCHDOG=1");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        notify.count("WATCHDOG=1") >= watchdog_before + 2,
        "{:#?}",
        notify.messages()
    );

    // containerd restarts: the status says so, no second READY=1 (systemd has no "unready").
    ctrd.kill(nix::sys::signal::Signal::SIGKILL)
        .expect("kill containerd");
    let lost = notify.wait_for("STATUS=connecting to ", ready + 1);
    ctrd.start().expect("containerd back");
    notify.wait_for(
        "STATUS=registered and synchronized with containerd",
        lost + 1,
    );
    assert_eq!(notify.count("READY=1"), 1, "{:#?}", notify.messages());

    plugin.stop(nix::sys::signal::Signal::SIGTERM);
    notify.wait_for("STOPPING=1", 0);
}
