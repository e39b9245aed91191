//! The guest side of the multi-NUMA suite: one runtime (containerd, or CRI-O with
//! `NRI_ALIGN_VM_RUNTIME=crio`) with nri-align for the whole test binary, the guest's topology read straight from its sysfs (never from nri-align), and what a
//! container shows of itself (`/proc/self/status`, `env`, `ls /dev`) and of its cgroup. Pods
//! sit where the kubelet puts them, for whichever cgroup driver the guest's containerd uses
//! (the systemd guest: runc's systemd driver, pods in `kubepods-*.slice`). In the systemd guest
//! (`NRI_ALIGN_VM_PLUGIN=unit`) nri-align is the shipped systemd unit, started before the
//! runtime (crate::unit); elsewhere a process the harness starts.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::kubepods::{container_cgroup, pod_cgroup_parent, pod_uid, Qos};
use crate::unit::{self, Daemon};
use test_support::e2e::{
    nri_align_bin, parse_env_file, status_field, wait_until, ContainerSpec, Flavor, Instance, Pod,
    PodSpec, Runtime,
};

/// Set (to 1) by hack/vm/guest-run: the tests only run inside the QEMU guest.
pub const GUEST_ENV: &str = "NRI_ALIGN_VM_GUEST";

/// Node configuration of nri-align in the guest: NIC counts come from pod annotations. GPUs stay
/// the ones the "device plugin" (the test) allocated: nri-align keeps GPUs that arrive as device
/// nodes, since runtimes drop the removal of a spec's device (containerd/nri#216). CDI specs
/// come from `crate::cdi::CDI_DIR`.
pub const PLUGIN_CONFIG: &str =
    "allow_device_annotations: true\ncdi_spec_dirs: [/run/nri-align/cdi]\n";

/// A set of CPU or node ids.
pub type Ids = BTreeSet<u32>;

/// Parses a Linux list (`0-1,4`); panics with the text on anything else.
pub fn ids(list: &str) -> Ids {
    let mut out = Ids::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = match (a.trim().parse(), b.trim().parse()) {
            (Ok(a), Ok(b)) => (a, b),
            _ => panic!("not a Linux id list: {list:?}"),
        };
        out.extend(a..=b);
    }
    out
}

/// Formats ids as a Linux list, for messages.
pub fn list(set: &Ids) -> String {
    let v: Vec<u32> = set.iter().copied().collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(",")
}

fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .trim()
        .to_string()
}

/// The guest's shape as its kernel sees it.
#[derive(Debug, Clone)]
pub struct Facts {
    /// CPUs of each node that has any.
    pub node_cpus: BTreeMap<u32, Ids>,
    /// Nodes without CPUs (memory-only).
    pub memory_only: Ids,
    /// `distance` of every node, by node.
    pub distance: BTreeMap<u32, Vec<u32>>,
    /// NUMA node of each GPU stand-in, by `/dev/nvidiaN` minor.
    pub gpu_node: BTreeMap<u32, u32>,
    /// UUID of each GPU, by minor (what NVIDIA_VISIBLE_DEVICES carries).
    pub gpu_uuid: BTreeMap<u32, String>,
    /// NUMA node of each network interface with a PCI device.
    pub nic_node: BTreeMap<String, u32>,
}

