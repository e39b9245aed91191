//! nri-align itself as the plugin under test: started as an external plugin on an instance's
//! private NRI socket (optionally on an emulated host with the fake NVML), or installed as a
//! pre-launched plugin; plus what tests read back from it (log lines, metrics, `verify`, the
//! state file).

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use super::host::EmulatedHost;
pub use super::procs::{
    container_devices, container_of_cgroup, processes_under, scan_cgroup, ContainerProcess, Seen,
};
use super::{err, nri_align_bin, run_cmd, wait_until, HResult, HarnessError, Instance};
use super::{parse_env_file, PluginProcess};

/// How to run `nri-align run` for a test.
#[derive(Debug, Clone)]
pub struct AlignRun {
    /// `--state-dir`.
    pub state_dir: PathBuf,
    /// `--config` (written by [`AlignRun::write_config`]).
    pub config: Option<PathBuf>,
    /// `--host-root`, `--nvml-lib` and `FAKE_NVML_FIXTURE` of an emulated host.
    pub host: Option<EmulatedHost>,
    /// `--idx`.
    pub idx: Option<String>,
    /// More arguments (e.g. `--kubeconfig FILE`).
    pub extra: Vec<String>,
}

impl AlignRun {
    /// nri-align on the real host root, state under `state_dir`.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            config: None,
            host: None,
            idx: None,
            extra: Vec::new(),
        }
    }

    /// On an emulated host.
    pub fn on(mut self, host: &EmulatedHost) -> Self {
        self.host = Some(host.clone());
        self
    }

    /// Writes `yaml` as the configuration file (mode 0644: nri-align refuses world-writable
    /// ones) and uses it.
    pub fn write_config(&mut self, path: &Path, yaml: &str) -> HResult<()> {
        write_private(path, yaml)?;
        self.config = Some(path.to_path_buf());
        Ok(())
    }

    /// The arguments after `run --socket S`.
    pub fn args(&self) -> HResult<Vec<String>> {
        let mut a = vec![
            "--state-dir".to_string(),
            self.state_dir.display().to_string(),
        ];
        if let Some(c) = &self.config {
            a.extend(["--config".to_string(), c.display().to_string()]);
        }
        if let Some(h) = &self.host {
            a.extend(["--host-root".to_string(), h.root.display().to_string()]);
            a.extend([
                "--nvml-lib".to_string(),
                EmulatedHost::nvml_lib()?.display().to_string(),
            ]);
        }
        if let Some(i) = &self.idx {
            a.extend(["--idx".to_string(), i.clone()]);
        }
        a.extend(self.extra.iter().cloned());
        Ok(a)
    }

    /// The environment the plugin needs besides the inherited one.
    pub fn envs(&self) -> Vec<(String, String)> {
        let mut e = vec![
            // One line per decision at info; the tests read them, and the per-container
            // lines of a Synchronize that re-sends the pool (debug: one summary at info).
            (
                "RUST_LOG".to_string(),
                "info,nri_align::enforce::engine::recovery=debug".to_string(),
            ),
            // A test run inside a Kubernetes pod must not publish to that cluster: without a
            // service host nri-align never uses the pod's service account (only an explicit
            // --kubeconfig publishes).
            ("KUBERNETES_SERVICE_HOST".to_string(), String::new()),
        ];
        if let Some(h) = &self.host {
            e.push((
                "FAKE_NVML_FIXTURE".to_string(),
                h.nvml_fixture.display().to_string(),
            ));
        }
        e
    }

    /// Starts it as an external plugin of `ctrd` and waits until it registered.
    pub fn start(&self, ctrd: &Instance) -> HResult<PluginProcess> {
        let args = self.args()?;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let envs = self.envs();
        let plugin = ctrd.start_external_plugin_with_env(&nri_align_bin(), &args, &envs)?;
        plugin.wait_registrations(1, Duration::from_secs(20))?;
        Ok(plugin)
    }

    /// A shell script that runs this configuration of nri-align in launched mode, for
    /// [`Instance::install_prelaunched_plugin`]: the runtime replaces the environment and
    /// passes no arguments, so the script carries them and sends the log to `log`.
    pub fn launcher_script(&self, script: &Path, log: &Path) -> HResult<()> {
        let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
        let mut text = String::from("#!/bin/sh\n");
        for (k, v) in self.envs() {
            text.push_str(&format!("export {k}={}\n", quote(&v)));
        }
        text.push_str(&format!(
            "exec {} run",
            quote(&nri_align_bin().display().to_string())
        ));
        for a in self.args()? {
            text.push(' ');
            text.push_str(&quote(&a));
        }
        text.push_str(&format!(" 2>>{}\n", quote(&log.display().to_string())));
        fs::write(script, text)
            .map_err(|e| HarnessError(format!("write {}: {e}", script.display())))?;
        fs::set_permissions(script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| HarnessError(format!("chmod {}: {e}", script.display())))?;
        Ok(())
    }

    /// The decisions nri-align persisted (`STATE_DIR/state.log`): container id -> record.
    pub fn state(&self) -> HResult<BTreeMap<String, Value>> {
        read_state(&self.state_dir)
    }

    /// `nri-align placements --json --state-dir S`: one object per recorded container.
    pub fn placements(&self) -> HResult<Vec<Value>> {
        let out = run_cmd(
            Command::new(nri_align_bin())
                .args(["placements", "--json", "--state-dir"])
                .arg(&self.state_dir),
            "nri-align placements",
        )?;
        if !out.status.success() {
            return Err(HarnessError(format!(
                "nri-align placements: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        serde_json::from_slice(&out.stdout)
            .map_err(|e| HarnessError(format!("nri-align placements: {e}")))
    }

    /// `nri-align verify --state-dir S [ARGS]` on the real host.
    pub fn verify(&self, extra: &[&str]) -> HResult<Output> {
        run_cmd(
            Command::new(nri_align_bin())
                .arg("verify")
                .arg("--state-dir")
                .arg(&self.state_dir)
                .args(extra),
            "nri-align verify",
        )
    }
}

/// Writes `text` to `path` with mode 0644.
pub fn write_private(path: &Path, text: &str) -> HResult<()> {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p).map_err(|e| HarnessError(format!("mkdir {}: {e}", p.display())))?;
    }
    fs::write(path, text).map_err(|e| HarnessError(format!("write {}: {e}", path.display())))?;
    fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .map_err(|e| HarnessError(format!("chmod {}: {e}", path.display())))
}

/// Lines of an nri-align log that carry `message` (tracing's text format: `... LEVEL target:
/// message key=value ...`), as key -> value maps (values end at the next ` key=`).
pub fn log_events(log: &str, message: &str) -> Vec<BTreeMap<String, String>> {
    let marker = format!(": {message}");
    log.lines()
        .filter_map(|l| {
            let at = l.find(&marker)?;
            let rest = &l[at + marker.len()..];
            // The message must end here (not be a prefix of a longer one).
            if !(rest.is_empty() || rest.starts_with(' ')) {
                return None;
            }
            Some(parse_fields(rest))
        })
        .collect()
}

/// `key=value key2=value with spaces` -> map; a value runs until the next ` word=`.
fn parse_fields(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let tokens: Vec<&str> = text.split(' ').filter(|t| !t.is_empty()).collect();
    let mut key: Option<String> = None;
    let mut val = String::new();
    for t in tokens {
        let is_key = t.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        });
        if is_key {
            if let Some(k) = key.take() {
                out.insert(k, std::mem::take(&mut val));
            }
            let (k, v) = t.split_once('=').unwrap_or((t, ""));
            key = Some(k.to_string());
            val = v.to_string();
        } else if key.is_some() {
            val.push(' ');
            val.push_str(t);
        }
    }
    if let Some(k) = key {
        out.insert(k, val);
    }
    out
}

