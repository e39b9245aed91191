//! Proves the real nri-align plugin works as an NRI plugin of every real runtime (containerd 1.7
//! / NRI v0.6.1, containerd 2.1 / NRI v0.8, CRI-O 1.34 / NRI v0.10.0):
//! - it registers, and Synchronize hands it the pods and containers that ran before it
//!   connected; its CreateContainer adjustment (cpuset, mems, an env var, an annotation) is in
//!   the running container and in the runtime spec; the container that ran before it leaves
//!   the CPU it hands out; its error fails the CRI create with its message;
//! - the runtime SIGKILLed and started again while it runs: it reconnects, registers again,
//!   takes in Synchronize (CRI-O reports a cpuset as the container was created, not as
//!   nri-align later updated it: nri-align re-sends its record), and every running container
//!   keeps its CPUs, seen from inside and in its cgroup;
//! - it works as a pre-launched plugin (NRI_PLUGIN_SOCKET, drop-in config), relaunched with
//!   its state after a runtime restart, and, with that state unusable, learns what runs over
//!   the runtime's CRI where NRI v0.6.1 sends it no Synchronize.

use std::time::{Duration, Instant};
use test_support::e2e;
use test_support::each_runtime;

use nix::sys::signal::Signal;
use test_support::e2e::{
    format_list, log_events, skip_unless_ready, status_field, AlignRun, ContainerSpec, Instance,
    PodSpec, RealMachine, Runtime, UpOptions,
};

const MIB: i64 = 1 << 20;

/// A kubelet-style Guaranteed container with `cpus` whole CPUs.
fn guaranteed(name: &str, cpus: i64) -> ContainerSpec {
    ContainerSpec::new(name)
        .cpu_millis(cpus * 1000, Some(cpus * 1000))
        .memory(64 * MIB)
}

/// A Burstable container (shared pool).
fn burstable(name: &str) -> ContainerSpec {
    ContainerSpec::new(name).cpu_millis(250, Some(500))
}

/// The machine's CPUs without `cpu` (the shared pool while one container holds it).
fn all_but(machine: &RealMachine, cpu: u32) -> Vec<u32> {
    machine.cpus.iter().copied().filter(|c| *c != cpu).collect()
}

fn cpus_of(ctrd: &Instance, id: &str) -> String {
    let status = ctrd
        .cri()
        .proc_status(id)
        .expect("exec cat /proc/self/status");
    status_field(&status, "Cpus_allowed_list").unwrap_or_default()
}

