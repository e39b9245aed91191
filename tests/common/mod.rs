//! Integration-test harness: private containerd instances brought up by hack/containerd-up,
//! the CRI client (`$CRICTL` or the project's `nri-align-crictl`), pod / container configs in
//! crictl's JSON format, exec in containers, and hooks to run nri-align as an NRI plugin.
//!
//! Every test file uses its own instance name, so test binaries running in parallel never share
//! a containerd; an instance is torn down (hack/containerd-down) when its [`Containerd`] drops,
//! also when the test panics. Set `NRI_ALIGN_KEEP=1` to keep instances for post-mortems.
#![allow(dead_code)] // Each test file uses a different part of the harness.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A harness failure, with enough context (command, stderr, log tail) to debug from CI output.
#[derive(Debug, Clone)]
pub struct HarnessError(pub String);

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HarnessError {}

/// Result of harness calls.
pub type HResult<T> = Result<T, HarnessError>;

fn err<T>(msg: impl Into<String>) -> HResult<T> {
    Err(HarnessError(msg.into()))
}

/// Root of the repository (where Cargo.toml and hack/ are).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Returns `true` (after printing why) when the e2e tests cannot run here: they need root to
/// start containerd. Use as `if common::skip_unless_root("name") { return; }`.
pub fn skip_unless_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return false;
    }
    eprintln!(
        "SKIP {test}: needs root to run containerd (uid {})",
        nix::unistd::geteuid()
    );
    true
}

/// The containerd builds the harness provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// containerd 1.7.x from Debian trixie: NRI v0.6.1, config version 2.
    Trixie,
    /// containerd 2.1.x from Debian sid: NRI v0.8, config version 3.
    Sid,
}

impl Flavor {
    /// Both flavors, oldest first.
    pub const ALL: [Flavor; 2] = [Flavor::Trixie, Flavor::Sid];

    /// Name the hack scripts take.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Trixie => "trixie",
            Flavor::Sid => "sid",
        }
    }
}

/// The nri-align binary under test.
pub fn nri_align_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nri-align"))
}

/// The CRI client: `$CRICTL` if set, else `nri-align-crictl` built next to `nri-align`.
pub fn crictl_bin() -> HResult<PathBuf> {
    if let Some(c) = std::env::var_os("CRICTL").filter(|c| !c.is_empty()) {
        return Ok(PathBuf::from(c));
    }
    let bin = nri_align_bin();
    let dir = bin.parent().map(Path::to_path_buf).unwrap_or_default();
    let candidate = dir.join("nri-align-crictl");
    if candidate.is_file() {
        return Ok(candidate);
    }
    err(format!(
        "no CRI client: {} is missing; run `cargo build -p cri-client` first or set CRICTL",
        candidate.display()
    ))
}

