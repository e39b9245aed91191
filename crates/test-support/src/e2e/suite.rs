//! What the enforcement suites share: a fresh runtime instance with nri-align running on an
//! emulated host shaped like this machine, the container shapes the kubelet sends for
//! Guaranteed and Burstable pods, and waits and reads on running containers.

use std::path::PathBuf;
use std::time::Duration;

use super::{
    skip_unless_ready, wait_until, AlignRun, ContainerSpec, EmulatedHost, Instance, Live,
    PluginProcess, Pod, Runtime, UpOptions,
};

const MIB: i64 = 1 << 20;

/// A Guaranteed container with `cpus` whole CPUs (request = limit) and 64 MiB.
pub fn guaranteed(name: &str, cpus: i64) -> ContainerSpec {
    ContainerSpec::new(name)
        .cpu_millis(cpus * 1000, Some(cpus * 1000))
        .memory(64 * MIB)
}

/// A Burstable container (250m request, 500m limit): the shared pool.
pub fn burstable(name: &str) -> ContainerSpec {
    ContainerSpec::new(name).cpu_millis(250, Some(500))
}

/// The kubelet's PodResources API for a suite: the test kubelet on a socket nri-align is
/// pointed at (`podresources_socket`), serving what the suite says the kubelet allocated.
pub struct Kubelet {
    /// The test kubelet (declared first: it stops before its runtime).
    server: Option<podresources::TestKubelet>,
    tokio: tokio::runtime::Runtime,
    pods: std::sync::Mutex<Vec<podresources::proto::PodResources>>,
    /// The socket.
    pub socket: PathBuf,
}

impl Kubelet {
    fn start(socket: PathBuf) -> Self {
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        if let Some(dir) = socket.parent() {
            std::fs::create_dir_all(dir).expect("kubelet dir");
        }
        let server = {
            let _in = tokio.enter();
            podresources::TestKubelet::start(&socket, Vec::new()).expect("test kubelet serves")
        };
        Self {
            server: Some(server),
            tokio,
            pods: std::sync::Mutex::new(Vec::new()),
            socket,
        }
    }

    /// The kubelet now reports `pod` (replacing an earlier report of the same pod).
    pub fn report(&self, pod: podresources::proto::PodResources) {
        let mut pods = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        pods.retain(|p| !(p.namespace == pod.namespace && p.name == pod.name));
        pods.push(pod);
        if let Some(s) = &self.server {
            s.set_pods(pods.clone());
        }
    }

    /// The kubelet reports container `container` of pod `namespace/name` holding `ids` of
    /// `resource` (an empty `ids`: listed without devices).
    pub fn allocate(
        &self,
        namespace: &str,
        name: &str,
        container: &str,
        resource: &str,
        ids: &[&str],
    ) {
        let ids: Vec<(&str, Option<i64>)> = ids.iter().map(|i| (*i, None)).collect();
        let devs = if ids.is_empty() {
            Vec::new()
        } else {
            podresources::build::devices(resource, &ids)
        };
        let mut pod = {
            let pods = self.pods.lock().unwrap_or_else(|p| p.into_inner());
            pods.iter()
                .find(|p| p.namespace == namespace && p.name == name)
                .cloned()
                .unwrap_or_else(|| podresources::build::pod(namespace, name, Vec::new()))
        };
        pod.containers.retain(|c| c.name != container);
        pod.containers
            .push(podresources::build::container(container, devs));
        self.report(pod);
    }

    /// The kubelet lists `ids` of `resource` as allocatable (`GetAllocatableResources`: what
    /// its device plugins report healthy), replacing what it listed.
    pub fn set_allocatable(&self, resource: &str, ids: &[&str]) {
        let ids: Vec<(&str, Option<i64>)> = ids.iter().map(|i| (*i, None)).collect();
        let mut answer = podresources::proto::AllocatableResourcesResponse::new();
        answer.devices = podresources::build::devices(resource, &ids);
        if let Some(s) = &self.server {
            s.set_allocatable(answer);
        }
    }

