//! A seeded random soak of nri-align on every real runtime (containerd 1.7, 2.1, CRI-O), on an
//! emulated host with this machine's CPUs and NUMA nodes and two fake GPUs. From a seed
//! (printed; `NRI_ALIGN_SOAK_SEED=N` replays it, `NRI_ALIGN_SOAK_STEPS=N` sets the length) it
//! runs a random sequence of steps: create+start an exclusive (Guaranteed, one CPU), shared
//! (Burstable), best-effort, exempt-namespace or GPU container; stop, restart (the kubelet's
//! next attempt) or remove a container; remove a pod; a CRI resource update; SIGKILL nri-align
//! and start it again (meanwhile the runtime may create, stop or remove a container without
//! it); SIGKILL the runtime and start it again; SIGHUP nri-align with another `reserved_cpus`.
//! After every step it checks,
//! from /proc and the containers' cpuset cgroups as well as from nri-align's state:
//! 1. no CPU in two exclusive containers, no GPU node in two containers, no CPU or GPU recorded
//!    for two holders (at every moment);
//! 2. no running shared, best-effort, GPU or exempt container on a CPU held exclusively, and
//!    each one on exactly the pool (or the reserved CPUs) once an event carried the updates;
//! 3. every running container has a record, no record names a removed container;
//! 4. `nri-align verify` passes after every restart and at the end;
//! 5. nri-align never panicked, is running, and still decides (a decision for each tick).
//!
//! Admissions are predicted from the records: a refused exclusive or GPU container must fail
//! its create with nri-align's message and leave nothing behind, and one that should fit must
//! be admitted. On a violation the seed, the steps so far, the state and the logs are printed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use test_support::each_runtime;

use nix::sys::signal::Signal;
use serde_json::{json, Value};
use test_support::e2e::align::read_state;
use test_support::e2e::soak::{check_now, check_settled, held, nri_msg, observe, pool};
use test_support::e2e::soak::{seed_and_steps, test_filter, Ctr, Kind, Observed, Placement};
use test_support::e2e::suite::{burstable, guaranteed, Enforced};
use test_support::e2e::Runtime;
use test_support::e2e::{format_list, log_events, wait_until, ContainerSpec, Pod, PodSpec};
use test_support::rng::Rng;

/// Steps per runtime unless NRI_ALIGN_SOAK_STEPS says otherwise: about a minute each here.
const DEFAULT_STEPS: usize = 100;
const BASE_CONFIG: &str = "exempt_namespaces: [kube-system]\ntrust_visible_devices_env: true\n";

struct Soak {
    e: Enforced,
    rng: Rng,
    seed: u64,
    steps: Vec<String>,
    pods: Vec<Pod>,
    ctrs: Vec<Ctr>,
    tick_pod: Pod,
    serial: usize,
    reserved: Option<u32>,
    /// Registrations of the current nri-align process so far.
    registrations: usize,
    /// Steps of the run (the length to replay it with).
    total: usize,
}

impl Soak {
    fn log(&mut self, line: String) {
        eprintln!("soak {}: {line}", self.steps.len());
        self.steps.push(line);
    }

    /// Prints the seed, the steps, the state and the logs, and fails.
    fn fail(&self, what: &str) -> ! {
        let rt = self.e.rt.runtime.name();
        let state = read_state(&self.e.run.state_dir)
            .map(|s| serde_json::to_string_pretty(&s).unwrap_or_default())
            .unwrap_or_else(|e| e.to_string());
        let seen = observe(self.e.rt.var("CGROUP_PARENT").unwrap_or_default());
        let out = self.e.plugin.output();
        let tail: Vec<&str> = out.lines().rev().take(80).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!(
            "soak({rt}) VIOLATION: {what}\nreplay: NRI_ALIGN_SOAK_SEED={} NRI_ALIGN_SOAK_STEPS={} \
             cargo test --test e2e soak::soak::{}\nsteps:\n  {}\nmodel: {:#?}\nstate: {state}\n\
             observed: {seen:#?}\nnri-align log (last 80 lines):\n{}\nruntime log:\n{}",
            self.seed,
            self.total,
            test_filter(self.e.rt.runtime),
            self.steps.join("\n  "),
            self.ctrs,
            tail.join("\n"),
            self.e.rt.log_tail(30)
        );
    }

    fn state(&self) -> BTreeMap<String, Value> {
        read_state(&self.e.run.state_dir).unwrap_or_else(|e| self.fail(&format!("state: {e}")))
    }