fn run_cmd(cmd: &mut Command, what: &str) -> HResult<Output> {
    cmd.output()
        .map_err(|e| HarnessError(format!("{what}: cannot run: {e}")))
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Knobs for [`Containerd::up_with`].
#[derive(Debug, Clone, Default)]
pub struct UpOptions {
    /// NRI plugin_registration_timeout (containerd default 5s).
    pub registration_timeout: Option<String>,
    /// NRI plugin_request_timeout (containerd default 2s).
    pub request_timeout: Option<String>,
    /// containerd log level (default info).
    pub log_level: Option<String>,
}

/// One private containerd instance (hack/containerd-up FLAVOR NAME).
pub struct Containerd {
    /// Which build.
    pub flavor: Flavor,
    /// Instance name (unique per test).
    pub name: String,
    /// The instance's env file (CONTAINERD_ADDRESS, NRI_SOCKET, CRI_CONFIG_FILE...).
    pub env: BTreeMap<String, String>,
    options: UpOptions,
    crictl: PathBuf,
    configs: AtomicUsize,
}

impl Containerd {
    /// Starts (or reuses) the instance with default options. Prefer [`Containerd::fresh`] in
    /// tests so no state of an earlier run leaks in.
    pub fn up(flavor: Flavor, name: &str) -> HResult<Self> {
        Self::up_with(flavor, name, UpOptions::default())
    }

    /// Tears down whatever an earlier run left under this name, then starts the instance.
    pub fn fresh(flavor: Flavor, name: &str) -> HResult<Self> {
        Self::fresh_with(flavor, name, UpOptions::default())
    }

    /// [`Containerd::fresh`] with options.
    pub fn fresh_with(flavor: Flavor, name: &str, options: UpOptions) -> HResult<Self> {
        let crictl = crictl_bin()?;
        let out = run_cmd(
            Command::new(repo_root().join("hack/containerd-down"))
                .args([flavor.name(), name])
                .env("CRICTL", &crictl),
            "containerd-down",
        )?;
        if !out.status.success() {
            return err(format!(
                "containerd-down {} {name} failed: {}",
                flavor.name(),
                describe(&out)
            ));
        }
        Self::up_with(flavor, name, options)
    }

    /// Starts (or reuses) the instance.
    pub fn up_with(flavor: Flavor, name: &str, options: UpOptions) -> HResult<Self> {
        let crictl = crictl_bin()?;
        let mut me = Self {
            flavor,
            name: name.to_string(),
            env: BTreeMap::new(),
            options,
            crictl,
            configs: AtomicUsize::new(0),
        };
        me.start()?;
        Ok(me)
    }

    /// (Re)runs hack/containerd-up: starts the daemon if it is not running (on its existing
    /// state) and waits for CRI. Used after [`Containerd::kill`] to bring containerd back.
    pub fn start(&mut self) -> HResult<()> {
        let mut cmd = Command::new(repo_root().join("hack/containerd-up"));
        cmd.args([self.flavor.name(), &self.name])
            .env("CRICTL", &self.crictl);
        if let Some(t) = &self.options.registration_timeout {
            cmd.env("NRI_PLUGIN_REGISTRATION_TIMEOUT", t);
        }
        if let Some(t) = &self.options.request_timeout {
            cmd.env("NRI_PLUGIN_REQUEST_TIMEOUT", t);
        }
        if let Some(l) = &self.options.log_level {
            cmd.env("CONTAINERD_LOG_LEVEL", l);
        }
        let out = run_cmd(&mut cmd, "containerd-up")?;
        if !out.status.success() {
            return err(format!(
                "containerd-up {} {} failed: {}",
                self.flavor.name(),
                self.name,
                describe(&out)
            ));
        }
        let env_file = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let text = fs::read_to_string(&env_file)
            .map_err(|e| HarnessError(format!("read env file {env_file:?}: {e}")))?;
        self.env = parse_env_file(&text);
        Ok(())
    }

    /// Value from the instance's env file.
    pub fn var(&self, key: &str) -> HResult<&str> {
        self.env
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| HarnessError(format!("env file of {} lacks {key}", self.name)))
    }

    /// Private NRI socket of this instance.
    pub fn nri_socket(&self) -> PathBuf {
        PathBuf::from(self.env.get("NRI_SOCKET").cloned().unwrap_or_default())
    }

    /// Directory containerd launches pre-installed NRI plugins from (at start-up).
    pub fn plugin_path(&self) -> PathBuf {
        PathBuf::from(self.env.get("NRI_PLUGIN_PATH").cloned().unwrap_or_default())
    }

    /// Directory of drop-in configs for pre-installed plugins.
    pub fn plugin_config_path(&self) -> PathBuf {
        PathBuf::from(
            self.env
                .get("NRI_PLUGIN_CONFIG_PATH")
                .cloned()
                .unwrap_or_default(),
        )
    }

    /// The instance directory under _output/.
    pub fn dir(&self) -> PathBuf {
        PathBuf::from(
            self.env
                .get("CONTAINERD_CONFIG")
                .cloned()
                .unwrap_or_default(),
        )
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
    }

    /// containerd's version string (e.g. "1.7.24~ds1", "2.1.9+unknown").
    pub fn version(&self) -> &str {
        self.env
            .get("CONTAINERD_VERSION")
            .map(String::as_str)
            .unwrap_or("")
    }

    /// PID of the running daemon.
    pub fn pid(&self) -> HResult<i32> {
        let path = self.dir().join("containerd.pid");
        let raw = fs::read_to_string(&path)
            .map_err(|e| HarnessError(format!("read {}: {e}", path.display())))?;
        raw.trim()
            .parse()
            .map_err(|e| HarnessError(format!("bad pid in {}: {e}", path.display())))
    }

    /// Kills the daemon (containers and shims keep running, as after a crash) and waits for it
    /// to be gone. Bring it back with [`Containerd::start`].
    pub fn kill(&self, signal: nix::sys::signal::Signal) -> HResult<()> {
        let pid = nix::unistd::Pid::from_raw(self.pid()?);
        nix::sys::signal::kill(pid, signal)
            .map_err(|e| HarnessError(format!("kill {pid}: {e}")))?;
        let gone = wait_until(Duration::from_secs(15), || {
            !Path::new(&format!("/proc/{pid}")).exists()
        });
        if !gone {
            return err(format!("containerd {pid} still alive after {signal}"));
        }
        Ok(())
    }

    /// The last `lines` lines of containerd's log (for assertion messages).
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.dir().join("containerd.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Whether containerd's log contains `needle`.
    pub fn log_contains(&self, needle: &str) -> bool {
        fs::read_to_string(self.dir().join("containerd.log"))
            .map(|t| t.contains(needle))
            .unwrap_or(false)
    }

    /// CRI client bound to this instance.
    pub fn cri(&self) -> Cri {
        Cri {
            bin: self.crictl.clone(),
            config: PathBuf::from(self.env.get("CRI_CONFIG_FILE").cloned().unwrap_or_default()),
            endpoint: self
                .env
                .get("CONTAINER_RUNTIME_ENDPOINT")
                .cloned()
                .unwrap_or_default(),
        }
    }

    fn config_file(&self, kind: &str, value: &Value) -> HResult<PathBuf> {
        let dir = self.dir().join("configs");
        fs::create_dir_all(&dir)
            .map_err(|e| HarnessError(format!("mkdir {}: {e}", dir.display())))?;
        let n = self.configs.fetch_add(1, Ordering::SeqCst);
        let path = dir.join(format!("{kind}-{n}.json"));
        let text = serde_json::to_string_pretty(value).map_err(|e| HarnessError(e.to_string()))?;
        fs::write(&path, text)
            .map_err(|e| HarnessError(format!("write {}: {e}", path.display())))?;
        Ok(path)
    }

    /// Runs a pod sandbox (host network) from `spec`.
    pub fn run_pod(&self, spec: &PodSpec) -> HResult<Pod> {
        let parent = self.env.get("CGROUP_PARENT").cloned().unwrap_or_default();
        let logs = self.dir().join("logs").join(&spec.name);
        fs::create_dir_all(&logs)
            .map_err(|e| HarnessError(format!("mkdir {}: {e}", logs.display())))?;
        let config = spec.to_json(&parent, &logs);
        let path = self.config_file("pod", &config)?;
        let id = self.cri().ok(&["runp", &path.to_string_lossy()])?;
        Ok(Pod {
            id,
            config_path: path,
            name: spec.name.clone(),
        })
    }

    /// Creates a container in `pod`; `Err` carries the runtime's message (a plugin rejection).
    pub fn create(&self, pod: &Pod, spec: &ContainerSpec) -> HResult<String> {
        let image = self.env.get("TEST_IMAGE").cloned().unwrap_or_default();
        let path = self.config_file("container", &spec.to_json(&image))?;
        self.cri().ok(&[
            "create",
            &pod.id,
            &path.to_string_lossy(),
            &pod.config_path.to_string_lossy(),
        ])
    }

    /// Creates and starts a container; returns its ID.
    pub fn run_container(&self, pod: &Pod, spec: &ContainerSpec) -> HResult<String> {
        let id = self.create(pod, spec)?;
        self.cri().ok(&["start", &id])?;
        Ok(id)
    }

    /// Starts `nri-align run --socket <this instance's NRI socket> ARGS...` (or another plugin
    /// binary) as an external plugin; its output goes to a log file in the instance directory.
    pub fn start_external_plugin(&self, bin: &Path, args: &[&str]) -> HResult<PluginProcess> {
        let n = self.configs.fetch_add(1, Ordering::SeqCst);
        let log = self.dir().join(format!("plugin-{n}.log"));
        let file = fs::File::create(&log)
            .map_err(|e| HarnessError(format!("create {}: {e}", log.display())))?;
        let file2 = file.try_clone().map_err(|e| HarnessError(e.to_string()))?;
        let child = Command::new(bin)
            .arg("run")
            .arg("--socket")
            .arg(self.nri_socket())
            .args(args)
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(file2)
            .spawn()
            .map_err(|e| HarnessError(format!("start {}: {e}", bin.display())))?;
        Ok(PluginProcess { child, log })
    }

    /// Installs a pre-launched plugin: `bin` is linked into plugin_path as `IDX-NAME` and
    /// `config` (if any) written to plugin_config_path as `IDX-NAME.conf`. containerd launches
    /// such plugins when it starts, so call [`Containerd::kill`] + [`Containerd::start`] (or
    /// install before the first start of a fresh instance) for it to take effect.
    pub fn install_prelaunched_plugin(
        &self,
        idx: &str,
        name: &str,
        bin: &Path,
        config: Option<&str>,
    ) -> HResult<PathBuf> {
        if idx.len() != 2 || !idx.bytes().all(|b| b.is_ascii_digit()) {
            return err(format!("plugin index {idx:?} must be two digits"));
        }
        let target = self.plugin_path().join(format!("{idx}-{name}"));
        let _ = fs::remove_file(&target);
        std::os::unix::fs::symlink(bin, &target).map_err(|e| {
            HarnessError(format!(
                "link {} -> {}: {e}",
                target.display(),
                bin.display()
            ))
        })?;
        if let Some(cfg) = config {
            let conf = self.plugin_config_path().join(format!("{idx}-{name}.conf"));
            fs::write(&conf, cfg)
                .map_err(|e| HarnessError(format!("write {}: {e}", conf.display())))?;
        }
        Ok(target)
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if std::env::var_os("NRI_ALIGN_KEEP").is_some_and(|v| v == "1") {
            eprintln!(
                "keeping containerd instance {}-{} (NRI_ALIGN_KEEP=1)",
                self.flavor.name(),
                self.name
            );
            return;
        }
        let out = Command::new(repo_root().join("hack/containerd-down"))
            .args([self.flavor.name(), &self.name])
            .env("CRICTL", &self.crictl)
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "containerd-down {} {} failed: {}",
                self.flavor.name(),
                self.name,
                describe(&o)
            ),
            Err(e) => eprintln!("containerd-down {} {}: {e}", self.flavor.name(), self.name),
        }
    }
}