impl PluginProcess {
    /// Sends `signal` to the plugin (SIGHUP: reload; SIGKILL: crash).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        if let Ok(pid) = i32::try_from(self.pid()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
    }

    /// How many times the plugin registered so far.
    pub fn registrations(&self) -> usize {
        log_events(&self.output(), "registered").len()
    }

    /// Waits until the plugin registered at least `n` times.
    pub fn wait_registrations(&self, n: usize, timeout: Duration) -> HResult<()> {
        if wait_until(timeout, || self.registrations() >= n) {
            return Ok(());
        }
        err(format!(
            "nri-align did not register {n} time(s) within {timeout:?}; log:\n{}",
            self.output()
        ))
    }

    /// `decision` lines of container `name` (pod, container, cpus, exclusive, gpus...).
    pub fn decisions(&self, container: &str) -> Vec<BTreeMap<String, String>> {
        log_events(&self.output(), "decision")
            .into_iter()
            .filter(|d| d.get("container").is_some_and(|c| c == container))
            .collect()
    }

    /// The address the metrics endpoint bound (from the `serving /metrics` line).
    pub fn metrics_address(&self) -> HResult<String> {
        let mut addr = None;
        wait_until(Duration::from_secs(10), || {
            addr = log_events(&self.output(), "serving /metrics")
                .into_iter()
                .find_map(|e| e.get("address").cloned());
            addr.is_some()
        });
        addr.ok_or_else(|| HarnessError(format!("no metrics address in:\n{}", self.output())))
    }
}

