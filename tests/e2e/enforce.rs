//! Proves nri-align's CPU placement reaches running containers on every real runtime
//! (containerd 1.7, 2.1, CRI-O), on an emulated host with this machine's real CPUs and NUMA
//! nodes (runc enforces them), each seen from inside the container and in its cpuset cgroup:
//! - exclusive containers get disjoint CPUs, a running shared container's cpuset shrinks as
//!   they are created and grows back as they go, and the last shared CPU is never given away
//!   (the refusal names the pool);
//! - a SIGHUP that reserves a CPU moves the pool of new and running shared containers, a bad
//!   file keeps the old configuration and says why;
//! - a CRI resource update that makes a shared container Guaranteed gives it a CPU of its own;
//! - rejections and bad annotations fail the CRI create with nri-align's message;
//! - a container of an exempt namespace keeps following the pool after nri-align restarted;
//! - with an exclusive headroom, exclusive containers never move a running shared one.
//!
//! GPUs and NICs are in devices.rs, metrics and `verify` in observe.rs, runtime
//! restarts in plugin.rs, load in enforce_load.rs.

use std::time::Duration;
use test_support::e2e;
use test_support::each_runtime;

use nix::sys::signal::Signal;
use test_support::e2e::suite::{burstable, guaranteed, Enforced};
use test_support::e2e::{format_list, log_events, PodSpec, Runtime};

fn shared_pool_follows_exclusive_containers(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "shared_pool", "e2e-pool").start() else {
        return;
    };
    let online = e.online();
    // A shared container owns the whole pool for now.
    let spod = e.rt.run_pod(&PodSpec::new("shared")).expect("pod");
    let s1 = e.run(&spod, &burstable("s1"));
    e.wait_cpus(&s1, &online);

    // Exclusive containers get disjoint CPUs, taken from the shared pool of the running s1,
    // until only one shared CPU is left: that one is never given away.
    let xpod = e.rt.run_pod(&PodSpec::new("excl")).expect("pod");
    let mut taken: Vec<u32> = Vec::new();
    let mut excl = Vec::new();
    for i in 0..online.len() - 1 {
        let id = e.run(&xpod, &guaranteed(&format!("x{i}"), 1));
        let cpus = e.live(&id).cpus;
        assert_eq!(cpus.len(), 1, "x{i}: {cpus:?}");
        assert!(!taken.contains(&cpus[0]), "x{i} got a taken CPU: {cpus:?}");
        e.wait_cpus(&id, &cpus);
        taken.extend(&cpus);
        excl.push(id);
        let pool: Vec<u32> = online
            .iter()
            .copied()
            .filter(|c| !taken.contains(c))
            .collect();
        e.wait_cpus(&s1, &pool);
    }
    let pool: Vec<u32> = online
        .iter()
        .copied()
        .filter(|c| !taken.contains(c))
        .collect();
    let msg = e.refused(&xpod, &guaranteed("one-too-many", 1));
    assert!(
        msg.contains(&format!(
            "nri-align: not enough free cpu for default/excl/one-too-many: asked 1 exclusive, \
             and the shared pool ({}) must keep at least one CPU",
            format_list(&pool)
        )),
        "{msg}"
    );
    // Released one by one: the pool grows back in the running container. The kubelet keeps a
    // container's CPUs until RemoveContainer, which has no response: the update rides on the
    // node's next container event.
    for (i, id) in excl.iter().enumerate() {
        let mine = e.live(id).cpus;
        e.rt.cri().ok(&["stop", id]).expect("stop");
        e.next_event(&spod, &format!("tick-stop{i}"));
        let still: Vec<u32> = online
            .iter()
            .copied()
            .filter(|c| !taken.contains(c))
            .collect();
        e.wait_cpus(&s1, &still);
        e.rt.cri().ok(&["rm", id]).expect("rm");
        e.next_event(&spod, &format!("tick-rm{i}"));
        taken.retain(|c| !mine.contains(c));
        let pool: Vec<u32> = online
            .iter()
            .copied()
            .filter(|c| !taken.contains(c))
            .collect();
        e.wait_cpus(&s1, &pool);
    }
    e.wait_cpus(&s1, &online);
}

