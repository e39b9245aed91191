//! Integration-test harness: private runtime instances (containerd from hack/containerd-up,
//! CRI-O from hack/crio-up, see [`Runtime`]), the CRI client (`$CRICTL` or the project's
//! `nri-align-crictl`), pod / container configs in crictl's JSON format, exec in containers,
//! and hooks to run nri-align as an NRI plugin.
//!
//! Every test uses its own instance name, so tests running in parallel never share a runtime;
//! an instance is torn down (hack/containerd-down, hack/crio-down) when its [`Instance`] drops,
//! also when the test panics. Set `NRI_ALIGN_KEEP=1` to keep instances for post-mortems.

pub mod align;
pub mod cpuset_plugin;
mod cri;
pub mod daemonset;
pub mod host;
pub mod kubelet;
mod plugin;
pub mod procs;
mod runtime;
pub mod soak;
mod spec;
pub mod suite;

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use align::{
    container_devices, container_of_cgroup, cpuset_dir, log_events, metric, probe, scan_cgroup,
    scrape, wait_probe, write_private, AlignRun, Live, Seen,
};
pub use cri::{Cri, ExecResult, Pod};
pub use host::{format_list, parse_list, recorded_ids, EmulatedHost, FakeGpu, RealMachine};
pub use plugin::PluginProcess;
pub use runtime::{skip_unless_ready, Runtime};
pub use spec::{ContainerSpec, PodSpec};

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

pub use crate::{nri_align_bin, repo_root};

/// Returns `true` (after printing why) when the e2e tests may not run here: they need root to
/// start a runtime. Without root a test fails, since a skipped end-to-end test would pass
/// while asserting nothing; `NRI_ALIGN_E2E=skip` turns that into an explicit, printed skip
/// (for a developer's unprivileged `cargo test`). Use as
/// `if common::skip_unless_root("name") { return; }`.
pub fn skip_unless_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return false;
    }
    let uid = nix::unistd::geteuid();
    if std::env::var("NRI_ALIGN_E2E").as_deref() == Ok("skip") {
        crate::skip::skip(
            test,
            &format!("needs root to run a container runtime (uid {uid}); NRI_ALIGN_E2E=skip"),
        );
        return true;
    }
    panic!(
        "{test} needs root to run a container runtime (uid {uid}); run as root, or set NRI_ALIGN_E2E=skip \
         to skip the end-to-end tests knowingly"
    );
}

/// The containerd builds the harness provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// containerd 1.7.x from Debian trixie: NRI v0.6.1, config version 2.
    Trixie,
    /// containerd 2.1.x from Debian sid: NRI v0.8, config version 3.
    Sid,
    /// containerd 2.3.x built from source (no registry has it; located like CRI-O: hack/lib.sh
    /// `containerd_locate`): NRI v0.12, config version 3, the first to send a container's CRI
    /// `CDI_devices` names to plugins.
    V2_3,
}

impl Flavor {
    /// Every flavor, oldest first.
    pub const ALL: [Flavor; 3] = [Flavor::Trixie, Flavor::Sid, Flavor::V2_3];

    /// Name the hack scripts take.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Trixie => "trixie",
            Flavor::Sid => "sid",
            Flavor::V2_3 => "v2.3",
        }
    }
}

/// The CRI client: `$CRICTL` if set, else `nri-align-crictl` next to `nri-align` in the target
/// directory. `cargo test` of the root package does not build other packages' binaries, so a
/// missing client is built once per test process with `cargo build -p cri-client` (cargo does
/// not hold its build lock while tests run).
pub fn crictl_bin() -> HResult<PathBuf> {
    if let Some(c) = std::env::var_os("CRICTL").filter(|c| !c.is_empty()) {
        return Ok(PathBuf::from(c));
    }
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(build_crictl)
        .clone()
        .map_err(HarnessError)
}