    /// The kubelet goes away (socket removed).
    pub fn stop(&mut self) {
        if let Some(s) = self.server.take() {
            self.tokio.block_on(s.stop());
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A runtime instance with nri-align registered as an external plugin, on an emulated host.
pub struct Enforced {
    /// The running plugin (declared first: it stops before the runtime goes down).
    pub plugin: PluginProcess,
    /// The test kubelet, when the suite has one.
    pub kubelet: Option<Kubelet>,
    /// The runtime.
    pub rt: Instance,
    /// The emulated host nri-align reads (this machine's CPUs and nodes, fake GPUs and NICs).
    pub host: EmulatedHost,
    /// How nri-align runs (state dir, config, host).
    pub run: AlignRun,
    /// nri-align's configuration file.
    pub config: PathBuf,
}

/// How an [`Enforced`] suite is brought up: [`Enforced::builder`], then what the test needs
/// beyond the plain start (no devices, an empty configuration, no test kubelet), then
/// [`EnforcedBuilder::start`].
#[must_use = "nothing starts until `start` is called"]
pub struct EnforcedBuilder<'a> {
    runtime: Runtime,
    /// The test's name, for skip and failure messages.
    test: &'a str,
    /// The runtime instance's name.
    name: &'a str,
    gpus: usize,
    nics: usize,
    /// nri-align's configuration (YAML).
    config: &'a str,
    /// A test kubelet serving PodResources to nri-align.
    kubelet: bool,
    /// GPUs with MIG mode on: index and MIG profiles.
    mig: &'a [(usize, &'a [&'a str])],
    /// Runtime options (CDI on, timeouts).
    options: UpOptions,
    /// More arguments for `nri-align run`.
    args: &'a [&'a str],
}

impl Enforced {
    /// Starts describing instance `name` of `runtime` for test `test`; see [`EnforcedBuilder`].
    pub fn builder<'a>(runtime: Runtime, test: &'a str, name: &'a str) -> EnforcedBuilder<'a> {
        EnforcedBuilder {
            runtime,
            test,
            name,
            gpus: 0,
            nics: 0,
            config: "",
            kubelet: false,
            mig: &[],
            options: UpOptions::default(),
            args: &[],
        }
    }
}

impl<'a> EnforcedBuilder<'a> {
    /// The emulated host has `n` fake GPUs.
    pub fn gpus(mut self, n: usize) -> Self {
        self.gpus = n;
        self
    }

    /// The emulated host has `n` fake RDMA NICs.
    pub fn nics(mut self, n: usize) -> Self {
        self.nics = n;
        self
    }

    /// nri-align's configuration (YAML).
    pub fn config(mut self, yaml: &'a str) -> Self {
        self.config = yaml;
        self
    }

    /// A test kubelet serves PodResources to nri-align (its socket is added to the
    /// configuration), listing every GPU as allocatable.
    pub fn kubelet(mut self) -> Self {
        self.kubelet = true;
        self
    }

    /// The GPUs `mig` (index, MIG profiles) have MIG mode on, with those MIG devices.
    pub fn mig(mut self, mig: &'a [(usize, &'a [&'a str])]) -> Self {
        self.mig = mig;
        self
    }

    /// Runtime options (CDI on, timeouts).
    pub fn options(mut self, options: UpOptions) -> Self {
        self.options = options;
        self
    }

    /// More arguments for `nri-align run`.
    pub fn args(mut self, args: &'a [&'a str]) -> Self {
        self.args = args;
        self
    }

    /// Brings up the runtime instance and nri-align on the emulated host. `None` when the test
    /// must skip (see [`skip_unless_ready`]); any failure panics with its cause.
    pub fn start(self) -> Option<Enforced> {
        let test = format!("{}({})", self.test, self.runtime.name());
        if skip_unless_ready(self.runtime, &test) {
            return None;
        }
        let rt = Instance::fresh_with(self.runtime, self.name, self.options)
            .unwrap_or_else(|e| panic!("{test}: {e}"));
        let kubelet = self
            .kubelet
            .then(|| Kubelet::start(rt.dir().join("kubelet/pod-resources/kubelet.sock")));
        let config = match &kubelet {
            Some(k) => format!("{}\npodresources_socket: {:?}\n", self.config, k.socket),
            None => self.config.to_string(),
        };
        let host = EmulatedHost::of_this_machine_with_mig(
            &rt.dir().join("host"),
            self.gpus,
            self.nics,
            self.mig,
        )
        .unwrap_or_else(|e| panic!("{test}: emulate: {e}"));
        if let Some(k) = &kubelet {
            // As a kubelet whose device plugin reports every GPU healthy.
            let uuids: Vec<&str> = host.gpus.iter().map(|g| g.uuid.as_str()).collect();
            k.set_allocatable("nvidia.com/gpu", &uuids);
        }
        let mut run = AlignRun::new(rt.dir().join("align-state")).on(&host);
        run.extra = self.args.iter().map(|a| a.to_string()).collect();
        let path = rt.dir().join("nri-align.yaml");
        run.write_config(&path, &config)
            .unwrap_or_else(|e| panic!("{test}: {e}"));
        let plugin = run
            .start(&rt)
            .unwrap_or_else(|e| panic!("{test}: nri-align: {e}"));
        Some(Enforced {
            rt,
            host,
            run,
            plugin,
            kubelet,
            config: path,
        })
    }
}

impl Enforced {
    /// Runs `nri-align verify`, which must succeed and report each of `ids` as `ok`.
    pub fn assert_verified(&self, ids: &[&str]) {
        let out = self.run.verify(&[]).expect("verify");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for id in ids {
            let line = text
                .lines()
                .find(|l| l.contains(&id[..13]))
                .unwrap_or_else(|| panic!("{id} not in\n{text}"));
            assert!(line.starts_with("ok "), "{line}");
        }
    }

    /// The host's online CPUs.
    pub fn online(&self) -> Vec<u32> {
        self.host.machine.cpus.clone()
    }

    /// Runs a container; panics with the runtime's message when it fails.
    pub fn run(&self, pod: &Pod, spec: &ContainerSpec) -> String {
        self.rt
            .run_container(pod, spec)
            .unwrap_or_else(|e| panic!("{}: {e}", spec.name))
    }

    /// The create of `spec` in `pod` must fail; returns the message.
    pub fn refused(&self, pod: &Pod, spec: &ContainerSpec) -> String {
        match self.rt.create(pod, spec) {
            Ok(id) => panic!("{} was created as {id}", spec.name),
            Err(e) => e.to_string(),
        }
    }

    /// Container `id` seen from the host (it must be running).
    pub fn live(&self, id: &str) -> Live {
        self.rt
            .live(id)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("{id} is not running"))
    }

    /// Waits until the running container `id` has exactly `cpus`, both as its processes'
    /// affinity and in its cpuset cgroup (pool updates land after the plugin answered).
    pub fn wait_cpus(&self, id: &str, cpus: &[u32]) {
        let mut seen = (Vec::new(), Vec::new());
        let ok = wait_until(Duration::from_secs(10), || {
            seen = (
                self.live(id).cpus,
                self.rt.cgroup_cpus(id).unwrap_or_default(),
            );
            seen.0 == cpus && seen.1 == cpus
        });
        assert!(
            ok,
            "{id}: affinity {:?}, cgroup {:?}, want {cpus:?}",
            seen.0, seen.1
        );
    }

    /// `ls -1 DIRS` inside container `id`.
    pub fn ls(&self, id: &str, dirs: &[&str]) -> Vec<String> {
        let mut cmd = vec!["ls", "-1"];
        cmd.extend_from_slice(dirs);
        let r = self.rt.cri().exec(id, &cmd).expect("exec ls");
        r.stdout.lines().map(str::to_string).collect()
    }

    /// One more container event: a shared container `name` in `pod`, created and removed. Its
    /// responses carry the pool updates a RemoveContainer queued (RemoveContainer has no
    /// response, and nri-align never calls UpdateContainers, which can deadlock containerd).
    pub fn next_event(&self, pod: &Pod, name: &str) {
        let id = self.run(pod, &burstable(name));
        self.remove(&id);
    }

    /// Stops and removes container `id`.
    pub fn remove(&self, id: &str) {
        let cri = self.rt.cri();
        cri.ok(&["stop", id]).expect("stop");
        cri.ok(&["rm", id]).expect("rm");
    }
}