/// An NRI plugin process started by the harness; killed (by PID) on drop.
pub struct PluginProcess {
    child: Child,
    /// Its combined stdout/stderr.
    pub log: PathBuf,
}

impl PluginProcess {
    /// PID of the plugin.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The plugin's output so far.
    pub fn output(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// Waits until the plugin's output contains `needle`.
    pub fn wait_for_output(&self, needle: &str, timeout: Duration) -> bool {
        wait_until(timeout, || self.output().contains(needle))
    }

    /// `Some(status)` once the plugin has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends `signal` and reaps the process.
    pub fn stop(&mut self, signal: nix::sys::signal::Signal) {
        if self.exited().is_some() {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
        if !wait_until(Duration::from_secs(5), || {
            self.child.try_wait().ok().flatten().is_some()
        }) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        self.stop(nix::sys::signal::Signal::SIGTERM);
    }
}

/// Output of a command run in a container.
#[derive(Debug, Clone)]
pub struct ExecResult {
    /// The command's exit code.
    pub code: i32,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

/// The CRI client bound to one instance.
#[derive(Debug, Clone)]
pub struct Cri {
    bin: PathBuf,
    config: PathBuf,
    endpoint: String,
}

impl Cri {
    /// Runs the client with `args`; returns the raw output whatever the exit status.
    pub fn run(&self, args: &[&str]) -> HResult<Output> {
        run_cmd(
            Command::new(&self.bin)
                .arg("--config")
                .arg(&self.config)
                .arg("--runtime-endpoint")
                .arg(&self.endpoint)
                .args(args)
                .env_remove("CONTAINER_RUNTIME_ENDPOINT")
                .env_remove("CRI_CONFIG_FILE"),
            &format!("{} {}", self.bin.display(), args.join(" ")),
        )
    }

    /// Runs the client and returns trimmed stdout; a failure carries stdout and stderr.
    pub fn ok(&self, args: &[&str]) -> HResult<String> {
        let out = self.run(args)?;
        if !out.status.success() {
            return err(format!(
                "crictl {} failed: {}",
                args.join(" "),
                describe(&out)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Runs `cmd` in container `id` (exec -s); a non-zero exit is not an error.
    pub fn exec(&self, id: &str, cmd: &[&str]) -> HResult<ExecResult> {
        let mut args = vec!["exec", "-s", id];
        args.extend_from_slice(cmd);
        let out = self.run(&args)?;
        Ok(ExecResult {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// `/proc/self/status` of a fresh process in the container.
    pub fn proc_status(&self, id: &str) -> HResult<String> {
        let r = self.exec(id, &["cat", "/proc/self/status"])?;
        if r.code != 0 {
            return err(format!(
                "cat /proc/self/status in {id}: exit {} {}",
                r.code, r.stderr
            ));
        }
        Ok(r.stdout)
    }

    /// The container's environment (as `env` prints it).
    pub fn env(&self, id: &str) -> HResult<BTreeMap<String, String>> {
        let r = self.exec(id, &["env"])?;
        if r.code != 0 {
            return err(format!("env in {id}: exit {} {}", r.code, r.stderr));
        }
        Ok(parse_env_file(&r.stdout))
    }

    /// `inspect` JSON (status + info, with info.runtimeSpec).
    pub fn inspect(&self, id: &str) -> HResult<Value> {
        let text = self.ok(&["inspect", id])?;
        serde_json::from_str(&text)
            .map_err(|e| HarnessError(format!("inspect {id}: bad JSON: {e}")))
    }

    /// `inspectp` JSON.
    pub fn inspectp(&self, id: &str) -> HResult<Value> {
        let text = self.ok(&["inspectp", id])?;
        serde_json::from_str(&text)
            .map_err(|e| HarnessError(format!("inspectp {id}: bad JSON: {e}")))
    }

    /// IDs of all containers (any state).
    pub fn containers(&self) -> HResult<Vec<String>> {
        Ok(self
            .ok(&["ps", "-a", "-q"])?
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// IDs of all pods.
    pub fn pods(&self) -> HResult<Vec<String>> {
        Ok(self
            .ok(&["pods", "-q"])?
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// Stops and removes a pod with its containers.
    pub fn remove_pod(&self, pod: &Pod) -> HResult<()> {
        self.ok(&["stopp", &pod.id])?;
        self.ok(&["rmp", &pod.id])?;
        Ok(())
    }
}

/// A running pod sandbox.
#[derive(Debug, Clone)]
pub struct Pod {
    /// Sandbox ID.
    pub id: String,
    /// Its config file (needed again by `create`).
    pub config_path: PathBuf,
    /// Pod name.
    pub name: String,
}

/// What goes into a pod config (host network always: this machine has no CNI).
#[derive(Debug, Clone, Default)]
pub struct PodSpec {
    /// metadata.name (also used for uid when `uid` is empty).
    pub name: String,
    /// metadata.namespace (default "default").
    pub namespace: String,
    /// metadata.uid.
    pub uid: String,
    /// Pod annotations.
    pub annotations: BTreeMap<String, String>,
    /// Pod labels.
    pub labels: BTreeMap<String, String>,
    /// linux.resources (pod-level, the sum kubelet would send).
    pub resources: Option<Value>,
}

impl PodSpec {
    /// A pod named `name` in namespace "default".
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            namespace: "default".into(),
            ..Default::default()
        }
    }

    /// Adds an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// Sets the namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = ns.into();
        self
    }

    /// crictl's JSON for this pod under `cgroup_parent`, logging into `log_dir`.
    pub fn to_json(&self, cgroup_parent: &str, log_dir: &Path) -> Value {
        let uid = if self.uid.is_empty() {
            format!("uid-{}", self.name)
        } else {
            self.uid.clone()
        };
        let mut linux = json!({
            "cgroup_parent": cgroup_parent,
            // NamespaceMode NODE = 2: host network, no CNI needed.
            "security_context": {"namespace_options": {"network": 2}}
        });
        if let Some(r) = &self.resources {
            linux["resources"] = r.clone();
        }
        json!({
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": uid, "attempt": 0},
            "log_directory": log_dir,
            "annotations": self.annotations,
            "labels": self.labels,
            "linux": linux
        })
    }
}

/// What goes into a container config.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    /// metadata.name.
    pub name: String,
    /// Image (default: the instance's TEST_IMAGE).
    pub image: Option<String>,
    /// command (default: sleep for an hour).
    pub command: Vec<String>,
    /// Environment.
    pub envs: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// linux.resources fields (cpuset_cpus, cpu_quota, memory_limit_in_bytes...).
    pub resources: serde_json::Map<String, Value>,
    /// Devices: (container_path, host_path, permissions).
    pub devices: Vec<(String, String, String)>,
}

impl ContainerSpec {
    /// A container named `name` that sleeps.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            ..Default::default()
        }
    }

    /// Command to run instead of the default sleep.
    pub fn command(mut self, cmd: &[&str]) -> Self {
        self.command = cmd.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.envs.insert(k.into(), v.into());
        self
    }

    /// Adds an annotation.
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.annotations.insert(k.into(), v.into());
        self
    }

    /// Sets one linux.resources field (proto name, e.g. "cpuset_cpus", "cpu_quota").
    pub fn resource(mut self, field: &str, value: Value) -> Self {
        self.resources.insert(field.into(), value);
        self
    }

    /// Explicit cpuset.
    pub fn cpuset(self, cpus: &str) -> Self {
        self.resource("cpuset_cpus", json!(cpus))
    }

    /// Kubelet-style CPU request/limit in millicores: shares, and a CFS quota over 100 ms.
    pub fn cpu_millis(self, request: i64, limit: Option<i64>) -> Self {
        let s = self.resource("cpu_shares", json!((request * 1024 / 1000).max(2)));
        match limit {
            Some(l) => s
                .resource("cpu_period", json!(100_000))
                .resource("cpu_quota", json!(l * 100)),
            None => s,
        }
    }

    /// Memory limit in bytes.
    pub fn memory(self, bytes: i64) -> Self {
        self.resource("memory_limit_in_bytes", json!(bytes))
    }

    /// Adds a device.
    pub fn device(mut self, container_path: &str, host_path: &str, perms: &str) -> Self {
        self.devices
            .push((container_path.into(), host_path.into(), perms.into()));
        self
    }

    /// crictl's JSON for this container (`default_image` when none was set).
    pub fn to_json(&self, default_image: &str) -> Value {
        let command: Vec<String> = if self.command.is_empty() {
            vec!["/bin/sleep".into(), "3600".into()]
        } else {
            self.command.clone()
        };
        let envs: Vec<Value> = self
            .envs
            .iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect();
        let devices: Vec<Value> = self
            .devices
            .iter()
            .map(|(c, h, p)| json!({"container_path": c, "host_path": h, "permissions": p}))
            .collect();
        json!({
            "metadata": {"name": self.name, "attempt": 0},
            "image": {"image": self.image.clone().unwrap_or_else(|| default_image.to_string())},
            "command": command,
            "envs": envs,
            "devices": devices,
            "annotations": self.annotations,
            "labels": self.labels,
            "log_path": format!("{}.log", self.name),
            "linux": {"resources": Value::Object(self.resources.clone())}
        })
    }
}

/// Parses `KEY=VALUE` lines (env files, `env` output); other lines are skipped.
pub fn parse_env_file(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| !k.is_empty() && !k.contains(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Value of one `Key:\tvalue` line of a /proc status file.
pub fn status_field(status: &str, key: &str) -> Option<String> {
    status.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == key).then(|| v.trim().to_string())
    })
}

/// Polls `cond` every 100 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// CPUs this test process may run on (what a container without a cpuset inherits).
pub fn host_cpus() -> String {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status_field(&status, "Cpus_allowed_list").unwrap_or_default()
}
