//! Proves nri-align keeps its decisions consistent under load, on every real runtime
//! (containerd 1.7, 2.1, CRI-O) and an emulated host with this machine's CPUs and NUMA nodes
//! plus two fake GPUs:
//! - nri-align is SIGKILLed during a burst of 30 creations and started again: no exclusive CPU
//!   and no GPU is ever held by two live containers, and every container created afterwards is
//!   aligned;
//! - 50 concurrent creations: every decision is consistent with every other one.
//!
//! On a small machine most exclusive requests are refused (the shared pool keeps one CPU), so
//! the mix also has GPU containers (two GPUs, named by several) and shared ones: the invariants are
//! about who holds what among the containers that do run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use test_support::e2e;
use test_support::each_runtime;

use nix::sys::signal::Signal;
use serde_json::Value;
use test_support::e2e::{
    format_list, log_events, metric, recorded_ids, scan_cgroup, scrape, skip_unless_ready,
    AlignRun, ContainerSpec, EmulatedHost, Instance, PodSpec, Runtime, Seen, UpOptions,
};

const MIB: i64 = 1 << 20;
/// The GPUs of these suites are named through NVIDIA_VISIBLE_DEVICES without a kubelet.
const TRUST: &str = "trust_visible_devices_env: true\n";

/// The kinds of container the load tests create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Guaranteed, one whole CPU: exclusive.
    Exclusive,
    /// Burstable, one GPU named through NVIDIA_VISIBLE_DEVICES.
    Gpu,
    /// Burstable: shared pool.
    Shared,
}

/// One creation of the burst: its index, kind, and the container id or the CRI error.
type Outcome = (usize, Kind, Result<String, String>);

/// Recorded decisions by container id: (exclusive, cpus, gpus).
type Records = BTreeMap<String, (bool, Vec<u32>, Vec<String>)>;

fn spec(kind: Kind, name: &str, host: &EmulatedHost, i: usize) -> ContainerSpec {
    match kind {
        Kind::Exclusive => ContainerSpec::new(name)
            .cpu_millis(1000, Some(1000))
            .memory(32 * MIB),
        Kind::Gpu => ContainerSpec::new(name).cpu_millis(200, None).env(
            "NVIDIA_VISIBLE_DEVICES",
            &host.gpus[i % host.gpus.len()].uuid,
        ),
        Kind::Shared => ContainerSpec::new(name).cpu_millis(100, Some(300)),
    }
}

/// Recorded decisions: id -> (exclusive, cpus, gpus).
fn records(run: &AlignRun) -> Records {
    run.state()
        .unwrap_or_default()
        .into_iter()
        .map(|(id, r)| {
            let a = &r["assignment"];
            let strs = |v: &Value| -> Vec<String> {
                v.as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str())
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default()
            };
            (
                id,
                (
                    a["exclusive"].as_bool().unwrap_or(false),
                    recorded_ids(&a["cpus"]),
                    strs(&a["gpus"]),
                ),
            )
        })
        .collect()
}