/// With `exclusive_headroom`, exclusive containers are admitted from CPUs kept out of the
/// shared pool: the running shared container is never moved, its cgroup's cpuset stays what it
/// was given at creation, apart from every exclusive container's. This host may have only two
/// CPUs (one for the pool, one of headroom), so the two exclusive containers run one after
/// the other: the second is admitted from the headroom the first gave back, which its release
/// did not hand to the pool (hysteresis).
fn exclusive_headroom_leaves_the_shared_pool_alone(rt: Runtime) {
    let config = "exclusive_headroom: 1\n";
    let Some(e) = Enforced::builder(rt, "headroom", "e2e-headroom")
        .config(config)
        .start()
    else {
        return;
    };
    let online = e.online();
    let spod = e.rt.run_pod(&PodSpec::new("shared")).expect("pod");
    let s1 = e.run(&spod, &burstable("s1"));
    let pool = e.live(&s1).cpus;
    assert!(
        !pool.is_empty() && pool.len() < online.len(),
        "{rt:?}: s1 on {pool:?}, online {online:?}: one CPU per node kept out"
    );
    e.wait_cpus(&s1, &pool);
    let unchanged = |what: &str, exclusive: &[u32]| {
        // An update would have landed with the response that carried it: one more event
        // makes sure any queued one did too.
        e.next_event(&spod, &format!("tick-{what}"));
        e.wait_cpus(&s1, &pool);
        assert!(
            exclusive.iter().all(|c| !pool.contains(c)),
            "{rt:?}: {what}: exclusive {exclusive:?} within the pool {pool:?}"
        );
    };
    let xpod = e.rt.run_pod(&PodSpec::new("excl")).expect("pod");
    let x1 = e.run(&xpod, &guaranteed("x1", 1));
    let first = e.live(&x1).cpus;
    e.wait_cpus(&x1, &first);
    unchanged("x1", &first);
    e.remove(&x1);
    unchanged("x1-removed", &first);
    let x2 = e.run(&xpod, &guaranteed("x2", 1));
    let second = e.live(&x2).cpus;
    e.wait_cpus(&x2, &second);
    unchanged("x2", &second);
    assert_eq!(second.len(), 1, "{rt:?}: x2 on {second:?}");
}

fn sighup_reload_moves_the_pool(rt: Runtime) {
    let Some(mut e) = Enforced::builder(rt, "sighup_reload", "e2e-reload").start() else {
        return;
    };
    let online = e.online();
    let last = *online.last().expect("a CPU");
    let spod = e.rt.run_pod(&PodSpec::new("shared")).expect("pod");
    let s1 = e.run(&spod, &burstable("s1"));
    e.wait_cpus(&s1, &online);

    // Reserving a CPU shrinks the pool. Running containers follow with the next response that
    // can carry updates (nri-align never calls UpdateContainers, which can deadlock
    // containerd): here the next creation.
    let config = e.config.clone();
    e.run
        .write_config(&config, &format!("reserved_cpus: \"{last}\"\n"))
        .expect("config");
    let reloads = |p: &e2e::PluginProcess| log_events(&p.output(), "configuration reloaded").len();
    e.plugin.signal(Signal::SIGHUP);
    assert!(
        e2e::wait_until(Duration::from_secs(10), || reloads(&e.plugin) == 1),
        "{}",
        e.plugin.output()
    );
    let without_last: Vec<u32> = online.iter().copied().filter(|c| *c != last).collect();
    let h1 = e.run(&spod, &burstable("h1"));
    e.wait_cpus(&h1, &without_last);
    e.wait_cpus(&s1, &without_last);

    // A bad file keeps the old configuration and says why.
    e.run
        .write_config(&config, "policy: sometimes\n")
        .expect("config");
    e.plugin.signal(Signal::SIGHUP);
    assert!(
        e.plugin
            .wait_for_output("configuration not reloaded", Duration::from_secs(10)),
        "{}",
        e.plugin.output()
    );
    assert!(
        e.plugin.output().contains("unknown variant `sometimes`"),
        "{}",
        e.plugin.output()
    );

    // Back to no reserved CPU: nothing moves until an event carries the update; stopping h1
    // carries the pool growth to s1.
    e.run.write_config(&config, "").expect("config");
    e.plugin.signal(Signal::SIGHUP);
    assert!(
        e2e::wait_until(Duration::from_secs(10), || reloads(&e.plugin) == 2),
        "{}",
        e.plugin.output()
    );
    assert_eq!(e.live(&s1).cpus, without_last, "nothing moved yet");
    e.remove(&h1);
    e.wait_cpus(&s1, &online);
}

