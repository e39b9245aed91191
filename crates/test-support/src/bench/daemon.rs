//! The release daemon as the daemon benches drive it: started on an emulated host
//! (`nri-align emulate --host numa16-1024`, the fake NVML when built), and the simulated node
//! whose containers a simulated runtime creates and removes through its NRI socket.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::bench::{self, container, ctx, pod, BoxError, Connection};
use nri_protocol::api::{self, Message, MessageField};

pub struct Daemon {
    pub child: Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn start(setup: &Setup, state: &Path, log_name: &str) -> Result<Daemon, BoxError> {
        Self::start_with(setup, state, log_name, &[])
    }

    /// [`Daemon::start`] with `extra` arguments to `nri-align run` (`--kubeconfig`, ...).
    pub fn start_with(
        setup: &Setup,
        state: &Path,
        log_name: &str,
        extra: &[&std::ffi::OsStr],
    ) -> Result<Daemon, BoxError> {
        let log = setup.dir.join(log_name);
        let err = std::fs::File::create(&log)?;
        let mut cmd = Command::new(&setup.binary);
        cmd.arg("run")
            .arg("--socket")
            .arg(setup.dir.join("nri.sock"))
            .arg("--host-root")
            .arg(&setup.host)
            .arg("--state-dir")
            .arg(state)
            .arg("--config")
            .arg(&setup.config)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(err);
        // The daemon dies with the bench, even one killed by a signal (its Drop never runs
        // then, and a daemon left behind would hold its socket and skew the next run).
        // SAFETY: the closure runs in the child between fork and exec and only calls prctl.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        if let Some(lib) = &setup.nvml_lib {
            cmd.arg("--nvml-lib")
                .arg(lib)
                .env("FAKE_NVML_FIXTURE", setup.host.join("nvml.json"));
        }
        Ok(Daemon {
            child: cmd.spawn()?,
            log,
        })
    }

    /// Resident memory in KiB: all of it (`VmRSS`), its peak (`VmHWM`), and the anonymous
    /// part (`RssAnon`: heap,
    /// stacks). The rest is mostly the binary's own pages, shared with the page cache: how
    /// much of them are resident depends on what the kernel read ahead or evicted before.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn rss(&self) -> Rss {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        Rss {
            total: field("VmRSS:"),
            anon: field("RssAnon:"),
            peak: field("VmHWM:"),
        }
    }

    pub fn stop(mut self) -> PathBuf {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
        std::mem::take(&mut self.log)
    }
}

impl Drop for Daemon {
    /// A bench that fails half-way (an error returned with `?`) must not leave its daemon
    /// running on a socket in a temporary directory that is gone: one once outlived its bench
    /// by 20 minutes. After `stop` the child is reaped and this does nothing.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[derive(Clone)]
pub struct Setup {
    pub dir: PathBuf,
    pub binary: PathBuf,
    pub host: PathBuf,
    pub config: PathBuf,
    pub nvml_lib: Option<PathBuf>,
}

/// One timed create.
pub struct Sample {
    pub name: String,
    pub exclusive: bool,
    pub rtt_us: f64,
    pub updates: usize,
    pub bytes: usize,
}

/// The simulated node: what runs and on which CPUs the runtime has each container.
#[derive(Default)]
pub struct Node {
    pub next: u64,
    pub shared: VecDeque<u64>,
    pub exclusive: VecDeque<u64>,
    pub cpus: HashMap<String, String>,
}

impl Node {
    /// Containers running, shared and exclusive.
    pub fn len(&self) -> usize {
        self.shared.len() + self.exclusive.len()
    }

    /// Whether no container runs.
    pub fn is_empty(&self) -> bool {
        self.shared.is_empty() && self.exclusive.is_empty()
    }

    pub fn apply(&mut self, updates: &[api::ContainerUpdate]) {
        for u in updates {
            if let Some(cpus) = u
                .linux
                .as_ref()
                .and_then(|l| l.resources.as_ref())
                .and_then(|r| r.cpu.as_ref())
            {
                self.cpus.insert(u.container_id.clone(), cpus.cpus.clone());
            }
        }
    }

