//! Issue 2, item 8: the real nri-align plugin against both real containerd builds (1.7 / NRI
//! v0.6.1 and 2.1 / NRI v0.8). It registers, gets Synchronize with the pods and containers that
//! ran before it connected, its CreateContainer adjustment (cpuset and an env var) is in the
//! running container and in the runtime spec, its error fails the CRI create with its message,
//! it reconnects and registers again after containerd is SIGKILLed and restarted, and it works
//! as a pre-launched plugin (NRI_PLUGIN_SOCKET, drop-in config) too.

mod common;

use std::time::{Duration, Instant};

use common::{
    format_list, log_events, skip_unless_root, status_field, AlignRun, ContainerSpec, Containerd,
    Flavor, PodSpec, RealMachine, UpOptions,
};
use nix::sys::signal::Signal;

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

fn cpus_of(ctrd: &Containerd, id: &str) -> String {
    let status = ctrd
        .cri()
        .proc_status(id)
        .expect("exec cat /proc/self/status");
    status_field(&status, "Cpus_allowed_list").unwrap_or_default()
}

fn plugin_lifecycle(flavor: Flavor) {
    let test = format!("plugin_lifecycle({})", flavor.name());
    if skip_unless_root(&test) {
        return;
    }
    let t0 = Instant::now();
    let machine = RealMachine::read().expect("read /sys");
    let online = machine.cpu_list();
    let mut ctrd = Containerd::fresh(flavor, "e2e-plug").expect("containerd comes up");
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
    let want_nri = match flavor {
        Flavor::Trixie => "NRI v0.6.1",
        Flavor::Sid => "NRI v0.8",
    };
    assert!(
        log_events(&out, "configuring")[0]["runtime"].contains(want_nri),
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
    let pool: Vec<u32> = machine
        .cpus
        .iter()
        .copied()
        .filter(|c| *c != cpu_id)
        .collect();
    assert_eq!(cpus_of(&ctrd, &early), format_list(&pool));

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

    // containerd SIGKILLed and started again while the plugin runs: it reconnects with
    // backoff, registers again, and Synchronize shows what kept running.
    ctrd.kill(Signal::SIGKILL).expect("kill containerd");
    let t2 = Instant::now();
    ctrd.start().expect("containerd comes back");
    plugin
        .wait_registrations(2, Duration::from_secs(20))
        .expect("registers again");
    eprintln!(
        "{test}: re-registered {:?} after containerd restart",
        t2.elapsed()
    );
    let out = plugin.output();
    assert!(
        out.contains("NRI connection lost; reconnecting"),
        "no reconnect in:\n{out}"
    );
    assert!(
        common::wait_until(Duration::from_secs(10), || {
            log_events(&plugin.output(), "synchronizing").len() >= 2
        }),
        "no second Synchronize: {}",
        plugin.output()
    );
    let out = plugin.output();
    let sync = &log_events(&out, "synchronizing")[1];
    assert_eq!(sync["containers"], "2", "early and pinned: {out}");
    // The next container still gets its adjustment, from the state that survived: the pinned
    // CPU is still held, so a shared container starts on the rest.
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
    assert_eq!(cpus_of(&ctrd, &pinned), cpu, "pinned kept its CPU");
    eprintln!("{test}: total {:?}", t0.elapsed());
}

#[test]
fn containerd_1_7_trixie_plugin_lifecycle() {
    plugin_lifecycle(Flavor::Trixie);
}

#[test]
fn containerd_2_1_sid_plugin_lifecycle() {
    plugin_lifecycle(Flavor::Sid);
}

/// nri-align launched by containerd from plugin_path, configured by its drop-in file.
fn prelaunched(flavor: Flavor) {
    let test = format!("prelaunched({})", flavor.name());
    if skip_unless_root(&test) {
        return;
    }
    let t0 = Instant::now();
    let machine = RealMachine::read().expect("read /sys");
    let online = machine.cpu_list();
    let mut ctrd = Containerd::fresh_with(flavor, "e2e-prel", UpOptions::default())
        .expect("containerd comes up");
    let run = AlignRun::new(ctrd.dir().join("align-state"));
    let script = ctrd.dir().join("nri-align-launcher");
    let log = ctrd.dir().join("nri-align-launched.log");
    run.launcher_script(&script, &log).expect("launcher");
    // The drop-in config reaches the plugin in Configure: kube-system is left alone.
    ctrd.install_prelaunched_plugin(
        "45",
        "nri-align",
        &script,
        Some("exempt_namespaces: [kube-system]\n"),
    )
    .expect("install");
    ctrd.kill(Signal::SIGTERM).expect("stop containerd");
    ctrd.start()
        .expect("containerd starts and launches nri-align");
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        common::wait_until(Duration::from_secs(20), || read_log()
            .contains(": registered")),
        "not registered; plugin log:\n{}\ncontainerd log:\n{}",
        read_log(),
        ctrd.log_tail(30)
    );
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
    assert_eq!(cpus_of(&ctrd, &sys), online, "exempt: untouched");

    // NRI v0.6.1 sends no Synchronize to launched plugins; v0.8 does.
    let synced = !log_events(&read_log(), "synchronizing").is_empty();
    assert_eq!(synced, flavor == Flavor::Sid, "{}", read_log());

    // containerd restarted: the plugin exits with its connection and is launched again; its
    // state (and on v0.6.1 nothing else) says x still holds its CPU.
    ctrd.kill(Signal::SIGKILL).expect("kill containerd");
    ctrd.start()
        .expect("containerd comes back and relaunches nri-align");
    assert!(
        common::wait_until(Duration::from_secs(20), || {
            log_events(&read_log(), "registered").len() >= 2
        }),
        "not relaunched:\n{}",
        read_log()
    );
    let out = read_log();
    assert!(out.contains("previous decisions restored"), "{out}");
    let y = ctrd
        .run_container(&pod, &burstable("y"))
        .expect("container after the restart");
    let pool: Vec<u32> = machine
        .cpus
        .iter()
        .copied()
        .filter(|c| *c != cpu_id)
        .collect();
    assert_eq!(cpus_of(&ctrd, &y), format_list(&pool));
    eprintln!("{test}: total {:?}", t0.elapsed());
}

#[test]
fn containerd_1_7_trixie_prelaunched_nri_align() {
    prelaunched(Flavor::Trixie);
}

#[test]
fn containerd_2_1_sid_prelaunched_nri_align() {
    prelaunched(Flavor::Sid);
}