#[expect(
    clippy::too_many_lines,
    reason = "one scenario on a real runtime, step by step: each step checks what the steps before left there"
)]
fn registers_synchronizes_and_adjusts(rt: Runtime) {
    let test = format!("registers_synchronizes_and_adjusts({})", rt.name());
    if skip_unless_ready(rt, &test) {
        return;
    }
    let t0 = Instant::now();
    let machine = RealMachine::read().expect("read /sys");
    let online = machine.cpu_list();
    let ctrd = Instance::fresh(rt, "e2e-plug").expect("runtime comes up");
    let cri = ctrd.cri();

    // A pod and a container that run before nri-align connects.
    let early_pod = ctrd.run_pod(&PodSpec::new("early")).expect("early pod");
    let early = ctrd
        .run_container(&early_pod, &burstable("early"))
        .expect("early container");
    assert_eq!(cpus_of(&ctrd, &early), online, "no plugin yet");

    let run = AlignRun::new(ctrd.dir().join("align-state"));
    let plugin = run.start(&ctrd).expect("nri-align registers");
    let out = plugin.output();
    let reg = &log_events(&out, "registering with the runtime")[0];
    assert_eq!(reg["plugin"], "50-nri-align", "{out}");
    let want_nri = format!("NRI {}", rt.nri_version());
    assert!(
        log_events(&out, "configuring")[0]["runtime"].contains(&want_nri),
        "{out}"
    );

    // Synchronize lists what existed before: the early pod and its container, which nri-align
    // records as running (in the shared pool: it has no exclusive CPUs).
    assert!(
        plugin.wait_for_output("recorded as running", Duration::from_secs(10)),
        "{}",
        plugin.output()
    );
    let out = plugin.output();
    let sync = &log_events(&out, "synchronizing")[0];
    assert_eq!(
        (sync["pods"].as_str(), sync["containers"].as_str()),
        ("1", "1"),
        "{out}"
    );
    let recorded = log_events(&out, "recorded as running");
    assert_eq!(recorded.len(), 1, "{out}");
    assert_eq!(recorded[0]["container"], early);
    assert_eq!(recorded[0]["cpus"], online);

    // The adjustment of a Guaranteed container: one exclusive CPU and its node's memory,
    // NRI_ALIGN_DECISION in the environment and the decision annotation.
    let pod = ctrd.run_pod(&PodSpec::new("main")).expect("main pod");
    let t1 = Instant::now();
    let pinned = ctrd
        .run_container(&pod, &guaranteed("pinned", 1))
        .expect("pinned container");
    eprintln!(
        "{test}: create+start with the plugin took {:?}",
        t1.elapsed()
    );
    let status = cri.proc_status(&pinned).expect("status");
    let cpu = status_field(&status, "Cpus_allowed_list").unwrap_or_default();
    let cpu_id: u32 = cpu
        .parse()
        .unwrap_or_else(|_| panic!("one CPU, got {cpu:?}"));
    assert!(machine.cpus.contains(&cpu_id), "{cpu} is not online");
    let node = machine
        .node_of(cpu_id)
        .expect("node of the CPU")
        .to_string();
    assert_eq!(
        status_field(&status, "Mems_allowed_list"),
        Some(node.clone())
    );
    let env = cri.env(&pinned).expect("env");
    let decision = env.get("NRI_ALIGN_DECISION").cloned().unwrap_or_default();
    assert!(
        decision.contains(&format!("cpus={cpu} exclusive=true mems={node}")),
        "{env:?}"
    );
    let spec = cri.inspect(&pinned).expect("inspect");
    let rs = &spec["info"]["runtimeSpec"];
    assert_eq!(rs["linux"]["resources"]["cpu"]["cpus"], cpu.as_str());
    assert_eq!(rs["linux"]["resources"]["cpu"]["mems"], node.as_str());
    assert!(
        rs["process"]["env"].as_array().is_some_and(|e| e
            .iter()
            .any(|v| v == &format!("NRI_ALIGN_DECISION={decision}"))),
        "{rs}"
    );
    assert_eq!(
        rs["annotations"]["nri-align.io/decision"],
        decision.as_str()
    );
    // The container that ran before the plugin is in the shared pool, which just lost that CPU.
    let pool = all_but(&machine, cpu_id);
    assert_eq!(cpus_of(&ctrd, &early), format_list(&pool));
    assert_eq!(ctrd.cgroup_cpus(&early).expect("cgroup"), pool);

    // A plugin error fails the CRI create with the plugin's message.
    let bad_pod = ctrd
        .run_pod(&PodSpec::new("bad").annotation("policy.nri-align.io/pod", "sometimes"))
        .expect("pod with a bad annotation");
    let before = cri.containers().expect("ps");
    let e = ctrd
        .create(&bad_pod, &guaranteed("refused", 1))
        .expect_err("the plugin refuses it")
        .to_string();
    assert!(
        e.contains(
            "nri-align: invalid annotation policy.nri-align.io/pod=\"sometimes\": expected one \
             of: none best-effort restricted single-numa-node"
        ),
        "{e}"
    );
    assert_eq!(cri.containers().expect("ps"), before, "nothing was created");

    eprintln!("{test}: total {:?}", t0.elapsed());
}