/// `GET /metrics` from `addr`: the body.
pub fn scrape(addr: &str) -> HResult<String> {
    let mut conn = std::net::TcpStream::connect(addr)
        .map_err(|e| HarnessError(format!("connect {addr}: {e}")))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| HarnessError(e.to_string()))?;
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .map_err(|e| HarnessError(format!("send to {addr}: {e}")))?;
    let mut text = String::new();
    conn.read_to_string(&mut text)
        .map_err(|e| HarnessError(format!("read from {addr}: {e}")))?;
    match text.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_string()),
        _ => err(format!("bad metrics answer from {addr}:\n{text}")),
    }
}

/// `GET PATH` from `addr` as the kubelet's HTTP probe sends it: the status code and the body.
pub fn probe(addr: &str, path: &str) -> HResult<(u16, String)> {
    let mut conn = std::net::TcpStream::connect(addr)
        .map_err(|e| HarnessError(format!("connect {addr}: {e}")))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| HarnessError(e.to_string()))?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes())
        .map_err(|e| HarnessError(format!("send to {addr}: {e}")))?;
    let mut text = String::new();
    conn.read_to_string(&mut text)
        .map_err(|e| HarnessError(format!("read from {addr}: {e}")))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| HarnessError(format!("no HTTP answer from {addr}: {text:?}")))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| HarnessError(format!("bad status line from {addr}: {head}")))?;
    Ok((code, body.to_string()))
}

/// Polls `probe(addr, path)` every 100 ms until its status is `code`; returns the last answer
/// (status and body) either way.
pub fn wait_probe(addr: &str, path: &str, code: u16, timeout: Duration) -> (u16, String) {
    let mut last = (0, String::new());
    wait_until(timeout, || {
        last = probe(addr, path).unwrap_or_else(|e| (0, e.to_string()));
        last.0 == code
    });
    last
}

/// The value of one sample line `name{labels} value` of a Prometheus text body.
pub fn metric(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// What a live container looks like from the host: its init process's allowed CPUs and memory
/// nodes, and the GPU / RDMA device nodes in its /dev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    /// Container id.
    pub id: String,
    /// Init pid on the host.
    pub pid: u32,
    /// `Cpus_allowed_list` of the init process.
    pub cpus: Vec<u32>,
    /// `Mems_allowed_list`.
    pub mems: String,
    /// `/dev/nvidiaN`, `/dev/infiniband/uverbsN` visible in the container, sorted.
    pub devices: Vec<String>,
    /// The container's environment from its runtime spec.
    pub env: BTreeMap<String, String>,
}

impl Instance {
    /// Starts `bin run --socket <this instance's NRI socket> ARGS...` with extra environment.
    pub fn start_external_plugin_with_env(
        &self,
        bin: &Path,
        args: &[&str],
        envs: &[(String, String)],
    ) -> HResult<PluginProcess> {
        self.spawn_plugin(bin, args, envs)
    }

    /// Reads container `id` from the host side: inspect for the pid and spec, /proc for the
    /// rest. `Ok(None)` when it has no running process.
    pub fn live(&self, id: &str) -> HResult<Option<Live>> {
        let info = self.cri().inspect(id)?;
        if info["status"]["state"] != "CONTAINER_RUNNING" {
            return Ok(None);
        }
        let Some(pid) = info["info"]["pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
        else {
            return err(format!("inspect {id}: no pid"));
        };
        let status = fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| HarnessError(format!("status of {id} (pid {pid}): {e}")))?;
        let field = |k: &str| super::status_field(&status, k).unwrap_or_default();
        let devices = container_devices(Path::new(&format!("/proc/{pid}/root/dev")));
        let env = info["info"]["runtimeSpec"]["process"]["env"]
            .as_array()
            .map(|a| {
                parse_env_file(
                    &a.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("\n"),
                )
            })
            .unwrap_or_default();
        Ok(Some(Live {
            id: id.to_string(),
            pid,
            cpus: super::host::parse_list(&field("Cpus_allowed_list")),
            mems: field("Mems_allowed_list"),
            devices,
            env,
        }))
    }
}

/// The cpuset cgroup directory of process `pid` (the v1 cpuset hierarchy, or v2).
pub fn cpuset_dir(pid: u32) -> HResult<PathBuf> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map_err(|e| HarnessError(format!("cgroup of pid {pid}: {e}")))?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (
            parts.next(),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
        );
        let base = if ctrls.split(',').any(|c| c == "cpuset") {
            "/sys/fs/cgroup/cpuset"
        } else if ctrls.is_empty() {
            "/sys/fs/cgroup"
        } else {
            continue;
        };
        let dir = Path::new(base).join(path.trim_start_matches('/'));
        if dir.join("cpuset.cpus").is_file() {
            return Ok(dir);
        }
    }
    err(format!("no cpuset cgroup for pid {pid}:\n{text}"))
}