impl Facts {
    /// Reads `/sys`; GPU minors and UUIDs come from the NVML fixture (the driver's view), their
    /// node from the stand-in's PCI function.
    pub fn read(fixture: &Path) -> Facts {
        let mut f = Facts {
            node_cpus: BTreeMap::new(),
            memory_only: Ids::new(),
            distance: BTreeMap::new(),
            gpu_node: BTreeMap::new(),
            gpu_uuid: BTreeMap::new(),
            nic_node: BTreeMap::new(),
        };
        let nodes = ids(&read("/sys/devices/system/node/online"));
        for n in nodes {
            let dir = PathBuf::from(format!("/sys/devices/system/node/node{n}"));
            let cpus = ids(&read(dir.join("cpulist")));
            if cpus.is_empty() {
                f.memory_only.insert(n);
            } else {
                f.node_cpus.insert(n, cpus);
            }
            let d = read(dir.join("distance"))
                .split_whitespace()
                .map(|x| x.parse().expect("distance"))
                .collect();
            f.distance.insert(n, d);
        }
        let fx: serde_json::Value =
            serde_json::from_str(&read(fixture)).expect("NVML fixture is JSON");
        for g in fx["gpus"].as_array().expect("fixture gpus") {
            let minor = g["minor"].as_u64().expect("minor") as u32;
            // NVML form 00000000:23:00.0 -> sysfs form 0000:23:00.0.
            let bus = g["pci_bus_id"]
                .as_str()
                .expect("bus id")
                .to_ascii_lowercase();
            let bus = bus.get(4..).expect("bus id");
            let node = read(format!("/sys/bus/pci/devices/{bus}/numa_node"));
            f.gpu_node.insert(minor, node.parse().expect("numa_node"));
            f.gpu_uuid
                .insert(minor, g["uuid"].as_str().expect("uuid").to_string());
        }
        for e in std::fs::read_dir("/sys/class/net").expect("/sys/class/net") {
            let e = e.expect("entry");
            let numa = e.path().join("device/numa_node");
            if numa.exists() {
                let name = e.file_name().to_string_lossy().into_owned();
                f.nic_node
                    .insert(name, read(numa).parse().expect("numa_node"));
            }
        }
        f
    }

    /// The nodes whose CPUs intersect `cpus`.
    pub fn nodes_of(&self, cpus: &Ids) -> Ids {
        self.node_cpus
            .iter()
            .filter(|(_, c)| !c.is_disjoint(cpus))
            .map(|(n, _)| *n)
            .collect()
    }

    /// Distance between two nodes.
    pub fn dist(&self, a: u32, b: u32) -> u32 {
        self.distance[&a][b as usize]
    }

    /// The smallest distance between two different nodes with CPUs.
    pub fn closest_pair_distance(&self) -> u32 {
        let nodes: Vec<u32> = self.node_cpus.keys().copied().collect();
        let mut best = u32::MAX;
        for &a in &nodes {
            for &b in nodes.iter().filter(|b| **b != a) {
                best = best.min(self.dist(a, b));
            }
        }
        best
    }
}

/// The runtime + nri-align in the guest, shared by every test of the binary.
pub struct Guest {
    /// The runtime instance (containerd or CRI-O).
    pub ctrd: Instance,
    /// nri-align, dialled into the instance's NRI socket.
    pub plugin: Daemon,
    /// The guest's topology.
    pub facts: Facts,
    /// runc uses the systemd cgroup driver (the systemd guest).
    pub systemd: bool,
    state_dir: PathBuf,
}

static GUEST: OnceLock<Result<Guest, String>> = OnceLock::new();

/// The shared guest, started on first use; `None` (after saying so) outside the QEMU guest.
pub fn guest(test: &str) -> Option<&'static Guest> {
    if std::env::var(GUEST_ENV).as_deref() != Ok("1") {
        // Once per run, where the run's output shows it (libtest hides a passing test's
        // `eprintln!`): hack/test lists this skip of the host run as expected, since the same
        // tests run in the QEMU guests beside it. Never a failure, even where skips are
        // forbidden: this binary is only built to be run in a guest.
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            let _ = writeln!(
                std::io::stderr(),
                "SKIP vm_numa ({test} and the rest): runs inside the QEMU guest only (hack/vm-e2e)"
            );
        });
        return None;
    }
    match GUEST.get_or_init(start) {
        Ok(g) => {
            g.reset();
            Some(g)
        }
        Err(e) => panic!("guest set-up failed: {e}"),
    }
}