/// The runtime SIGKILLed and started again under a running nri-align.
#[expect(
    clippy::too_many_lines,
    reason = "one scenario on a real runtime, step by step: each step checks what the steps before left there"
)]
fn runtime_restart(rt: Runtime) {
    let test = format!("runtime_restart({})", rt.name());
    if skip_unless_ready(rt, &test) {
        return;
    }
    let t0 = Instant::now();
    let machine = RealMachine::read().expect("read /sys");
    let mut ctrd = Instance::fresh(rt, "e2e-restart").expect("runtime comes up");
    let cri = ctrd.cri();
    let run = AlignRun::new(ctrd.dir().join("align-state"));
    let plugin = run.start(&ctrd).expect("nri-align registers");

    // A shared container, then an exclusive one: the shared one is updated to the pool.
    let pod = ctrd.run_pod(&PodSpec::new("main")).expect("pod");
    let shared = ctrd
        .run_container(&pod, &burstable("shared"))
        .expect("shared container");
    assert_eq!(cpus_of(&ctrd, &shared), machine.cpu_list());
    let pinned = ctrd
        .run_container(&pod, &guaranteed("pinned", 1))
        .expect("pinned container");
    let cpu = cpus_of(&ctrd, &pinned);
    let cpu_id: u32 = cpu
        .parse()
        .unwrap_or_else(|_| panic!("one CPU, got {cpu:?}"));
    let pool = all_but(&machine, cpu_id);
    assert_eq!(cpus_of(&ctrd, &shared), format_list(&pool));

    // SIGKILL, start again: nri-align reconnects with backoff and registers again.
    ctrd.kill(Signal::SIGKILL).expect("kill the runtime");
    let t1 = Instant::now();
    ctrd.start().expect("the runtime comes back");
    plugin
        .wait_registrations(2, Duration::from_secs(20))
        .expect("registers again");
    eprintln!(
        "{test}: re-registered {:?} after the runtime restart",
        t1.elapsed()
    );
    let out = plugin.output();
    assert!(
        out.contains("NRI connection lost; reconnecting"),
        "no reconnect in:\n{out}"
    );
    assert!(
        e2e::wait_until(Duration::from_secs(10), || {
            log_events(&plugin.output(), "synchronizing").len() >= 2
        }),
        "no second Synchronize: {}",
        plugin.output()
    );
    let out = plugin.output();
    let sync = &log_events(&out, "synchronizing")[1];
    assert_eq!(sync["containers"], "2", "shared and pinned: {out}");

    // What the restarted runtime reported for the shared container: containerd the cpuset
    // nri-align last gave it, CRI-O the one it was created with. nri-align keeps its record
    // and, where they differ, re-sends it in the Synchronize response.
    // Expected, so not a warning: one line per container at debug, one summary at info.
    let resent: Vec<_> = log_events(
        &out,
        "shared container's reported cpuset is not the pool's; re-sending the pool",
    )
    .into_iter()
    .filter(|e| e.get("container") == Some(&shared))
    .collect();
    let summary = log_events(&out, "re-sent the shared pool's cpuset to shared containers the runtime reports on another one (a pool update not applied before nri-align stopped, or CRI-O reporting cpusets as created after its restart)");
    match rt {
        Runtime::Crio => {
            assert_eq!(resent.len(), 1, "{out}");
            assert_eq!(resent[0]["has"], machine.cpu_list(), "{out}");
            assert_eq!(resent[0]["recorded"], format_list(&pool), "{out}");
            assert_eq!(summary.len(), 1, "{out}");
            assert_eq!(summary[0]["containers"], "1", "{out}");
        }
        Runtime::Containerd(_) => assert!(resent.is_empty() && summary.is_empty(), "{out}"),
    }
    // Running containers keep their placement, seen from inside and in their cgroups, and the
    // runtime's view of the shared one is nri-align's again.
    assert_eq!(cpus_of(&ctrd, &shared), format_list(&pool));
    assert_eq!(ctrd.cgroup_cpus(&shared).expect("cgroup"), pool);
    assert_eq!(cpus_of(&ctrd, &pinned), cpu, "pinned kept its CPU");
    assert_eq!(ctrd.cgroup_cpus(&pinned).expect("cgroup"), vec![cpu_id]);
    let spec = cri.inspect(&shared).expect("inspect");
    assert_eq!(
        spec["info"]["runtimeSpec"]["linux"]["resources"]["cpu"]["cpus"],
        format_list(&pool).as_str(),
        "the runtime's spec of the shared container"
    );
    let out = run.verify(&[]).expect("verify");
    assert!(
        out.status.success(),
        "verify after the restart:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The next container is aligned from the state that survived: the pinned CPU is still
    // held, so a shared container starts on the rest.
    let after = ctrd
        .run_container(&pod, &burstable("after"))
        .expect("container after the restart");
    assert_eq!(cpus_of(&ctrd, &after), format_list(&pool));
    let env = cri.env(&after).expect("env");
    assert!(
        env.get("NRI_ALIGN_DECISION")
            .is_some_and(|d| d.contains("exclusive=false")),
        "{env:?}"
    );
    eprintln!("{test}: total {:?}", t0.elapsed());
}

/// nri-align in `rt`'s plugin directory as `45-nri-align` with the drop-in config `dropin`
/// plus `cri_socket` (what runs is listed over this instance's CRI, never the host's),
/// launched by the runtime (restarted for it) and registered; instance `name`.
struct Launched {
    ctrd: Instance,
    run: AlignRun,
    log: std::path::PathBuf,
}

impl Launched {
    fn start(rt: Runtime, name: &str, dropin: &str) -> Self {
        let mut ctrd =
            Instance::fresh_with(rt, name, UpOptions::default()).expect("runtime comes up");
        let run = AlignRun::new(ctrd.dir().join("align-state"));
        let script = ctrd.dir().join("nri-align-launcher");
        let log = ctrd.dir().join("nri-align-launched.log");
        run.launcher_script(&script, &log).expect("launcher");
        let dropin = format!("{dropin}cri_socket: {}\n", ctrd.cri_socket().display());
        ctrd.install_prelaunched_plugin("45", "nri-align", &script, Some(&dropin))
            .expect("install");
        ctrd.kill(Signal::SIGTERM).expect("stop the runtime");
        ctrd.start()
            .expect("the runtime starts and launches nri-align");
        assert!(
            e2e::wait_until(Duration::from_secs(20), || read_text(&log)
                .contains(": registered")),
            "not registered; plugin log:\n{}\nruntime log:\n{}",
            read_text(&log),
            ctrd.log_tail(30)
        );
        Launched { ctrd, run, log }
    }
}

/// Waits until nri-align, launched again by the restarted runtime, registered a second time.
fn wait_relaunched(log: &std::path::Path) {
    assert!(
        e2e::wait_until(Duration::from_secs(20), || {
            log_events(&read_text(log), "registered").len() >= 2
        }),
        "not relaunched:\n{}",
        read_text(log)
    );
}

/// What nri-align logged so far at `path` (every launch appends).
fn read_text(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// nri-align launched by the runtime from its plugin directory, configured by its drop-in file.
fn prelaunched(rt: Runtime) {
    let test = format!("prelaunched({})", rt.name());
    if skip_unless_ready(rt, &test) {
        return;
    }
    let t0 = Instant::now();
    let machine = RealMachine::read().expect("read /sys");
    // The drop-in config reaches the plugin in Configure: kube-system is left alone.
    let Launched {
        mut ctrd,
        run: _run,
        log,
    } = Launched::start(rt, "e2e-prel", "exempt_namespaces: [kube-system]\n");
    let read_log = || read_text(&log);
    let out = read_log();
    let reg = &log_events(&out, "registering with the runtime")[0];
    assert_eq!(reg["plugin"], "45-nri-align", "{out}");
    assert_eq!(reg["endpoint"], "InheritedFd(3)", "{out}");

    let pod = ctrd.run_pod(&PodSpec::new("app")).expect("pod");
    let x = ctrd
        .run_container(&pod, &guaranteed("x", 1))
        .expect("container");
    let cpu = cpus_of(&ctrd, &x);
    let cpu_id: u32 = cpu
        .parse()
        .unwrap_or_else(|_| panic!("one CPU, got {cpu:?}"));
    let env = ctrd.cri().env(&x).expect("env");
    assert!(
        env.get("NRI_ALIGN_DECISION")
            .is_some_and(|d| d.contains(&format!("cpus={cpu} exclusive=true"))),
        "{env:?}"
    );
    let sys_pod = ctrd
        .run_pod(&PodSpec::new("sys").namespace("kube-system"))
        .expect("kube-system pod");
    let sys = ctrd
        .run_container(&sys_pod, &guaranteed("sys", 1))
        .expect("exempt container");
    let env = ctrd.cri().env(&sys).expect("env");
    assert!(!env.contains_key("NRI_ALIGN_DECISION"), "{env:?}");
    // Exempt: never aligned, on the shared pool, never on x's exclusive CPU.
    let pool = all_but(&machine, cpu_id);
    assert_eq!(
        cpus_of(&ctrd, &sys),
        format_list(&pool),
        "exempt: the shared pool"
    );

    // NRI v0.6.1 sends no Synchronize to launched plugins; v0.8 does.
    let synced = !log_events(&read_log(), "synchronizing").is_empty();
    assert_eq!(synced, rt.synchronizes_launched_plugins(), "{}", read_log());

    // The runtime restarted: the plugin exits with its connection and is launched again; its
    // state (and on v0.6.1 nothing else) says x still holds its CPU.
    ctrd.kill(Signal::SIGKILL).expect("kill the runtime");
    ctrd.start()
        .expect("the runtime comes back and relaunches nri-align");
    wait_relaunched(&log);
    let out = read_log();
    assert!(out.contains("previous decisions restored"), "{out}");
    let y = ctrd
        .run_container(&pod, &burstable("y"))
        .expect("container after the restart");
    assert_eq!(cpus_of(&ctrd, &y), format_list(&pool));
    eprintln!("{test}: total {:?}", t0.elapsed());
}

/// nri-align launched by the runtime, its state file unusable when the runtime restarts (a
/// rollback to a build that reads another layout, a damaged disk): it must still know what
/// runs. On NRI v0.6.1 no Synchronize comes, so it lists the running containers over the
/// runtime's CRI (`cri_socket`); later runtimes Synchronize. Either way the exclusive CPU a
/// running container holds stays out of the shared pool and out of new decisions.
fn prelaunched_state_lost(rt: Runtime) {
    let test = format!("prelaunched_state_lost({})", rt.name());
    if skip_unless_ready(rt, &test) {
        return;
    }
    let t0 = Instant::now();
    let machine = RealMachine::read().expect("read /sys");
    let Launched { mut ctrd, run, log } = Launched::start(rt, "e2e-plost", "");
    let read_log = || read_text(&log);
    let state_dir = ctrd.dir().join("align-state");
    let pod = ctrd
        .run_pod(&PodSpec::new("app").annotation("policy.nri-align.io/pod", "single-numa-node"))
        .expect("pod");
    let x = ctrd
        .run_container(&pod, &guaranteed("x", 1))
        .expect("container");
    let cpu_id: u32 = cpus_of(&ctrd, &x)
        .parse()
        .unwrap_or_else(|_| panic!("one exclusive CPU"));
    let pool = all_but(&machine, cpu_id);

    ctrd.kill(Signal::SIGKILL).expect("kill the runtime");
    std::fs::write(state_dir.join("state.log"), "not a state log\n").expect("damage the state");
    ctrd.start()
        .expect("the runtime comes back and relaunches nri-align");
    wait_relaunched(&log);
    // At once, as a kubelet retrying its creations would: on v0.6.1 the creation waits for the
    // listing.
    let y = ctrd
        .run_container(&pod, &burstable("y"))
        .expect("container after the restart");
    let out = read_log();
    assert!(out.contains("previous state unusable"), "{out}");
    let listings = log_events(
        &out,
        "listed the running containers over CRI (this runtime sends launched plugins no Synchronize)",
    );
    // One per start where no Synchronize comes (the first start's found nothing to list).
    let expected = if rt.synchronizes_launched_plugins() {
        0
    } else {
        2
    };
    assert_eq!(listings.len(), expected, "{out}");
    if let Some(l) = listings.last() {
        eprintln!("{test}: CRI listing after the restart {l:?}");
        assert_eq!(l["containers"], "1", "x: {l:?}");
    }
    let state = run.state().expect("state");
    let rec = state
        .get(&x)
        .unwrap_or_else(|| panic!("x recorded again:\n{out}"));
    assert_eq!(rec["assignment"]["exclusive"], true, "{rec}");
    // Rebuilt from what runs, it still says what the pod asks for, and that it holds.
    assert_eq!(rec["assignment"]["policy"], "single-numa-node", "{rec}");
    assert_eq!(rec["assignment"]["aligned"], true, "{rec}");
    // And the record says, typed, that it was found running, not decided.
    assert_eq!(rec["found_running"], true, "{rec}");
    assert_eq!(
        cpus_of(&ctrd, &y),
        format_list(&pool),
        "the shared pool leaves x's CPU out:\n{out}"
    );
    eprintln!("{test}: total {:?}", t0.elapsed());
}

each_runtime!(
    registers_synchronizes_and_adjusts,
    runtime_restart,
    prelaunched,
    prelaunched_state_lost
);