    fn online(&self) -> Vec<u32> {
        self.e.online()
    }

    fn observed(&self) -> BTreeMap<String, Observed> {
        observe(self.e.rt.var("CGROUP_PARENT").unwrap_or_default())
    }

    /// nri-align runs, never panicked, and the invariants that hold at every moment hold.
    fn check_now(&mut self) -> Result<(), String> {
        if let Some(status) = self.e.plugin.exited() {
            return Err(format!("nri-align exited: {status}"));
        }
        if self.e.plugin.output().contains("panicked") {
            return Err("nri-align panicked".into());
        }
        let (state, seen) = (self.state(), self.observed());
        check_now(&self.ctrs, &state, &seen)
    }

    /// [`Soak::check_now`], and the invariants that hold once an event carried nri-align's
    /// pending updates.
    fn check_settled(&mut self) -> Result<(), String> {
        self.check_now()?;
        let (state, seen) = (self.state(), self.observed());
        let at = Placement {
            online: self.online(),
            reserved: self.reserved,
            single_node: self.e.host.machine.nodes.len() == 1,
        };
        check_settled(&self.ctrs, &state, &seen, &at)
    }

    /// A no-op event (a shared container created and removed) that carries the pending pool
    /// updates, then waits for the settled invariants; `verify` too when asked.
    fn settle(&mut self, verify: bool) {
        self.serial += 1;
        let name = format!("tick{}", self.serial);
        let id = self
            .e
            .rt
            .run_container(&self.tick_pod, &burstable(&name))
            .unwrap_or_else(|e| self.fail(&format!("tick {name}: {e}")));
        if self.e.plugin.decisions(&name).is_empty() {
            self.fail(&format!(
                "no decision for {name}: nri-align is not deciding"
            ));
        }
        let cri = self.e.rt.cri();
        if let Err(e) = cri.ok(&["stop", &id]).and_then(|_| cri.ok(&["rm", &id])) {
            self.fail(&format!("remove tick {name}: {e}"));
        }
        let mut last = Ok(());
        if !wait_until(Duration::from_secs(15), || {
            last = self.check_settled();
            last.is_ok()
        }) {
            self.fail(&last.err().unwrap_or_default());
        }
        if verify {
            let out = self.e.run.verify(&[]).unwrap_or_else(|e| self.fail(&e.0));
            if !out.status.success() {
                self.fail(&format!(
                    "verify failed:\n{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }

    fn pod_for(&mut self, exempt: bool) -> Pod {
        let ns = if exempt { "kube-system" } else { "default" };
        let mine: Vec<Pod> = self
            .pods
            .iter()
            .filter(|p| p.namespace == ns)
            .cloned()
            .collect();
        if !mine.is_empty() && (mine.len() >= 3 || self.rng.chance(75)) {
            return self
                .rng
                .pick(&mine)
                .cloned()
                .unwrap_or_else(|| unreachable!());
        }
        self.serial += 1;
        let name = format!("p{}", self.serial);
        let pod = self
            .e
            .rt
            .run_pod(&PodSpec::new(&name).namespace(ns))
            .unwrap_or_else(|e| self.fail(&format!("pod {name}: {e}")));
        self.log(format!("run pod {ns}/{name} {}", &pod.id[..12]));
        self.pods.push(pod.clone());
        pod
    }

    fn spec(&mut self, kind: Kind, name: &str) -> ContainerSpec {
        match kind {
            Kind::Exclusive => guaranteed(name, 1),
            Kind::Shared => burstable(name),
            Kind::BestEffort => ContainerSpec::new(name).resource("cpu_shares", json!(2)),
            Kind::Exempt if self.rng.chance(50) => guaranteed(name, 1),
            Kind::Exempt => burstable(name),
            Kind::Gpu => {
                let gpu = self.rng.pick(&self.e.host.gpus).cloned().expect("a GPU");
                burstable(name).env("NVIDIA_VISIBLE_DEVICES", &gpu.uuid)
            }
        }
    }

    fn create(&mut self, kind: Kind) {
        let pod = self.pod_for(kind == Kind::Exempt);
        self.serial += 1;
        let name = format!("c{}", self.serial);
        let spec = self.spec(kind, &name);
        self.admit(kind, &pod, spec);
    }

    /// The kubelet restarts a stopped container: a new one of the same name, the next attempt.
    /// Only the last attempt of a name, and only while none of its instances runs: the kubelet
    /// never runs two instances of one container (nri-align hands a recorded container's
    /// decision over to the next instance of its name).
    fn restart_container(&mut self) {
        let ctrs = &self.ctrs;
        let stopped: Vec<usize> = (0..ctrs.len())
            .filter(|&i| {
                let c = &ctrs[i];
                !ctrs.iter().any(|o| {
                    o.pod == c.pod
                        && o.name == c.name
                        && (o.running || o.spec.attempt > c.spec.attempt)
                })
            })
            .collect();
        let Some(&i) = self.rng.pick(&stopped) else {
            return;
        };
        let old = self.ctrs[i].clone();
        let mut spec = old.spec.clone();
        spec.attempt = 1 + self
            .ctrs
            .iter()
            .filter(|c| c.pod == old.pod && c.name == old.name)
            .map(|c| c.spec.attempt)
            .max()
            .unwrap_or(0);
        let pod = self.pods.iter().find(|p| p.id == old.pod).cloned();
        let pod = pod.unwrap_or_else(|| self.fail(&format!("no pod for {}", old.name)));
        self.admit(old.kind, &pod, spec);
    }

    /// Creates and starts `spec` in `pod`: admitted when it fits what the records leave free,
    /// else refused with nri-align's message and nothing left behind.
    fn admit(&mut self, kind: Kind, pod: &Pod, spec: ContainerSpec) {
        let name = spec.name.clone();
        let state = self.state();
        let held = held(&state, Some(&pod.id));
        // One CPU for it and at least one left to the pool. A GPU container is always
        // admitted: its env names the GPU, which it holds when free and otherwise shares, as
        // the kubelet's time-sliced replicas do (`gpu_mode: keep`); the checks after every
        // step still find any GPU held by two or visible as a device node in two.
        let expected = match kind {
            Kind::Exclusive => pool(&self.online(), self.reserved, &held).len() >= 2,
            _ => true,
        };
        let cri = self.e.rt.cri();
        let before = cri.containers().unwrap_or_else(|e| self.fail(&e.0));
        let what = format!(
            "create {kind:?} {name}#{} in {}/{}",
            spec.attempt, pod.namespace, pod.name
        );
        match self.e.rt.create(pod, &spec) {
            Err(e) => {
                let msg = e.0.contains("nri-align: ").then(|| nri_msg(&e.0));
                self.log(format!("{what}: refused: {}", msg.unwrap_or(&e.0)));
                let reason = match kind {
                    Kind::Exclusive => "not enough free cpu",
                    _ => "not enough free gpu",
                };
                if expected || !msg.is_some_and(|m| m.contains(reason)) {
                    self.fail(&format!(
                        "{name} refused (expected admitted: {expected}): {e}"
                    ));
                }
                let after = cri.containers().unwrap_or_else(|e| self.fail(&e.0));
                if after != before {
                    self.fail(&format!("refused {name} left {after:?} (was {before:?})"));
                }
            }
            Ok(id) => {
                if let Err(e) = cri.ok(&["start", &id]) {
                    self.fail(&format!("start {name}: {e}"));
                }
                let cpus = self.observed().get(&id).map(|o| o.proc_cpus.clone());
                self.log(format!("{what}: {} on {cpus:?}", &id[..12]));
                if !expected {
                    self.fail(&format!("{name} admitted though nothing was free for it"));
                }
                self.ctrs.push(Ctr {
                    id,
                    name,
                    kind,
                    pod: pod.id.clone(),
                    running: true,
                    by_record: false,
                    spec,
                });
            }
        }
    }

    fn pick_ctr(&mut self, running: bool) -> Option<usize> {
        let idx: Vec<usize> = (0..self.ctrs.len())
            .filter(|i| !running || self.ctrs[*i].running)
            .collect();
        self.rng.pick(&idx).copied()
    }

    fn cri_ok(&self, args: &[&str]) {
        if let Err(e) = self.e.rt.cri().ok(args) {
            self.fail(&e.0);
        }
    }

    fn stop(&mut self) {
        let Some(i) = self.pick_ctr(true) else { return };
        let (id, name) = (self.ctrs[i].id.clone(), self.ctrs[i].name.clone());
        self.log(format!("stop {name}"));
        self.cri_ok(&["stop", &id]);
        self.ctrs[i].running = false;
    }

    fn remove(&mut self) {
        let Some(i) = self.pick_ctr(false) else {
            return;
        };
        let c = self.ctrs.remove(i);
        self.log(format!("remove {} (running: {})", c.name, c.running));
        if c.running {
            self.cri_ok(&["stop", &c.id]);
        }
        self.cri_ok(&["rm", &c.id]);
    }

    fn remove_pod(&mut self) {
        if self.pods.is_empty() {
            return;
        }
        let pod = self.pods.remove(self.rng.below(self.pods.len()));
        self.log(format!("remove pod {}/{}", pod.namespace, pod.name));
        if let Err(e) = self.e.rt.cri().remove_pod(&pod) {
            self.fail(&e.0);
        }
        self.ctrs.retain(|c| c.pod != pod.id);
    }

    fn update(&mut self) {
        let Some(i) = self.pick_ctr(true) else { return };
        let (id, name) = (self.ctrs[i].id.clone(), self.ctrs[i].name.clone());
        // The kubelet's update for a resize to one whole CPU (request = limit), or to 500m.
        let (quota, shares, to) = if self.rng.chance(50) {
            ("100000", "1024", "1 CPU, Guaranteed")
        } else {
            ("50000", "256", "500m, Burstable")
        };
        let args = [
            "update",
            "--cpu-period",
            "100000",
            "--cpu-quota",
            quota,
            "--cpu-share",
            shares,
            &id,
        ];
        match self.e.rt.cri().ok(&args) {
            Ok(_) => self.log(format!("update {name} to {to}")),
            Err(e) if e.0.contains("nri-align: ") => {
                self.log(format!("update {name} to {to}: refused: {}", nri_msg(&e.0)))
            }
            Err(e) => self.fail(&format!("update {name}: {e}")),
        }
        self.ctrs[i].by_record = true;
    }

    /// SIGKILL nri-align; while it is down the runtime may create, stop or remove a container
    /// without it; then nri-align starts again (Synchronize).
    fn restart_plugin(&mut self) {
        self.log("SIGKILL nri-align".into());
        if let Err(e) = self.check_now() {
            self.fail(&e);
        }
        self.e.plugin.stop(Signal::SIGKILL);
        match self.rng.below(4) {
            0 if self.ctrs.len() < 8 => self.create_unseen(),
            1 => self.stop(),
            2 => self.remove(),
            _ => {}
        }
        self.log("start nri-align again".into());
        self.e.plugin = self
            .e
            .run
            .start(&self.e.rt)
            .unwrap_or_else(|e| self.fail(&format!("nri-align again: {e}")));
        self.registrations = 1;
    }

    /// The runtime creates a container without nri-align (unconstrained); the restarted
    /// nri-align's Synchronize records it and moves it into the pool.
    fn create_unseen(&mut self) {
        let kinds = [
            Kind::Exclusive,
            Kind::Shared,
            Kind::BestEffort,
            Kind::Exempt,
        ];
        let kind = kinds[self.rng.below(kinds.len())];
        let pod = self.pod_for(kind == Kind::Exempt);
        self.serial += 1;
        let name = format!("c{}", self.serial);
        let spec = self.spec(kind, &name);
        let id = self
            .e
            .rt
            .run_container(&pod, &spec)
            .unwrap_or_else(|e| self.fail(&format!("{name} without nri-align: {e}")));
        self.log(format!(
            "create {kind:?} {name} in {}/{} without nri-align: {}",
            pod.namespace,
            pod.name,
            &id[..12]
        ));
        self.ctrs.push(Ctr {
            id,
            name,
            kind,
            pod: pod.id.clone(),
            running: true,
            by_record: true,
            spec,
        });
    }

    fn restart_runtime(&mut self) {
        self.log("SIGKILL the runtime, start it again".into());
        if let Err(e) = self.e.rt.kill(Signal::SIGKILL) {
            self.fail(&e.0);
        }
        if let Err(e) = self.e.rt.start() {
            self.fail(&e.0);
        }
        self.registrations += 1;
        if let Err(e) = self
            .e
            .plugin
            .wait_registrations(self.registrations, Duration::from_secs(30))
        {
            self.fail(&e.0);
        }
    }

    fn reload(&mut self) {
        let online = self.online();
        let new = if self.reserved.is_some() && self.rng.chance(60) {
            None
        } else {
            self.rng.pick(&online).copied()
        };
        let held = held(&self.state(), None);
        // Refused when it reserves a held CPU or leaves no shared one.
        let refused =
            new.is_some_and(|r| held.cpus.contains_key(&r) || online.len() <= held.cpus.len() + 1);
        let text = |r: Option<u32>| match r {
            Some(c) => format!("{BASE_CONFIG}reserved_cpus: \"{c}\"\n"),
            None => BASE_CONFIG.to_string(),
        };
        let config = self.e.config.clone();
        let out = self.e.plugin.output();
        let counts = |o: &str| {
            (
                log_events(o, "configuration reloaded").len(),
                o.matches("configuration not reloaded").count(),
            )
        };
        let (ok0, bad0) = counts(&out);
        if let Err(e) = self.e.run.write_config(&config, &text(new)) {
            self.fail(&e.0);
        }
        self.e.plugin.signal(Signal::SIGHUP);
        let mut now = (ok0, bad0);
        wait_until(Duration::from_secs(10), || {
            now = counts(&self.e.plugin.output());
            now != (ok0, bad0)
        });
        let what = format!("SIGHUP with reserved_cpus {new:?}");
        if now.0 > ok0 {
            self.log(format!("{what}: reloaded"));
            if refused {
                self.fail("reload accepted though it reserves a held CPU or leaves no shared one");
            }
            self.reserved = new;
        } else if now.1 > bad0 {
            self.log(format!("{what}: kept the old configuration"));
            if !refused || !self.e.plugin.output().contains("exclusively") {
                self.fail("reload refused, or refused for another reason");
            }
            // The file says what is in force again, for the next start of nri-align.
            if let Err(e) = self.e.run.write_config(&config, &text(self.reserved)) {
                self.fail(&e.0);
            }
        } else {
            self.fail("no reload within 10 s of SIGHUP");
        }
    }

    /// One random step; returns whether `verify` should follow it.
    fn step(&mut self) -> bool {
        let gpus = !self.e.host.gpus.is_empty();
        let crowded = self.ctrs.len() >= 8;
        match self.rng.below(100) {
            n if n < 40 && !crowded => {
                // The contended kinds (exclusive CPUs, GPUs) twice as often as the others.
                let kinds = [
                    Kind::Exclusive,
                    Kind::Exclusive,
                    Kind::Shared,
                    Kind::BestEffort,
                    Kind::Exempt,
                    Kind::Gpu,
                    Kind::Gpu,
                ];
                let kind = kinds[self.rng.below(if gpus { 7 } else { 5 })];
                self.create(kind);
            }
            n if n < 50 => self.stop(),
            n if n < 57 => self.restart_container(),
            n if n < 67 => self.remove(),
            n if n < 72 => self.remove_pod(),
            n if n < 82 => self.update(),
            n if n < 89 => {
                self.restart_plugin();
                return true;
            }
            n if n < 94 => {
                self.restart_runtime();
                return true;
            }
            _ => self.reload(),
        }
        false
    }
}

fn soak(rt: Runtime) {
    let (seed, steps) = seed_and_steps(DEFAULT_STEPS);
    let Some(e) = Enforced::builder(rt, "soak", "e2e-soak")
        .gpus(2)
        .config(BASE_CONFIG)
        .start()
    else {
        return;
    };
    let t0 = Instant::now();
    eprintln!(
        "soak({}): seed {seed}, {steps} steps (replay: NRI_ALIGN_SOAK_SEED={seed} \
         NRI_ALIGN_SOAK_STEPS={steps} cargo test --test e2e soak::soak::{})",
        rt.name(),
        test_filter(rt)
    );
    let tick_pod = e.rt.run_pod(&PodSpec::new("tick")).expect("tick pod");
    let mut s = Soak {
        e,
        rng: Rng::new(seed),
        seed,
        steps: Vec::new(),
        pods: Vec::new(),
        ctrs: Vec::new(),
        tick_pod,
        serial: 0,
        reserved: None,
        registrations: 1,
        total: steps,
    };
    for _ in 0..steps {
        let verify = s.step();
        if let Err(e) = s.check_now() {
            s.fail(&e);
        }
        s.settle(verify);
    }
    // Everything goes: no record is left, and what nri-align recorded agrees with the host.
    s.log("remove every pod".into());
    for pod in std::mem::take(&mut s.pods) {
        if let Err(e) = s.e.rt.cri().remove_pod(&pod) {
            s.fail(&e.0);
        }
    }
    s.ctrs.clear();
    s.settle(true);
    let left = s.state();
    if !left.is_empty() {
        s.fail(&format!("records left: {:?}", left.keys()));
    }
    let n = s.steps.len();
    eprintln!(
        "soak({}): seed {seed}: {steps} steps ({n} log lines) passed in {:?}; pool {}",
        rt.name(),
        t0.elapsed(),
        format_list(&pool(&s.online(), s.reserved, &held(&left, None)))
    );
}

each_runtime!(soak);