fn cri_update_gives_a_cpu_of_its_own(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "cri_update", "e2e-update").start() else {
        return;
    };
    let online = e.online();
    let spod = e.rt.run_pod(&PodSpec::new("shared")).expect("pod");
    let s1 = e.run(&spod, &burstable("s1"));
    let s2 = e.run(&spod, &burstable("s2"));
    e.wait_cpus(&s2, &online);
    // The kubelet's update for a resize to one whole CPU, request = limit.
    e.rt.cri()
        .ok(&[
            "update",
            "--cpu-period",
            "100000",
            "--cpu-quota",
            "100000",
            "--cpu-share",
            "1024",
            &s2,
        ])
        .expect("crictl update");
    let mine = e.live(&s2).cpus;
    assert_eq!(mine.len(), 1, "s2 after the update: {mine:?}");
    e.wait_cpus(&s2, &mine);
    let rest: Vec<u32> = online
        .iter()
        .copied()
        .filter(|c| !mine.contains(c))
        .collect();
    e.wait_cpus(&s1, &rest);
    // Its CPU stays its own while it is stopped (the kubelet keeps it until RemoveContainer)
    // and comes back to the pool when it is removed, with the next container event.
    e.rt.cri().ok(&["stop", &s2]).expect("stop s2");
    let opod = e.rt.run_pod(&PodSpec::new("other")).expect("pod");
    e.next_event(&opod, "tick-stop");
    e.wait_cpus(&s1, &rest);
    e.rt.cri().ok(&["rm", &s2]).expect("rm s2");
    e.next_event(&opod, "tick-rm");
    e.wait_cpus(&s1, &online);
}

fn rejections_and_bad_annotations_fail_the_create(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "rejections", "e2e-reject").start() else {
        return;
    };
    let m = e.host.machine.clone();
    let before = e.rt.cri().containers().expect("ps");

    // single-numa-node: more memory than any one node has is refused with the message
    // nri-align logs.
    let big_mem = (m.node_mem_kib.values().max().copied().unwrap_or(0) as i64 + (1 << 20)) * 1024;
    let npod = e
        .rt
        .run_pod(&PodSpec::new("snn").annotation("policy.nri-align.io/pod", "single-numa-node"))
        .expect("pod");
    let err = e.refused(&npod, &guaranteed("big", 1).memory(big_mem));
    // The message runs to the end of the line (nri-align-crictl) or of the quoted error in
    // the real crictl's log line.
    let msg = err
        .split("nri-align: ")
        .nth(1)
        .and_then(|m| m.lines().next())
        .and_then(|m| m.split('"').next())
        .map(|m| m.trim_end_matches('\\').trim().to_string())
        .unwrap_or_else(|| panic!("no nri-align message in {err}"));
    assert!(
        msg.contains("memory") && msg.contains("default/snn/big"),
        "{msg}"
    );
    if m.nodes.len() > 1 {
        assert!(msg.contains("under policy single-numa-node"), "{msg}");
    }
    assert!(
        e.plugin.output().contains(&msg),
        "the logged rejection is the same message: {msg:?} from {err:?}"
    );

    // Bad annotations fail with a message that names the key and the accepted values.
    let apod =
        e.rt.run_pod(&PodSpec::new("ann").annotation("cpus.nri-align.io/container.main", "lots"))
            .expect("pod");
    let err = e.refused(&apod, &guaranteed("main", 1));
    assert!(
        err.contains(
            "nri-align: invalid annotation cpus.nri-align.io/container.main=\"lots\": expected \
             one of: auto exclusive shared"
        ),
        "{err}"
    );
    let ppod =
        e.rt.run_pod(&PodSpec::new("ann1").annotation("policy.nri-align.io/pod", "sometimes"))
            .expect("pod");
    let err = e.refused(&ppod, &burstable("main"));
    assert!(
        err.contains(
            "nri-align: invalid annotation policy.nri-align.io/pod=\"sometimes\": expected one \
             of: none best-effort restricted single-numa-node"
        ),
        "{err}"
    );
    let dpod =
        e.rt.run_pod(&PodSpec::new("ann2").annotation("gpus.nri-align.io/pod", "1"))
            .expect("pod");
    let err = e.refused(&dpod, &burstable("main"));
    assert!(err.contains("disabled device annotations"), "{err}");
    assert_eq!(
        e.rt.cri().containers().expect("ps"),
        before,
        "nothing was created"
    );
}