/// Double holdings among the live containers `seen`: an exclusive CPU of one recorded
/// container in another live container's affinity, or a GPU node in two containers' /dev.
/// Unless `strict`, containers the runtime created while nri-align was down (no decision in
/// their environment) are left out: NRI creates containers without an absent plugin, and they
/// run unconstrained until the restarted plugin's Synchronize moves them into the pool.
fn double_holdings(seen: &BTreeMap<String, Seen>, recs: &Records, strict: bool) -> Vec<String> {
    let mut problems = Vec::new();
    for (owner, (exclusive, cpus, _)) in recs {
        if !*exclusive || !seen.contains_key(owner) {
            continue;
        }
        for (other, s) in seen {
            if other == owner || (!strict && !s.decision) {
                continue;
            }
            let shared: Vec<u32> = s
                .cpus
                .iter()
                .copied()
                .filter(|c| cpus.contains(c))
                .collect();
            if !shared.is_empty() {
                problems.push(format!(
                    "exclusive CPUs {shared:?} of {} also in {} ({:?})",
                    &owner[..12],
                    &other[..12.min(other.len())],
                    s.cpus
                ));
            }
        }
    }
    let mut gpu_users: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, s) in seen {
        for d in s.devices.iter().filter(|d| d.starts_with("/dev/nvidia")) {
            gpu_users.entry(d).or_default().push(id);
        }
    }
    for (d, users) in gpu_users {
        if users.len() > 1 {
            problems.push(format!("{d} visible in {users:?}"));
        }
    }
    // The records themselves never hand out a CPU or GPU twice.
    let mut cpu_owner: BTreeMap<u32, &str> = BTreeMap::new();
    let mut gpu_owner: BTreeMap<&str, &str> = BTreeMap::new();
    for (id, (exclusive, cpus, gpus)) in recs {
        for c in cpus.iter().filter(|_| *exclusive) {
            if let Some(o) = cpu_owner.insert(*c, id) {
                problems.push(format!("CPU {c} recorded for {o} and {id}"));
            }
        }
        for g in gpus {
            if let Some(o) = gpu_owner.insert(g, id) {
                problems.push(format!("GPU {g} recorded for {o} and {id}"));
            }
        }
    }
    problems
}

/// Containers only (sandboxes run under the same cgroup parent).
fn containers_only(ctrd: &Instance, mut seen: BTreeMap<String, Seen>) -> BTreeMap<String, Seen> {
    let pods: BTreeSet<String> = ctrd.cri().pods().unwrap_or_default().into_iter().collect();
    seen.retain(|id, _| !pods.contains(id));
    seen
}