fn start() -> Result<Guest, String> {
    let fixture = std::env::var("FAKE_NVML_FIXTURE").map_err(|_| "FAKE_NVML_FIXTURE unset")?;
    let lib = std::env::var("NRI_ALIGN_FAKE_NVML").map_err(|_| "NRI_ALIGN_FAKE_NVML unset")?;
    let flavor = match std::env::var("NRI_ALIGN_VM_FLAVOR").as_deref() {
        Ok("trixie") => Flavor::Trixie,
        _ => Flavor::Sid,
    };
    let runtime = match std::env::var("NRI_ALIGN_VM_RUNTIME").as_deref() {
        Ok("crio") => Runtime::Crio,
        _ => Runtime::Containerd(flavor),
    };
    eprintln!("runtime: {}", runtime.name());
    let facts = Facts::read(Path::new(&fixture));
    // Before nri-align reads the topology: it reads each node's pools once.
    crate::hugepages::reserve();
    if std::env::var("NRI_ALIGN_VM_PLUGIN").as_deref() == Ok("unit") {
        return start_unit(runtime, facts, &fixture, &lib);
    }
    let ctrd = Instance::fresh_with(runtime, "vm", crate::cdi::runtime_options())
        .map_err(|e| e.to_string())?;
    let state_dir = ctrd.dir().join("nri-align-state");
    let config = ctrd.dir().join("nri-align.yaml");
    std::fs::write(&config, PLUGIN_CONFIG).map_err(|e| format!("write config: {e}"))?;
    let plugin = ctrd
        .start_external_plugin(
            &nri_align_bin(),
            &[
                "--state-dir",
                &state_dir.to_string_lossy(),
                "--config",
                &config.to_string_lossy(),
                "--nvml-lib",
                &lib,
            ],
        )
        .map_err(|e| e.to_string())?;
    if !plugin.wait_for_output("configured by runtime", Duration::from_secs(120)) {
        return Err(format!("nri-align did not register:\n{}", plugin.output()));
    }
    let systemd = ctrd.cgroup_driver() == "systemd";
    Ok(Guest {
        ctrd,
        plugin: Daemon::Process(plugin),
        facts,
        systemd,
        state_dir,
    })
}

/// nri-align as the systemd unit: installed and started before the runtime exists (systemd
/// must say `activating`), then the runtime, then `active` once the daemon registered.
fn start_unit(runtime: Runtime, facts: Facts, fixture: &str, lib: &str) -> Result<Guest, String> {
    let socket = unit::nri_socket_of(runtime, "vm")?;
    unit::install(
        &socket,
        PLUGIN_CONFIG,
        &["--nvml-lib", lib],
        &[format!("FAKE_NVML_FIXTURE={fixture}")],
    )?;
    let before = unit::start_before_runtime()?;
    eprintln!("unit started, no runtime yet: {before}");
    let ctrd = Instance::fresh_with(runtime, "vm", crate::cdi::runtime_options())
        .map_err(|e| e.to_string())?;
    // TimeoutStartSec=120s: a runtime slower than that to come up (TCG) costs the unit one
    // restart, after which it registers; the note says how many.
    let after = unit::wait_active(300)?;
    eprintln!("runtime up, unit: {after}");
    let systemd = ctrd.cgroup_driver() == "systemd";
    Ok(Guest {
        ctrd,
        plugin: Daemon::Unit { before, after },
        facts,
        systemd,
        state_dir: PathBuf::from(unit::STATE_DIR),
    })
}

/// nri-align reconfigured for one test ([`Guest::reconfigured`]).
pub struct Reconfigured<'a>(&'a Guest);

impl Drop for Reconfigured<'_> {
    fn drop(&mut self) {
        self.0.reconfigure("");
    }
}

/// What one container shows: from inside (a process started by exec) and from its cgroup.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Container id.
    pub id: String,
    /// `/proc/self/status` lines, verbatim.
    pub cpus_line: String,
    /// Same for memory nodes.
    pub mems_line: String,
    /// Cpus_allowed_list.
    pub cpus: Ids,
    /// Mems_allowed_list.
    pub mems: Ids,
    /// `env`.
    pub env: BTreeMap<String, String>,
    /// `/dev/nvidiaN` minors in `ls /dev`.
    pub gpu_minors: Ids,
    /// Those the device cgroup lets the container open. The guest has no NVIDIA driver, so an
    /// allowed node fails with ENXIO and a denied one with EPERM.
    pub gpu_usable: Ids,
    /// The cgroup's cpuset.cpus.effective.
    pub cg_cpus: Ids,
    /// The cgroup's cpuset.mems.effective.
    pub cg_mems: Ids,
    /// The cgroup directory.
    pub cgroup: PathBuf,
    /// Device paths of the runtime spec (`inspect`), for messages.
    pub spec_devices: Vec<String>,
    /// The runtime spec's device cgroup rules (`linux.resources.devices`), as
    /// `allow|deny TYPE MAJOR:MINOR ACCESS`, for messages.
    pub spec_device_rules: Vec<String>,
    /// Fields of the decision record nri-align put in the env (`policy=... cpus=...`).
    pub decision: BTreeMap<String, String>,
}

