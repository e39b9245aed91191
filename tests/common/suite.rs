//! What the enforcement suites share: a fresh runtime instance with nri-align running on an
//! emulated host shaped like this machine, the container shapes the kubelet sends for
//! Guaranteed and Burstable pods, and waits and reads on running containers.

use std::path::PathBuf;
use std::time::Duration;

use super::{
    skip_unless_ready, wait_until, AlignRun, ContainerSpec, EmulatedHost, Instance, Live,
    PluginProcess, Pod, Runtime,
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

/// A runtime instance with nri-align registered as an external plugin, on an emulated host.
pub struct Enforced {
    /// The running plugin (declared first: it stops before the runtime goes down).
    pub plugin: PluginProcess,
    /// The runtime.
    pub rt: Instance,
    /// The emulated host nri-align reads (this machine's CPUs and nodes, fake GPUs and NICs).
    pub host: EmulatedHost,
    /// How nri-align runs (state dir, config, host).
    pub run: AlignRun,
    /// nri-align's configuration file.
    pub config: PathBuf,
}

impl Enforced {
    /// Brings up instance `name` of `runtime` and nri-align on a host with `gpus` fake GPUs and
    /// `nics` RDMA NICs, configured by `config` (YAML). `None` when the test must skip (see
    /// [`skip_unless_ready`]); any failure panics with its cause.
    pub fn start(
        runtime: Runtime,
        test: &str,
        name: &str,
        gpus: usize,
        nics: usize,
        config: &str,
    ) -> Option<Self> {
        Self::start_with(runtime, test, name, gpus, nics, config, &[])
    }

    /// [`Enforced::start`] with more arguments for `nri-align run`.
    pub fn start_with(
        runtime: Runtime,
        test: &str,
        name: &str,
        gpus: usize,
        nics: usize,
        config: &str,
        extra_args: &[&str],
    ) -> Option<Self> {
        let test = format!("{test}({})", runtime.name());
        if skip_unless_ready(runtime, &test) {
            return None;
        }
        let rt = Instance::fresh(runtime, name).unwrap_or_else(|e| panic!("{test}: {e}"));
        let host = EmulatedHost::of_this_machine(&rt.dir().join("host"), gpus, nics)
            .unwrap_or_else(|e| panic!("{test}: emulate: {e}"));
        let mut run = AlignRun::new(rt.dir().join("align-state")).on(&host);
        run.extra = extra_args.iter().map(|a| a.to_string()).collect();
        let path = rt.dir().join("nri-align.yaml");
        run.write_config(&path, config)
            .unwrap_or_else(|e| panic!("{test}: {e}"));
        let plugin = run
            .start(&rt)
            .unwrap_or_else(|e| panic!("{test}: nri-align: {e}"));
        Some(Self {
            rt,
            host,
            run,
            plugin,
            config: path,
        })
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

    /// Stops and removes container `id`.
    pub fn remove(&self, id: &str) {
        let cri = self.rt.cri();
        cri.ok(&["stop", id]).expect("stop");
        cri.ok(&["rm", id]).expect("rm");
    }
}