/// Checks containers `ids` against their records and each other: no double holding, live CPUs
/// equal to the record's applied CPUs, GPU node and env consistent, and (`with_env`) the
/// decision in the environment (containers created while nri-align was down have none).
fn check_consistent(
    ctrd: &Instance,
    run: &AlignRun,
    host: &EmulatedHost,
    ids: &[String],
    with_env: bool,
) {
    let state = run.state().expect("state");
    let recs = records(run);
    let seen = containers_only(
        ctrd,
        scan_cgroup(ctrd.var("CGROUP_PARENT").expect("parent")),
    );
    let problems = double_holdings(&seen, &recs, true);
    assert!(problems.is_empty(), "{problems:#?}");
    for id in ids {
        let rec = state
            .get(id)
            .unwrap_or_else(|| panic!("{id} admitted but not recorded"));
        let live = ctrd.live(id).expect("inspect").expect("running");
        let applied = recorded_ids(&rec["applied_cpus"]);
        assert_eq!(live.cpus, applied, "{id}: live vs recorded CPUs");
        let decision = live
            .env
            .get("NRI_ALIGN_DECISION")
            .cloned()
            .unwrap_or_default();
        assert!(
            !with_env || decision.starts_with("policy="),
            "{id}: no decision in {:?}",
            live.env
        );
        let gpus: Vec<String> = rec["assignment"]["gpus"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let want: Vec<String> = rec["devices"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(live.devices, want, "{id}: devices");
        if let Some(uuid) = live
            .env
            .get("NVIDIA_VISIBLE_DEVICES")
            .filter(|_| !gpus.is_empty())
        {
            let gpu = host
                .gpus
                .iter()
                .find(|g| &g.uuid == uuid)
                .unwrap_or_else(|| panic!("{id}: unknown UUID {uuid}"));
            assert_eq!(
                live.devices,
                vec![format!("/dev/nvidia{}", gpu.minor)],
                "{id}"
            );
        }
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one scenario on a real runtime, step by step: each step checks what the steps before left there"
)]
fn burst_with_plugin_kill(rt: Runtime) {
    let test = format!("burst_with_plugin_kill({})", rt.name());
    if skip_unless_ready(rt, &test) {
        return;
    }
    let t0 = Instant::now();
    let ctrd = Instance::fresh(rt, "e2e-burst").expect("runtime comes up");
    let host = EmulatedHost::of_this_machine(&ctrd.dir().join("host"), 2, 0).expect("emulate");
    let mut run = AlignRun::new(ctrd.dir().join("align-state")).on(&host);
    // GPUs named the envvar strategy's way without a kubelet: the node vouches for the variable.
    run.write_config(&ctrd.dir().join("nri-align.yaml"), TRUST)
        .expect("config");
    let first = Mutex::new(Some(run.start(&ctrd).expect("nri-align registers")));
    let second = Mutex::new(None);
    let parent = ctrd.var("CGROUP_PARENT").expect("parent").to_string();
    let pods: Vec<_> = (0..3)
        .map(|p| {
            ctrd.run_pod(&PodSpec::new(&format!("burst{p}")))
                .expect("pod")
        })
        .collect();
    let kinds = [Kind::Exclusive, Kind::Gpu, Kind::Shared];

    let done = AtomicUsize::new(0);
    let finished = AtomicBool::new(false);
    let results: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    let violations: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let unknown_live = AtomicUsize::new(0);
    let samples = AtomicUsize::new(0);
    std::thread::scope(|s| {
        // The burst.
        s.spawn(|| {
            for i in 0..30 {
                let kind = kinds[i % 3];
                let r = ctrd
                    .run_container(&pods[i % 3], &spec(kind, &format!("c{i}"), &host, i / 3))
                    .map_err(|e| e.to_string());
                results.lock().expect("lock").push((i, kind, r));
                done.store(i + 1, Ordering::SeqCst);
            }
            finished.store(true, Ordering::SeqCst);
        });
        // SIGKILL of the plugin after the 10th creation, restart half a second later.
        s.spawn(|| {
            e2e::wait_until(Duration::from_secs(60), || {
                done.load(Ordering::SeqCst) >= 10
            });
            let mut p = first.lock().expect("lock").take().expect("plugin");
            p.stop(Signal::SIGKILL);
            std::thread::sleep(Duration::from_millis(500));
            *second.lock().expect("lock") = Some(run.start(&ctrd).expect("restarts"));
            // Keep the first one's log for the post-mortem.
            *first.lock().expect("lock") = Some(p);
        });
        // A monitor sampling the live containers all along. A CPU found twice counts when two
        // samples in a row (150 ms apart) see it: the runtime applies pool updates a few ms
        // after nri-align recorded them. A GPU counts at once.
        s.spawn(|| {
            let mut previous: Vec<String> = Vec::new();
            while !finished.load(Ordering::SeqCst) {
                let recs = records(&run);
                let seen = scan_cgroup(&parent);
                let now = double_holdings(&seen, &recs, false);
                for v in &now {
                    if v.contains("/dev/nvidia") || previous.contains(v) {
                        violations.lock().expect("lock").push(v.clone());
                    }
                }
                previous = now;
                let strays = seen.keys().filter(|id| !recs.contains_key(*id)).count();
                unknown_live.fetch_max(strays, Ordering::SeqCst);
                samples.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(150));
            }
        });
    });
    let burst_time = t0.elapsed();
    let second = second
        .into_inner()
        .expect("lock")
        .expect("restarted plugin");
    let results = results.into_inner().expect("lock");
    let v = violations.into_inner().expect("lock");
    assert!(v.is_empty(), "double holdings during the burst: {v:#?}");
    assert!(samples.load(Ordering::SeqCst) > 5, "the monitor sampled");

    // After the restart: the state was restored, Synchronize took in what ran meanwhile.
    let out = second.output();
    assert!(out.contains("previous decisions restored"), "{out}");
    assert!(!log_events(&out, "synchronizing").is_empty(), "{out}");
    // Every creation either ran or was refused by nri-align with its message (or failed while
    // nri-align was down mid-request).
    let mut admitted = Vec::new();
    for (i, kind, r) in &results {
        match r {
            Ok(id) => admitted.push((*kind, id.clone())),
            Err(e) => assert!(
                e.contains("nri-align: ") || e.contains("50-nri-align"),
                "c{i} ({kind:?}) failed for another reason: {e}"
            ),
        }
    }
    let by_kind = |k: Kind| admitted.iter().filter(|(x, _)| *x == k).count();
    eprintln!(
        "{test}: burst {burst_time:?}; created {} exclusive, {} gpu, {} shared of 10 each; at most \
         {} containers unknown to the state at once (created while nri-align was down)",
        by_kind(Kind::Exclusive),
        by_kind(Kind::Gpu),
        by_kind(Kind::Shared),
        unknown_live.load(Ordering::SeqCst)
    );

    // Every container created from now on is aligned.
    let pod = &pods[0];
    let mut after = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        match ctrd.run_container(pod, &spec(*kind, &format!("after{i}"), &host, i)) {
            Ok(id) => after.push(id),
            Err(e) => assert!(e.to_string().contains("nri-align: "), "{e}"),
        }
    }
    assert!(!after.is_empty(), "at least the shared one runs");
    // What ran while nri-align was down, or started while its Synchronize moved it (an update
    // the runtime applies to the spec only; nri-align resends it with the next response, here
    // the creations above), is in the pool now.
    let settled = e2e::wait_until(Duration::from_secs(10), || {
        let seen = containers_only(&ctrd, scan_cgroup(&parent));
        double_holdings(&seen, &records(&run), true).is_empty()
    });
    let seen = containers_only(&ctrd, scan_cgroup(&parent));
    assert!(
        settled,
        "after the restart: {:#?}",
        double_holdings(&seen, &records(&run), true)
    );
    let recs = records(&run);
    let running: Vec<&String> = seen.keys().collect();
    for id in &running {
        assert!(
            recs.contains_key(*id),
            "{id} runs but nri-align does not track it"
        );
    }

    // Everything that runs, the burst included, is where its record says; what was created
    // from now on also carries its decision.
    let burst_ids: Vec<String> = running.iter().map(|id| id.to_string()).collect();
    check_consistent(&ctrd, &run, &host, &burst_ids, false);
    check_consistent(&ctrd, &run, &host, &after, true);
    let out = run.verify(&[]).expect("verify");
    assert!(
        out.status.success(),
        "verify after the burst:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{test}: total {:?}", t0.elapsed());
}