    /// Creates the next container: every tenth exclusive with one CPU, the others shared.
    pub async fn create(&mut self, conn: &Connection) -> Result<Sample, BoxError> {
        let exclusive = self.next % 10 == 9;
        self.create_as(conn, exclusive).await
    }

    /// Brings the node to `live` containers, a tenth of them exclusive, the exclusive ones
    /// first. Created in the steady state's order (every tenth exclusive), each exclusive one
    /// would move every shared container made before it: filling 5,000 would send the daemon
    /// about a million pool updates (quadratic in the node's size), which is what made the
    /// 5,000 size take minutes. Made while the shared pool is still empty of containers, they
    /// move nobody, and the node reached is the same: the same containers of each kind, each
    /// kind removed oldest first.
    pub async fn fill(&mut self, conn: &Connection, live: usize) -> Result<(), BoxError> {
        while self.exclusive.len() < live / 10 && self.len() < live {
            self.create_as(conn, true).await?;
        }
        while self.len() < live {
            self.create_as(conn, false).await?;
        }
        Ok(())
    }

    /// Creates the next container, exclusive (one CPU) or shared as asked.
    pub async fn create_as(
        &mut self,
        conn: &Connection,
        exclusive: bool,
    ) -> Result<Sample, BoxError> {
        let n = self.next;
        self.next += 1;
        let req = api::CreateContainerRequest {
            pod: MessageField::some(pod(n)),
            container: MessageField::some(container(n, i64::from(exclusive))),
            ..Default::default()
        };
        let t = Instant::now();
        let reply = conn.plugin.create_container(ctx(), &req).await?;
        let rtt_us = t.elapsed().as_secs_f64() * 1e6;
        let cpus = reply
            .adjust
            .as_ref()
            .and_then(|a| a.linux.as_ref())
            .and_then(|l| l.resources.as_ref())
            .and_then(|r| r.cpu.as_ref())
            .map(|c| c.cpus.clone())
            .unwrap_or_default();
        self.cpus.insert(container(n, 0).id, cpus);
        self.apply(&reply.update);
        if exclusive {
            self.exclusive.push_back(n);
        } else {
            self.shared.push_back(n);
        }
        Ok(Sample {
            name: format!("c{n}"),
            exclusive,
            rtt_us,
            updates: reply.update.len(),
            bytes: reply.compute_size() as usize,
        })
    }

    /// Stops and removes the oldest container of a kind; how many updates the runtime got
    /// with it (those a removal queues travel with the next response instead).
    pub async fn remove_oldest(
        &mut self,
        conn: &Connection,
        exclusive: bool,
    ) -> Result<usize, BoxError> {
        let q = if exclusive {
            &mut self.exclusive
        } else {
            &mut self.shared
        };
        let Some(n) = q.pop_front() else {
            return Ok(0);
        };
        self.cpus.remove(&container(n, i64::from(exclusive)).id);
        let updates = bench::stop_and_remove(conn, n, exclusive).await?;
        self.apply(&updates);
        Ok(updates.len())
    }