fn build_crictl() -> Result<PathBuf, String> {
    let bin = nri_align_bin();
    let dir = bin.parent().map(Path::to_path_buf).unwrap_or_default();
    let candidate = dir.join("nri-align-crictl");
    if candidate.is_file() {
        return Ok(candidate);
    }
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "cri-client", "--bin", "nri-align-crictl"])
        .current_dir(repo_root());
    if dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cargo build -p cri-client: {e}"))?;
    if !out.status.success() || !candidate.is_file() {
        return Err(format!(
            "no CRI client at {} and `cargo build -p cri-client` did not make one (set CRICTL?): {}",
            candidate.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(candidate)
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

/// Knobs for [`Instance::up_with`].
#[derive(Debug, Clone, Default)]
pub struct UpOptions {
    /// NRI plugin registration timeout (runtime default 5s).
    pub registration_timeout: Option<String>,
    /// NRI plugin request timeout (runtime default 2s).
    pub request_timeout: Option<String>,
    /// The runtime's log level (default info).
    pub log_level: Option<String>,
    /// Resolve CDI devices from the instance's `cdi/` dir (containerd's `enable_cdi`; CRI-O
    /// always does).
    pub cdi: bool,
    /// Have containerd write the containers' hugepage limits into their specs (and so pass
    /// them to NRI): its CRI plugin's `disable_hugetlb_controller = false`. containerd's default
    /// (true) leaves them out; CRI-O always passes them.
    pub hugetlb: bool,
    /// NRI's default validator with these required plugins (CRI-O 1.34+, containerd 2.2+;
    /// `Some(vec![])` turns it on with only the pods' own `required-plugins` annotations).
    pub required_plugins: Option<Vec<String>>,
    /// The annotation that lets a pod start without the required plugins.
    pub tolerate_missing_annotation: Option<String>,
    /// OCI archives to import as images, each under its reference: CRI-O's before its daemon
    /// starts (hack/crio-up's CRIO_EXTRA_IMAGES), containerd's with `ctr images import` once
    /// it runs.
    pub images: Vec<(PathBuf, String)>,
}

/// The name [`Instance`] had while containerd was the only runtime; code written before
/// CRI-O joined compiles unchanged (`Containerd::fresh(Flavor::Sid, ..)`).
pub type Containerd = Instance;

/// One private runtime instance (hack/containerd-up FLAVOR NAME, hack/crio-up NAME).
pub struct Instance {
    /// Which runtime.
    pub runtime: Runtime,
    /// Instance name (unique per test).
    pub name: String,
    /// The instance's env file (CONTAINER_RUNTIME_ENDPOINT, NRI_SOCKET, RUNTIME_DIR...).
    pub env: BTreeMap<String, String>,
    options: UpOptions,
    crictl: PathBuf,
    configs: AtomicUsize,
}

impl Instance {
    /// Starts (or reuses) the instance with default options. Prefer [`Instance::fresh`] in
    /// tests so no state of an earlier run leaks in.
    pub fn up(runtime: impl Into<Runtime>, name: &str) -> HResult<Self> {
        Self::up_with(runtime, name, UpOptions::default())
    }

    /// Tears down whatever an earlier run left under this name, then starts the instance.
    pub fn fresh(runtime: impl Into<Runtime>, name: &str) -> HResult<Self> {
        Self::fresh_with(runtime, name, UpOptions::default())
    }

    /// [`Instance::fresh`] with options.
    pub fn fresh_with(
        runtime: impl Into<Runtime>,
        name: &str,
        options: UpOptions,
    ) -> HResult<Self> {
        let runtime = runtime.into();
        let crictl = crictl_bin()?;
        let out = run_cmd(
            runtime.down_command(name).env("CRICTL", &crictl),
            "hack/*-down",
        )?;
        if !out.status.success() {
            return err(format!(
                "teardown of {} {name} failed: {}",
                runtime.name(),
                describe(&out)
            ));
        }
        Self::up_with(runtime, name, options)
    }

    /// Starts (or reuses) the instance.
    pub fn up_with(runtime: impl Into<Runtime>, name: &str, options: UpOptions) -> HResult<Self> {
        let crictl = crictl_bin()?;
        let mut me = Self {
            runtime: runtime.into(),
            name: name.to_string(),
            env: BTreeMap::new(),
            options,
            crictl,
            configs: AtomicUsize::new(0),
        };
        me.start()?;
        Ok(me)
    }

    /// (Re)runs hack/containerd-up or hack/crio-up: starts the daemon if it is not running
    /// (on its existing state) and waits for CRI. Used after [`Instance::kill`] to bring the
    /// runtime back.
    pub fn start(&mut self) -> HResult<()> {
        self.env = self.run_up()?;
        if matches!(self.runtime, Runtime::Containerd(_)) {
            self.import_images()?;
        }
        Ok(())
    }

    /// Stops the daemon with SIGTERM (containers and shims keep running) and brings it back on
    /// its state, as `systemctl restart containerd` does; for an instance shared by reference.
    /// The instance's paths do not change, so its env stays as it is.
    pub fn restart(&self) -> HResult<()> {
        self.kill(nix::sys::signal::Signal::SIGTERM)?;
        self.run_up().map(|_| ())
    }

    /// Runs the up script with this instance's options; returns its env file.
    fn run_up(&self) -> HResult<BTreeMap<String, String>> {
        let mut cmd = self.runtime.up_command(&self.name);
        cmd.env("CRICTL", &self.crictl);
        if let Some(t) = &self.options.registration_timeout {
            cmd.env("NRI_PLUGIN_REGISTRATION_TIMEOUT", t);
        }
        if let Some(t) = &self.options.request_timeout {
            cmd.env("NRI_PLUGIN_REQUEST_TIMEOUT", t);
        }
        if let Some(l) = &self.options.log_level {
            cmd.env("CONTAINERD_LOG_LEVEL", l).env("CRIO_LOG_LEVEL", l);
        }
        if let Some(names) = &self.options.required_plugins {
            cmd.env("NRI_REQUIRED_PLUGINS", names.join(","));
        }
        if let Some(key) = &self.options.tolerate_missing_annotation {
            cmd.env("NRI_TOLERATE_MISSING_ANNOTATION", key);
        }
        if self.options.cdi {
            cmd.env("CONTAINERD_ENABLE_CDI", "true");
        }
        if self.options.hugetlb {
            cmd.env("CONTAINERD_DISABLE_HUGETLB_CONTROLLER", "false");
        }
        if self.runtime == Runtime::Crio && !self.options.images.is_empty() {
            let pairs: Vec<String> = self
                .options
                .images
                .iter()
                .map(|(archive, reference)| format!("{}={reference}", archive.display()))
                .collect();
            cmd.env("CRIO_EXTRA_IMAGES", pairs.join(" "));
        }
        let out = run_cmd(&mut cmd, "hack/*-up")?;
        if !out.status.success() {
            return err(format!(
                "bringing up {} {} failed: {}",
                self.runtime.name(),
                self.name,
                describe(&out)
            ));
        }
        let env_file = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let text = fs::read_to_string(&env_file)
            .map_err(|e| HarnessError(format!("read env file {env_file:?}: {e}")))?;
        Ok(parse_env_file(&text))
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

    /// Directory the runtime launches pre-installed NRI plugins from (at start-up).
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
        PathBuf::from(self.env.get("RUNTIME_DIR").cloned().unwrap_or_default())
    }

    /// The cgroup driver runc uses in this instance: "cgroupfs" or "systemd"
    /// (hack/containerd-up's CONTAINERD_CGROUP_DRIVER, hack/crio-up's CGROUP_MANAGER).
    pub fn cgroup_driver(&self) -> &str {
        self.env
            .get("CGROUP_DRIVER")
            .map(String::as_str)
            .unwrap_or("cgroupfs")
    }

    /// The runtime's version string (e.g. "1.7.24~ds1", "2.1.9+unknown", "1.34.11").
    pub fn version(&self) -> &str {
        self.env
            .get("RUNTIME_VERSION")
            .map(String::as_str)
            .unwrap_or("")
    }

    /// PID of the running daemon.
    pub fn pid(&self) -> HResult<i32> {
        let path = PathBuf::from(self.var("RUNTIME_PIDFILE")?);
        let raw = fs::read_to_string(&path)
            .map_err(|e| HarnessError(format!("read {}: {e}", path.display())))?;
        raw.trim()
            .parse()
            .map_err(|e| HarnessError(format!("bad pid in {}: {e}", path.display())))
    }

    /// Kills the daemon (containers and shims keep running, as after a crash) and waits for it
    /// to be gone. Bring it back with [`Instance::start`].
    pub fn kill(&self, signal: nix::sys::signal::Signal) -> HResult<()> {
        let pid = nix::unistd::Pid::from_raw(self.pid()?);
        nix::sys::signal::kill(pid, signal)
            .map_err(|e| HarnessError(format!("kill {pid}: {e}")))?;
        let gone = wait_until(Duration::from_secs(15), || {
            !Path::new(&format!("/proc/{pid}")).exists()
        });
        if !gone {
            return err(format!(
                "{} {pid} still alive after {signal}",
                self.runtime.name()
            ));
        }
        Ok(())
    }

    /// The runtime's log file.
    pub fn log_path(&self) -> PathBuf {
        PathBuf::from(self.env.get("RUNTIME_LOG").cloned().unwrap_or_default())
    }

    /// The last `lines` lines of the runtime's log (for assertion messages).
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Whether the runtime's log contains `needle`.
    pub fn log_contains(&self, needle: &str) -> bool {
        fs::read_to_string(self.log_path())
            .map(|t| t.contains(needle))
            .unwrap_or(false)
    }

    /// The instance's CRI socket (its `CONTAINER_RUNTIME_ENDPOINT` without `unix://`).
    pub fn cri_socket(&self) -> PathBuf {
        let endpoint = self
            .env
            .get("CONTAINER_RUNTIME_ENDPOINT")
            .cloned()
            .unwrap_or_default();
        PathBuf::from(endpoint.strip_prefix("unix://").unwrap_or(&endpoint))
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
        let parent = spec
            .cgroup_parent
            .clone()
            .unwrap_or_else(|| self.env.get("CGROUP_PARENT").cloned().unwrap_or_default());
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
            namespace: spec.namespace.clone(),
            uid: spec.metadata_uid(),
        })
    }

    /// Creates a container in `pod`; `Err` carries the runtime's message (a plugin rejection).
    pub fn create(&self, pod: &Pod, spec: &ContainerSpec) -> HResult<String> {
        let image = self.env.get("TEST_IMAGE").cloned().unwrap_or_default();
        let path = self.config_file("container", &spec.to_json(&image, pod))?;
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
        self.spawn_plugin(bin, args, &[])
    }

    fn spawn_plugin(
        &self,
        bin: &Path,
        args: &[&str],
        envs: &[(String, String)],
    ) -> HResult<PluginProcess> {
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
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(file2)
            .spawn()
            .map_err(|e| HarnessError(format!("start {}: {e}", bin.display())))?;
        Ok(PluginProcess { child, log })
    }

    /// Installs a pre-launched plugin: `bin` is linked into plugin_path as `IDX-NAME` and
    /// `config` (if any) written to plugin_config_path as `IDX-NAME.conf`. The runtime launches
    /// such plugins when it starts, so call [`Instance::kill`] + [`Instance::start`] (or
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

impl Drop for Instance {
    fn drop(&mut self) {
        let rt = self.runtime.name();
        if std::env::var_os("NRI_ALIGN_KEEP").is_some_and(|v| v == "1") {
            eprintln!("keeping {rt} instance {} (NRI_ALIGN_KEEP=1)", self.name);
            return;
        }
        let out = self
            .runtime
            .down_command(&self.name)
            .env("CRICTL", &self.crictl)
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!("teardown of {rt} {} failed: {}", self.name, describe(&o)),
            Err(e) => eprintln!("teardown of {rt} {}: {e}", self.name),
        }
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