/// A container of an exempt namespace runs on the shared pool, never on CPUs held
/// exclusively, also after nri-align restarted: Synchronize lists it with its record, and the
/// record is kept, so it still moves off the CPU the next exclusive container takes. One
/// created while nri-align was stopped (the runtime ran it on every CPU) is recorded as exempt
/// at Synchronize and moves off that CPU too.
fn exempt_container_follows_the_pool_after_a_restart(rt: Runtime) {
    let Some(mut e) = Enforced::builder(rt, "exempt_restart", "e2e-exrst")
        .config("exempt_namespaces: [kube-system]\n")
        .start()
    else {
        return;
    };
    let online = e.online();
    let spod =
        e.rt.run_pod(&PodSpec::new("sys").namespace("kube-system"))
            .expect("kube-system pod");
    let k1 = e.run(&spod, &burstable("k1"));
    e.wait_cpus(&k1, &online);

    e.plugin.stop(Signal::SIGTERM);
    let k2 = e.run(&spod, &burstable("k2"));
    e.wait_cpus(&k2, &online);
    e.plugin = e.run.start(&e.rt).expect("nri-align again");
    e.plugin
        .wait_registrations(1, Duration::from_secs(20))
        .expect("registered");
    let xpod = e.rt.run_pod(&PodSpec::new("excl")).expect("pod");
    let x = e.run(&xpod, &guaranteed("x", 1));
    let mine = e.live(&x).cpus;
    assert_eq!(mine.len(), 1, "{mine:?}");
    let pool: Vec<u32> = online
        .iter()
        .copied()
        .filter(|c| !mine.contains(c))
        .collect();
    e.wait_cpus(&k1, &pool);
    e.wait_cpus(&k2, &pool);
    // Synchronize came before x's creation: both are recorded as exempt by then.
    let state = e.run.state().expect("state");
    for id in [&k1, &k2] {
        let rec = state
            .get(id)
            .unwrap_or_else(|| panic!("{id} not recorded:\n{}", e.plugin.output()));
        assert_eq!(rec["exempt"], true, "{rec}");
    }
}

/// RemovePodSandbox has no response, and nri-align never calls UpdateContainers: the CPUs an
/// exclusive pod frees reach a running shared container through its cgroup, within a second,
/// with nothing else happening on the node (no later container event to carry them).
fn freed_cpus_reach_a_shared_container_within_a_second(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "pool_regrowth", "e2e-regrow").start() else {
        return;
    };
    let online = e.online();
    let spod = e.rt.run_pod(&PodSpec::new("shared")).expect("pod");
    let s1 = e.run(&spod, &burstable("s1"));
    e.wait_cpus(&s1, &online);
    let xpod = e.rt.run_pod(&PodSpec::new("excl")).expect("pod");
    let x = e.run(&xpod, &guaranteed("x", 1));
    let mine = e.live(&x).cpus;
    let pool: Vec<u32> = online
        .iter()
        .copied()
        .filter(|c| !mine.contains(c))
        .collect();
    e.wait_cpus(&s1, &pool);
    // stopp + rmp of the exclusive pod, then only reads of /proc.
    e.rt.cri().remove_pod_id(&xpod.id).expect("stopp + rmp");
    let removed = std::time::Instant::now();
    let mut seen = Vec::new();
    while removed.elapsed() < Duration::from_secs(1) {
        seen = e.live(&s1).cpus;
        if seen == online {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        seen,
        online,
        "{rt:?}: s1's Cpus_allowed_list {} ms after the exclusive pod's removal",
        removed.elapsed().as_millis()
    );
}

each_runtime!(
    freed_cpus_reach_a_shared_container_within_a_second,
    shared_pool_follows_exclusive_containers,
    exclusive_headroom_leaves_the_shared_pool_alone,
    sighup_reload_moves_the_pool,
    cri_update_gives_a_cpu_of_its_own,
    rejections_and_bad_annotations_fail_the_create,
    exempt_container_follows_the_pool_after_a_restart,
);