impl Instance {
    /// The CPUs in the cpuset cgroup of running container `id` (`cpuset.cpus`, or the
    /// effective set on cgroup v2 when unset).
    pub fn cgroup_cpus(&self, id: &str) -> HResult<Vec<u32>> {
        let live = self
            .live(id)?
            .ok_or_else(|| HarnessError(format!("{id} is not running")))?;
        let dir = cpuset_dir(live.pid)?;
        let read = |f: &str| fs::read_to_string(dir.join(f)).unwrap_or_default();
        let mut text = read("cpuset.cpus");
        if text.trim().is_empty() {
            text = read("cpuset.cpus.effective");
        }
        Ok(super::host::parse_list(&text))
    }

    /// The memory nodes in the cpuset cgroup of running container `id` (`cpuset.mems`, or
    /// the effective list where cgroup v2 leaves it unset).
    pub fn cgroup_mems(&self, id: &str) -> HResult<Vec<u32>> {
        let live = self
            .live(id)?
            .ok_or_else(|| HarnessError(format!("{id} is not running")))?;
        let dir = cpuset_dir(live.pid)?;
        let read = |f: &str| fs::read_to_string(dir.join(f)).unwrap_or_default();
        let mut text = read("cpuset.mems");
        if text.trim().is_empty() {
            text = read("cpuset.mems.effective");
        }
        Ok(super::host::parse_list(&text))
    }
}

/// The records in a state dir, as the daemon left them: its log (`state.log`: a header line,
/// then `CHECKSUM {"put":ID,"rec":RECORD}` or `CHECKSUM {"del":ID}` lines replayed in order;
/// layout 3 adds `{"group":KEY,"cpus":LIST}` lines and `"follows":true` puts, whose record
/// runs on its group's last LIST: the NUMA nodes of a shared record, `exempt` for an exempt
/// one), else a 0.1.0 `state.json`. Read here from the files, not through the crate, so a change of
/// format that breaks old readers shows.
pub fn read_state(state_dir: &Path) -> HResult<BTreeMap<String, Value>> {
    let log = state_dir.join("state.log");
    let legacy = state_dir.join("state.json");
    let path = if log.exists() { &log } else { &legacy };
    let text = fs::read_to_string(path)
        .map_err(|e| HarnessError(format!("read {}: {e}", path.display())))?;
    if path == &legacy {
        let doc: Value = serde_json::from_str(&text)
            .map_err(|e| HarnessError(format!("bad {}: {e}", path.display())))?;
        return Ok(doc["containers"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default());
    }
    let mut lines = text.lines();
    if !matches!(
        lines.next(),
        Some("nri-align state log 2" | "nri-align state log 3")
    ) {
        return Err(HarnessError(format!(
            "{}: no state log header",
            path.display()
        )));
    }
    let mut out = BTreeMap::new();
    let mut groups: BTreeMap<String, Value> = BTreeMap::new();
    let mut follows = std::collections::BTreeSet::new();
    for line in lines {
        let json = line.split_once(' ').map_or("", |(_, j)| j);
        let v: Value = serde_json::from_str(json)
            .map_err(|e| HarnessError(format!("bad line in {}: {e}: {line}", path.display())))?;
        if let (Some(id), Some(rec)) = (v["put"].as_str(), v.get("rec")) {
            out.insert(id.to_string(), rec.clone());
            if v["follows"].as_bool() == Some(true) {
                follows.insert(id.to_string());
            } else {
                follows.remove(id);
            }
        } else if let Some(id) = v["del"].as_str() {
            out.remove(id);
            follows.remove(id);
        } else if let (Some(key), Some(cpus)) = (v["group"].as_str(), v.get("cpus")) {
            groups.insert(key.to_string(), cpus.clone());
        }
    }
    for id in follows {
        let Some(rec) = out.get_mut(&id) else {
            continue;
        };
        let key = if rec["exempt"].as_bool() == Some(true) {
            "exempt".to_string()
        } else {
            rec["assignment"]["numa_nodes"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        let cpus = groups.get(&key).cloned().ok_or_else(|| {
            HarnessError(format!(
                "{}: {id} follows group {key:?}, never named",
                path.display()
            ))
        })?;
        rec["applied_cpus"] = cpus;
    }
    Ok(out)
}