    /// Every live pod and container as a runtime lists them at Synchronize, with the cpuset
    /// each runs on.
    pub fn listing(&self) -> (Vec<api::PodSandbox>, Vec<api::Container>) {
        let mut pods = Vec::new();
        let mut ctrs = Vec::new();
        for (n, excl) in self
            .shared
            .iter()
            .map(|n| (*n, false))
            .chain(self.exclusive.iter().map(|n| (*n, true)))
        {
            pods.push(pod(n));
            let mut c = container(n, i64::from(excl));
            if let Some(cpus) = self.cpus.get(&c.id) {
                if let Some(cpu) = c
                    .linux
                    .as_mut()
                    .and_then(|l| l.resources.as_mut())
                    .and_then(|r| r.cpu.as_mut())
                {
                    cpu.cpus = cpus.clone();
                }
            }
            ctrs.push(c);
        }
        (pods, ctrs)
    }
}

/// Resident memory of the daemon, KiB.
#[derive(Clone, Copy)]
pub struct Rss {
    pub total: u64,
    pub anon: u64,
    /// The peak of `VmRSS` so far (`VmHWM`).
    pub peak: u64,
}

pub fn setup(dir: &Path) -> Result<Setup, BoxError> {
    let binary = std::env::var_os("NRI_ALIGN_BENCH_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(crate::nri_align_bin);
    let host = dir.join("host");
    let out = Command::new(&binary)
        .args(["emulate", "--host", "numa16-1024", "--out"])
        .arg(&host)
        .output()?;
    if !out.status.success() {
        return Err(format!("emulate: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let config = dir.join("config.yaml");
    std::fs::write(&config, "log_format: json\nlog_level: info\n")?;
    let nvml_lib = std::env::current_exe()?
        .parent()
        .map(|d| d.join("libfake_nvml.so"))
        .filter(|p| p.is_file());
    Ok(Setup {
        dir: dir.to_path_buf(),
        binary,
        host,
        config,
        nvml_lib,
    })
}

/// `/proc` reports CPU times in USER_HZ, 100 per second on Linux whatever the kernel's HZ.
const USER_HZ: f64 = 100.0;

/// What a process has cost so far, from `/proc`: its CPU time (`utime + stime` of
/// `/proc/PID/stat`, which keeps the time of threads that ended, in 10 ms ticks) and, per live
/// thread, its time on a CPU in ns (`schedstat`) and its context switches from `status`
/// (voluntary: it slept and something woke it, so one per wake-up; involuntary: preempted).
#[derive(Default)]
pub struct Usage {
    pub ticks: u64,
    pub threads: BTreeMap<u32, ThreadUsage>,
}

#[derive(Default, Clone)]
pub struct ThreadUsage {
    pub name: String,
    pub run_ns: u64,
    pub voluntary: u64,
    pub involuntary: u64,
}

impl Usage {
    /// The usage of `pid` now (zeroes for what cannot be read: a process that is gone).
    pub fn of(pid: u32) -> Usage {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The name in parentheses may hold spaces: the fields that follow it count from its
        // closing parenthesis (utime and stime are fields 14 and 15, the 12th and 13th after).
        let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
        let fields: Vec<u64> = after
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        let ticks = fields.get(10).copied().unwrap_or(0) + fields.get(11).copied().unwrap_or(0);
        let mut threads = BTreeMap::new();
        if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for tid in dir
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
            {
                threads.insert(tid, ThreadUsage::of(pid, tid));
            }
        }
        Usage { ticks, threads }
    }

    /// CPU seconds from `stat` (10 ms resolution, ended threads included).
    pub fn cpu_s(&self) -> f64 {
        self.ticks as f64 / USER_HZ
    }

    /// What was spent since `before`, per thread name (threads of one name, as tokio's
    /// workers, summed; threads that ended meanwhile are not in it), and the total CPU
    /// seconds from `stat`.
    pub fn since(&self, before: &Usage) -> (f64, BTreeMap<String, ThreadUsage>) {
        let mut by_name: BTreeMap<String, ThreadUsage> = BTreeMap::new();
        for (tid, now) in &self.threads {
            let was = before.threads.get(tid).cloned().unwrap_or_default();
            let e = by_name.entry(now.name.clone()).or_default();
            e.name.clone_from(&now.name);
            e.run_ns += now.run_ns.saturating_sub(was.run_ns);
            e.voluntary += now.voluntary.saturating_sub(was.voluntary);
            e.involuntary += now.involuntary.saturating_sub(was.involuntary);
        }
        (
            (self.ticks.saturating_sub(before.ticks)) as f64 / USER_HZ,
            by_name,
        )
    }
}

impl ThreadUsage {
    fn of(pid: u32, tid: u32) -> ThreadUsage {
        let base = format!("/proc/{pid}/task/{tid}");
        let status = std::fs::read_to_string(format!("{base}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        let run_ns = std::fs::read_to_string(format!("{base}/schedstat"))
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        ThreadUsage {
            name: field("Name:"),
            run_ns,
            voluntary: field("voluntary_ctxt_switches:").parse().unwrap_or(0),
            involuntary: field("nonvoluntary_ctxt_switches:").parse().unwrap_or(0),
        }
    }
}