impl Seen {
    /// NICs of the decision.
    pub fn nics(&self) -> Vec<String> {
        let v = self.decision.get("nics").cloned().unwrap_or_default();
        v.split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [{} | {} | cgroup cpus {} mems {} | /dev/nvidia{:?} usable {:?} (spec {:?}) | {}]",
            &self.id[..12.min(self.id.len())],
            self.cpus_line,
            self.mems_line,
            list(&self.cg_cpus),
            list(&self.cg_mems),
            self.gpu_minors,
            self.gpu_usable,
            self.spec_devices,
            self.env
                .get("NRI_ALIGN_DECISION")
                .map_or("no decision", |s| s)
        )
    }
}

impl Guest {
    /// Removes every pod, so each test starts on an empty host (and a failed test does not
    /// leave its pods in the way of the next).
    pub fn reset(&self) {
        let cri = self.ctrd.cri();
        for id in cri.pods().expect("list pods") {
            // Containers first, without a grace period: StopPodSandbox alone lets CRI-O wait
            // out the whole CRI deadline for a `sleep` that ignores TERM as PID 1.
            cri.remove_pod_id(&id).expect("remove pod");
        }
        if self.systemd {
            self.stop_pod_slices();
        }
    }

    /// Stops the pod slices left empty by removed pods, as the kubelet does when it forgets a
    /// pod (the runtime removes only its containers' scopes).
    fn stop_pod_slices(&self) {
        let mut slices = Vec::new();
        let mut dirs = vec![PathBuf::from("/sys/fs/cgroup/kubepods.slice")];
        while let Some(dir) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.filter_map(Result::ok) {
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.ends_with(".slice") {
                    continue;
                }
                if name.contains("-pod") {
                    slices.push(name);
                } else {
                    dirs.push(e.path());
                }
            }
        }
        if slices.is_empty() {
            return;
        }
        let out = std::process::Command::new("systemctl")
            .arg("stop")
            .args(&slices)
            .output()
            .expect("run systemctl");
        assert!(
            out.status.success(),
            "systemctl stop {slices:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs a pod of QoS class `qos` with `annotations` (keys without the `.nri-align.io/pod`
    /// suffix, e.g. `policy`), under the kubelet's cgroup for that class and a UID of the
    /// API server's shape.
    pub fn pod(&self, name: &str, qos: Qos, annotations: &[(&str, &str)]) -> Pod {
        let uid = pod_uid(name);
        let root = self.ctrd.var("CGROUP_PARENT").unwrap_or("/");
        let mut spec = PodSpec::new(name)
            .uid(&uid)
            .cgroup_parent(&pod_cgroup_parent(self.systemd, root, qos, &uid));
        for (k, v) in annotations {
            spec = spec.annotation(&format!("{k}.nri-align.io/pod"), v);
        }
        self.ctrd
            .run_pod(&spec)
            .unwrap_or_else(|e| panic!("run pod {name}: {e}"))
    }

    /// Creates and starts a container; panics with the runtime's message on failure.
    pub fn run(&self, pod: &Pod, spec: &ContainerSpec) -> String {
        self.ctrd.run_container(pod, spec).unwrap_or_else(|e| {
            panic!(
                "container {} of pod {}: {e}\nnri-align log tail:\n{}",
                spec.name,
                pod.name,
                self.plugin_tail(20)
            )
        })
    }

    /// The last lines of nri-align's output.
    pub fn plugin_tail(&self, n: usize) -> String {
        let out = self.plugin.output();
        let lines: Vec<&str> = out.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// What container `id` shows.
    pub fn seen(&self, id: &str) -> Seen {
        let cri = self.ctrd.cri();
        // One exec for all views: every CRI round trip is slow under TCG.
        const SCRIPT: &str = "cat /proc/self/status; echo @@; env; echo @@; ls /dev; echo @@; \
            for d in /dev/nvidia[0-9]*; do [ -e \"$d\" ] || continue; \
            head -c0 \"$d\" 2>&1 | grep -q 'not permitted' || echo \"$d\"; done";
        let r = cri.exec(id, &["sh", "-c", SCRIPT]).expect("exec");
        assert_eq!(r.code, 0, "exec in {id}: {}", r.stderr);
        let parts: Vec<&str> = r.stdout.split("@@\n").collect();
        assert_eq!(parts.len(), 4, "exec output of {id}: {}", r.stdout);
        let line = |key: &str| {
            parts[0]
                .lines()
                .find(|l| l.starts_with(&format!("{key}:")))
                .unwrap_or_else(|| panic!("{key} missing in /proc/self/status of {id}"))
                .to_string()
        };
        let cpus = status_field(parts[0], "Cpus_allowed_list").expect("cpus");
        let mems = status_field(parts[0], "Mems_allowed_list").expect("mems");
        let env = parse_env_file(parts[1]);
        let minors = |text: &str, prefix: &str| -> Ids {
            text.split_whitespace()
                .filter_map(|n| n.strip_prefix(prefix)?.parse().ok())
                .collect()
        };
        let gpu_minors = minors(parts[2], "nvidia");
        let gpu_usable = minors(parts[3], "/dev/nvidia");
        let inspect = cri.inspect(id).expect("inspect");
        let cg = inspect["info"]["runtimeSpec"]["linux"]["cgroupsPath"]
            .as_str()
            .expect("cgroupsPath")
            .to_string();
        let rel = container_cgroup(&cg).unwrap_or_else(|| {
            panic!("{id}: cgroupsPath {cg:?} is neither a path nor slice:prefix:name")
        });
        let cgroup = Path::new("/sys/fs/cgroup").join(rel);
        assert!(
            cgroup.is_dir(),
            "{id}: no cgroup at {} (cgroupsPath {cg:?})",
            cgroup.display()
        );
        let spec_devices = inspect["info"]["runtimeSpec"]["linux"]["devices"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|d| d["path"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let num = |v: &serde_json::Value| v.as_i64().map_or("*".to_string(), |n| n.to_string());
        let spec_device_rules = inspect["info"]["runtimeSpec"]["linux"]["resources"]["devices"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|d| {
                        format!(
                            "{} {} {}:{} {}",
                            if d["allow"].as_bool() == Some(true) {
                                "allow"
                            } else {
                                "deny"
                            },
                            d["type"].as_str().unwrap_or("a"),
                            num(&d["major"]),
                            num(&d["minor"]),
                            d["access"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let decision = env
            .get("NRI_ALIGN_DECISION")
            .map(|d| {
                d.split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        Seen {
            id: id.to_string(),
            cpus_line: line("Cpus_allowed_list"),
            mems_line: line("Mems_allowed_list"),
            cpus: ids(&cpus),
            mems: ids(&mems),
            gpu_minors,
            gpu_usable,
            cg_cpus: ids(&read(cgroup.join("cpuset.cpus.effective"))),
            cg_mems: ids(&read(cgroup.join("cpuset.mems.effective"))),
            cgroup,
            spec_devices,
            spec_device_rules,
            env,
            decision,
        }
    }

    /// Anonymous memory of a cgroup per node, in bytes (`anon N0=... N1=...` of
    /// memory.numa_stat).
    pub fn anon_by_node(cgroup: &Path) -> BTreeMap<u32, u64> {
        Self::numa_stat(cgroup, "anon")
    }

    /// Bytes per node of one line (`anon`, `file`, `shmem`) of a cgroup v2 `memory.numa_stat`.
    pub fn numa_stat(cgroup: &Path, key: &str) -> BTreeMap<u32, u64> {
        let text = read(cgroup.join("memory.numa_stat"));
        let line = text
            .lines()
            .find(|l| l.strip_prefix(key).is_some_and(|r| r.starts_with(' ')))
            .unwrap_or_else(|| panic!("no {key} line in {}/memory.numa_stat", cgroup.display()));
        line.split_whitespace()
            .skip(1)
            .filter_map(|kv| {
                let (n, v) = kv.split_once('=')?;
                Some((n.strip_prefix('N')?.parse().ok()?, v.parse().ok()?))
            })
            .collect()
    }

    /// Anonymous pages per node of every process in a cgroup, from `/proc/PID/numa_maps`.
    pub fn numa_maps_anon(cgroup: &Path) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        for pid in read(cgroup.join("cgroup.procs")).lines() {
            let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/numa_maps")) else {
                continue;
            };
            for l in maps.lines().filter(|l| l.contains(" anon=")) {
                for (n, pages) in l.split_whitespace().filter_map(|w| {
                    let (k, v) = w.split_once('=')?;
                    Some((
                        k.strip_prefix('N')?.parse::<u32>().ok()?,
                        v.parse::<u64>().ok()?,
                    ))
                }) {
                    *out.entry(n).or_insert(0) += pages;
                }
            }
        }
        out
    }

    /// nri-align's configuration made `PLUGIN_CONFIG` followed by `extra` and reloaded (SIGHUP
    /// to the process, `systemctl reload` of the unit); returns once the daemon says it
    /// reloaded. `reconfigure("")` puts the guest's own configuration back.
    pub fn reconfigure(&self, extra: &str) {
        let text = format!("{PLUGIN_CONFIG}{extra}");
        let reloads = || {
            self.plugin
                .output()
                .matches("configuration reloaded")
                .count()
        };
        let before = reloads();
        match &self.plugin {
            Daemon::Process(p) => {
                std::fs::write(self.ctrd.dir().join("nri-align.yaml"), &text)
                    .expect("write the config");
                let pid = nix::unistd::Pid::from_raw(i32::try_from(p.pid()).expect("a pid"));
                nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("SIGHUP");
            }
            Daemon::Unit { .. } => {
                unit::write_config(&text).expect("write the config");
                unit::reload().expect("systemctl reload");
            }
        }
        assert!(
            Guest::wait(60, || reloads() > before),
            "nri-align never said it reloaded:\n{}",
            self.plugin_tail(20)
        );
    }

    /// [`Guest::reconfigure`] with `extra` until the returned guard drops, passed or not; then
    /// the guest's own configuration again.
    pub fn reconfigured(&self, extra: &str) -> Reconfigured<'_> {
        self.reconfigure(extra);
        Reconfigured(self)
    }

    /// Runs `nri-align verify` on the guest's state; its output.
    pub fn verify(&self) -> (bool, String) {
        let out = std::process::Command::new(nri_align_bin())
            .args(["verify", "--state-dir"])
            .arg(&self.state_dir)
            .output()
            .expect("run nri-align verify");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// `nri-align verify --json` on the guest's state: one check per recorded container.
    pub fn verify_json(&self) -> serde_json::Value {
        let out = std::process::Command::new(nri_align_bin())
            .args(["verify", "--json", "--state-dir"])
            .arg(&self.state_dir)
            .output()
            .expect("run nri-align verify");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("verify JSON ({e}): {out:?}"))
    }

    /// `nri-align placements --json` on the guest's state.
    pub fn placements(&self) -> serde_json::Value {
        let out = std::process::Command::new(nri_align_bin())
            .args(["placements", "--json", "--state-dir"])
            .arg(&self.state_dir)
            .output()
            .expect("run nri-align placements");
        assert!(out.status.success(), "placements: {out:?}");
        serde_json::from_slice(&out.stdout).expect("placements JSON")
    }

    /// Polls `cond` up to `secs` seconds (TCG is slow: memory fills take a while).
    pub fn wait(secs: u64, cond: impl FnMut() -> bool) -> bool {
        wait_until(Duration::from_secs(secs), cond)
    }
}