#[expect(
    clippy::too_many_lines,
    reason = "one scenario on a real runtime, step by step: each step checks what the steps before left there"
)]
fn fifty_concurrent(rt: Runtime) {
    let test = format!("fifty_concurrent({})", rt.name());
    if skip_unless_ready(rt, &test) {
        return;
    }
    let t0 = Instant::now();
    // 50 crictl processes at once on a small, shared machine can starve the plugin past
    // the runtime's default 2 s request timeout, after which the runtime drops it and creates
    // the rest unaligned; this test is about consistent decisions, not that latency.
    let opts = UpOptions {
        request_timeout: Some("10s".into()),
        ..UpOptions::default()
    };
    let ctrd = Instance::fresh_with(rt, "e2e-conc", opts).expect("runtime comes up");
    let host = EmulatedHost::of_this_machine(&ctrd.dir().join("host"), 2, 0).expect("emulate");
    let mut run = AlignRun::new(ctrd.dir().join("align-state")).on(&host);
    run.write_config(
        &ctrd.dir().join("nri-align.yaml"),
        &format!("metrics_address: \"127.0.0.1:0\"\n{TRUST}"),
    )
    .expect("config");
    let plugin = run.start(&ctrd).expect("nri-align registers");
    let metrics = plugin.metrics_address().expect("metrics");
    let online = host.machine.cpus.clone();
    let pods: Vec<_> = (0..5)
        .map(|p| {
            ctrd.run_pod(&PodSpec::new(&format!("conc{p}")))
                .expect("pod")
        })
        .collect();
    // 10 exclusive, 10 GPU, 30 shared, all at once.
    let plan: Vec<Kind> = (0..50)
        .map(|i| match i % 5 {
            0 => Kind::Exclusive,
            1 => Kind::Gpu,
            _ => Kind::Shared,
        })
        .collect();
    let t1 = Instant::now();
    let results: Vec<(Kind, Result<String, String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = plan
            .iter()
            .enumerate()
            .map(|(i, kind)| {
                let (ctrd, host, pod) = (&ctrd, &host, &pods[i % pods.len()]);
                s.spawn(move || {
                    let r = ctrd
                        .run_container(pod, &spec(*kind, &format!("c{i}"), host, i))
                        .map_err(|e| e.to_string());
                    (*kind, r)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let burst = t1.elapsed();

    let ok = |k: Kind| -> Vec<String> {
        results
            .iter()
            .filter(|(x, r)| *x == k && r.is_ok())
            .filter_map(|(_, r)| r.clone().ok())
            .collect()
    };
    let (excl, gpus, shared) = (ok(Kind::Exclusive), ok(Kind::Gpu), ok(Kind::Shared));
    let refusals: Vec<&String> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().err())
        .collect();
    eprintln!(
        "{test}: 50 concurrent create+start in {burst:?}: {} exclusive, {} gpu, {} shared admitted",
        excl.len(),
        gpus.len(),
        shared.len()
    );
    // All shared containers run; the exclusive ones fill all but one CPU. The GPU containers
    // all run too: GPUs are kept as named (gpu_mode: keep, the default; a vouched-for env is
    // never remapped), and a GPU the env names for several containers is held by the first
    // and used shared by the others, as a device plugin's time-sliced replicas are.
    assert_eq!(shared.len(), 30, "{refusals:#?}");
    assert_eq!(excl.len(), (online.len() - 1).min(10), "{refusals:#?}");
    assert_eq!(gpus.len(), 10, "{refusals:#?}");
    for e in &refusals {
        assert!(
            e.contains("must keep at least one CPU") || e.contains("not enough free gpu"),
            "unexpected refusal: {e}"
        );
    }
    let admitted: Vec<String> = excl.iter().chain(&gpus).chain(&shared).cloned().collect();
    // The state holds exactly the admitted containers.
    let recs = records(&run);
    assert_eq!(
        recs.keys().cloned().collect::<BTreeSet<_>>(),
        admitted.iter().cloned().collect::<BTreeSet<_>>()
    );
    // Shared containers all ended on the final pool, whatever order they were created in.
    let taken: Vec<u32> = recs
        .values()
        .filter(|r| r.0)
        .flat_map(|r| r.1.clone())
        .collect();
    let pool: Vec<u32> = online
        .iter()
        .copied()
        .filter(|c| !taken.contains(c))
        .collect();
    for id in shared.iter().chain(&gpus) {
        let cpus = ctrd.live(id).expect("inspect").expect("running").cpus;
        assert_eq!(format_list(&cpus), format_list(&pool), "{id}");
    }
    check_consistent(&ctrd, &run, &host, &admitted, true);
    // Metrics agree with what CRI saw.
    let body = scrape(&metrics).expect("scrape");
    let sum = |prefix: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        sum("nri_align_admissions_total{"),
        admitted.len() as f64,
        "{body}"
    );
    assert_eq!(
        sum("nri_align_rejections_total{"),
        refusals.len() as f64,
        "{body}"
    );
    assert_eq!(
        metric(&body, "nri_align_decision_duration_seconds_count"),
        Some(50.0),
        "{body}"
    );
    let out = run.verify(&[]).expect("verify");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let repaired = log_events(
        &plugin.output(),
        "runtime lost a cpuset update while starting the container; cgroup repaired",
    )
    .len();
    eprintln!(
        "{test}: total {:?}; {repaired} cpuset updates lost by the runtime and repaired",
        t0.elapsed()
    );
}

each_runtime!(burst_with_plugin_kill, fifty_concurrent);
