//! Issue 5, item 8 (and the points of items 2-7 an end-to-end run can reach): nri-align on a real
//! containerd, on an emulated host with this machine's real CPUs and NUMA nodes (runc enforces
//! them) plus two fake GPUs (fake NVML, /dev/nvidiaN nodes 195:N) and an RDMA NIC. Everything
//! is observed where it lands: the container's /proc/self/status, env and /dev, the runtime
//! spec, cgroup files, the metrics endpoint, `nri-align verify`.
//!
//! The burst with a killed plugin and the 50 concurrent creations are in e2e_enforce_load.rs.

mod common;

use std::time::{Duration, Instant};

use common::{
    format_list, log_events, metric, scrape, skip_unless_root, AlignRun, ContainerSpec, Containerd,
    EmulatedHost, Flavor, Live, PodSpec,
};
use nix::sys::signal::Signal;

const MIB: i64 = 1 << 20;

fn guaranteed(name: &str, cpus: i64) -> ContainerSpec {
    ContainerSpec::new(name)
        .cpu_millis(cpus * 1000, Some(cpus * 1000))
        .memory(64 * MIB)
}

fn burstable(name: &str) -> ContainerSpec {
    ContainerSpec::new(name).cpu_millis(250, Some(500))
}

fn live(ctrd: &Containerd, id: &str) -> Live {
    ctrd.live(id)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("{id} is not running"))
}

/// Waits until the running container `id` has exactly `cpus` (pool updates are applied by the
/// runtime after the plugin answered, and reload updates asynchronously).
fn wait_cpus(ctrd: &Containerd, id: &str, cpus: &[u32]) {
    let mut seen = Vec::new();
    let ok = common::wait_until(Duration::from_secs(10), || {
        seen = live(ctrd, id).cpus;
        seen == cpus
    });
    assert!(ok, "{id}: cpus {seen:?}, want {cpus:?}");
}

/// `ls` of `dirs` inside the container.
fn ls(ctrd: &Containerd, id: &str, dirs: &[&str]) -> Vec<String> {
    let mut cmd = vec!["ls", "-1"];
    cmd.extend_from_slice(dirs);
    let r = ctrd.cri().exec(id, &cmd).expect("exec ls");
    r.stdout.lines().map(str::to_string).collect()
}

/// The CRI create of `spec` in `pod` must fail; returns the message.
fn refused(ctrd: &Containerd, pod: &common::Pod, spec: &ContainerSpec) -> String {
    match ctrd.create(pod, spec) {
        Ok(id) => panic!("{} was created as {id}", spec.name),
        Err(e) => e.to_string(),
    }
}

/// The cpuset cgroup directory of a process (cgroup v1 cpuset hierarchy or v2).
fn cpuset_dir(pid: u32) -> std::path::PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (
            parts.next(),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
        );
        let base = if ctrls.split(',').any(|c| c == "cpuset") {
            "/sys/fs/cgroup/cpuset"
        } else if ctrls.is_empty() {
            "/sys/fs/cgroup"
        } else {
            continue;
        };
        let dir = std::path::Path::new(base).join(path.trim_start_matches('/'));
        if dir.join("cpuset.cpus").is_file() {
            return dir;
        }
    }
    panic!("no cpuset cgroup for pid {pid}:\n{text}");
}

fn enforce(flavor: Flavor) {
    let test = format!("enforce({})", flavor.name());
    if skip_unless_root(&test) {
        return;
    }
    let t0 = Instant::now();
    let mut ctrd = Containerd::fresh(flavor, "e2e-enf").expect("containerd comes up");
    let cri = ctrd.cri();
    let host = EmulatedHost::of_this_machine(&ctrd.dir().join("host"), 2, 1).expect("emulate");
    let m = host.machine.clone();
    let online = m.cpus.clone();
    let last = *online.last().expect("a CPU");
    let (gpu0, gpu1) = (&host.gpus[0], &host.gpus[1]);
    let mut run = AlignRun::new(ctrd.dir().join("align-state")).on(&host);
    let config = ctrd.dir().join("nri-align.yaml");
    let base_config = "metrics_address: \"127.0.0.1:0\"\n";
    run.write_config(&config, base_config).expect("config");
    let plugin = run.start(&ctrd).expect("nri-align registers");
    let metrics = plugin.metrics_address().expect("metrics endpoint");

    // Least privilege: every capability dropped after connecting, and it says so.
    let caps = &log_events(&plugin.output(), "capabilities dropped")[0];
    assert_eq!(caps["kept"], "[]", "{}", plugin.output());
    let status = std::fs::read_to_string(format!("/proc/{}/status", plugin.pid())).expect("status");
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(
            common::status_field(&status, set).as_deref(),
            Some("0000000000000000"),
            "{set} of the running plugin"
        );
    }

    // A shared container owns the whole pool for now.
    let spod = ctrd.run_pod(&PodSpec::new("shared")).expect("pod");
    let s1 = ctrd.run_container(&spod, &burstable("s1")).expect("s1");
    assert_eq!(live(&ctrd, &s1).cpus, online);

    // SIGHUP reload without a restart: reserving a CPU shrinks the pool. Running containers
    // follow with the next response that can carry updates (nri-align never calls
    // UpdateContainers, which can deadlock containerd): here the next creation.
    run.write_config(
        &config,
        &format!("{base_config}reserved_cpus: \"{last}\"\n"),
    )
    .expect("config");
    let reloads =
        |p: &common::PluginProcess| log_events(&p.output(), "configuration reloaded").len();
    plugin.signal(Signal::SIGHUP);
    assert!(
        common::wait_until(Duration::from_secs(10), || reloads(&plugin) == 1),
        "{}",
        plugin.output()
    );
    let without_last: Vec<u32> = online.iter().copied().filter(|c| *c != last).collect();
    let h1 = ctrd.run_container(&spod, &burstable("h1")).expect("h1");
    assert_eq!(
        live(&ctrd, &h1).cpus,
        without_last,
        "h1 starts on the new pool"
    );
    wait_cpus(&ctrd, &s1, &without_last);
    // A bad file keeps the old configuration and says why.
    run.write_config(&config, "policy: sometimes\n")
        .expect("config");
    plugin.signal(Signal::SIGHUP);
    assert!(
        plugin.wait_for_output("configuration not reloaded", Duration::from_secs(10)),
        "{}",
        plugin.output()
    );
    assert!(
        plugin.output().contains("unknown variant `sometimes`"),
        "{}",
        plugin.output()
    );
    // Back to no reserved CPU; stopping h1 carries the pool growth to s1.
    run.write_config(&config, base_config).expect("config");
    plugin.signal(Signal::SIGHUP);
    assert!(
        common::wait_until(Duration::from_secs(10), || reloads(&plugin) == 2),
        "{}",
        plugin.output()
    );
    assert_eq!(live(&ctrd, &s1).cpus, without_last, "nothing moved yet");
    cri.ok(&["stop", &h1]).expect("stop h1");
    cri.ok(&["rm", &h1]).expect("rm h1");
    wait_cpus(&ctrd, &s1, &online);

    // Exclusive containers get disjoint CPUs, taken from the shared pool of the running s1,
    // until only one shared CPU is left: that one is never given away.
    let xpod = ctrd.run_pod(&PodSpec::new("excl")).expect("pod");
    let mut excl: Vec<(String, Vec<u32>)> = Vec::new();
    for i in 0..online.len() - 1 {
        let id = ctrd
            .run_container(&xpod, &guaranteed(&format!("x{i}"), 1))
            .expect("exclusive container");
        excl.push((id.clone(), live(&ctrd, &id).cpus));
    }
    let taken: Vec<u32> = excl.iter().flat_map(|(_, c)| c.clone()).collect();
    let mut distinct = taken.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        online.len() - 1,
        "disjoint single CPUs: {excl:?}"
    );
    let pool: Vec<u32> = online
        .iter()
        .copied()
        .filter(|c| !taken.contains(c))
        .collect();
    wait_cpus(&ctrd, &s1, &pool);
    let e = refused(&ctrd, &xpod, &guaranteed("one-too-many", 1));
    assert!(
        e.contains(&format!(
            "nri-align: not enough free cpu for default/excl/one-too-many: asked 1 exclusive, \
             and the shared pool ({}) must keep at least one CPU",
            format_list(&pool)
        )),
        "{e}"
    );
    // Released: the pool grows back in the running container.
    for (id, _) in &excl {
        cri.ok(&["stop", id]).expect("stop");
        cri.ok(&["rm", id]).expect("rm");
    }
    wait_cpus(&ctrd, &s1, &online);

    // A CRI resource update is re-evaluated: s2 becomes Guaranteed and gets one CPU of its own.
    let s2 = ctrd.run_container(&spod, &burstable("s2")).expect("s2");
    assert_eq!(live(&ctrd, &s2).cpus, online);
    cri.ok(&[
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
    let mine = live(&ctrd, &s2).cpus;
    assert_eq!(mine.len(), 1, "s2 after the update: {mine:?}");
    let rest: Vec<u32> = online
        .iter()
        .copied()
        .filter(|c| !mine.contains(c))
        .collect();
    wait_cpus(&ctrd, &s1, &rest);
    cri.ok(&["stop", &s2]).expect("stop s2");
    wait_cpus(&ctrd, &s1, &online);

    // GPU pod, GPU named the device plugin's way (NVIDIA_VISIBLE_DEVICES): its node, the control
    // nodes that exist (nvidia-uvm-tools does not), env, one exclusive CPU on the GPU's node.
    let gpod = ctrd.run_pod(&PodSpec::new("gpu-a")).expect("pod");
    let g1 = ctrd
        .run_container(
            &gpod,
            &guaranteed("g1", 1).env("NVIDIA_VISIBLE_DEVICES", &gpu0.uuid),
        )
        .expect("g1");
    let l1 = live(&ctrd, &g1);
    assert_eq!(l1.devices, vec![format!("/dev/nvidia{}", gpu0.minor)]);
    assert_eq!(l1.cpus.len(), 1);
    assert_eq!(l1.mems, m.node_of(l1.cpus[0]).expect("node").to_string());
    let dev = ls(&ctrd, &g1, &["/dev"]);
    for present in ["nvidiactl", "nvidia-uvm"] {
        assert!(
            dev.iter().any(|d| d == present),
            "{present} missing: {dev:?}"
        );
    }
    assert!(
        !dev.iter()
            .any(|d| d == "nvidia-uvm-tools" || d == "nvidia1"),
        "{dev:?}"
    );
    let env = cri.env(&g1).expect("env");
    assert_eq!(
        env.get("CUDA_VISIBLE_DEVICES").map(String::as_str),
        Some("0")
    );
    assert_eq!(env.get("NVIDIA_VISIBLE_DEVICES"), Some(&gpu0.uuid));
    let rest: Vec<u32> = online
        .iter()
        .copied()
        .filter(|c| !l1.cpus.contains(c))
        .collect();
    wait_cpus(&ctrd, &s1, &rest);

    // A second pod is handed the same GPU by a device plugin that knows nothing of nri-align:
    // remapped to the free GPU, which is the only one it sees.
    let gpod2 = ctrd.run_pod(&PodSpec::new("gpu-b")).expect("pod");
    let g2 = ctrd
        .run_container(
            &gpod2,
            &ContainerSpec::new("g2")
                .cpu_millis(500, None)
                .env("NVIDIA_VISIBLE_DEVICES", &gpu0.uuid),
        )
        .expect("g2");
    let l2 = live(&ctrd, &g2);
    assert_eq!(l2.devices, vec![format!("/dev/nvidia{}", gpu1.minor)]);
    assert_eq!(l2.cpus, rest, "a shared GPU container stays in the pool");
    let env = cri.env(&g2).expect("env");
    assert_eq!(
        env.get("CUDA_VISIBLE_DEVICES").map(String::as_str),
        Some("0")
    );
    assert_eq!(env.get("NVIDIA_VISIBLE_DEVICES"), Some(&gpu1.uuid));
    let spec = cri.inspect(&g2).expect("inspect");
    let devs = spec["info"]["runtimeSpec"]["linux"]["devices"].to_string();
    assert!(
        devs.contains(&format!("/dev/nvidia{}", gpu1.minor)),
        "{devs}"
    );
    assert!(
        !devs.contains(&format!("\"/dev/nvidia{}\"", gpu0.minor)),
        "{devs}"
    );

    // A GPU that arrives as a device node cannot be taken away (the runtime would not remove
    // it), so one held by another container is refused instead of shared.
    let gpod3 = ctrd.run_pod(&PodSpec::new("gpu-c")).expect("pod");
    let node1 = format!("/dev/nvidia{}", gpu1.minor);
    let e = refused(
        &ctrd,
        &gpod3,
        &ContainerSpec::new("g3").cpu_millis(500, None).device(
            &node1,
            &host.dev(&node1).to_string_lossy(),
            "rwm",
        ),
    );
    assert!(
        e.contains(&format!("is already held by container {g2}")),
        "{e}"
    );

    // RDMA: the allocated verbs node is kept, rdma_cm added.
    let rpod = ctrd.run_pod(&PodSpec::new("rdma")).expect("pod");
    let uverbs = format!("/dev/infiniband/{}", host.uverbs[0]);
    let r1 = ctrd
        .run_container(
            &rpod,
            &burstable("r1").device(&uverbs, &host.dev(&uverbs).to_string_lossy(), "rwm"),
        )
        .expect("r1");
    assert_eq!(live(&ctrd, &r1).devices, vec![uverbs.clone()]);
    let ib = ls(&ctrd, &r1, &["/dev/infiniband"]);
    assert!(ib.iter().any(|d| d == "rdma_cm"), "{ib:?}");
    assert!(cri.env(&r1).expect("env")["NRI_ALIGN_DECISION"].contains("nics=ibemu0"));

    // single-numa-node: more memory than any one node has is refused with the plugin's message.
    let big_mem = (m.node_mem_kib.values().max().copied().unwrap_or(0) as i64 + (1 << 20)) * 1024;
    let npod = ctrd
        .run_pod(&PodSpec::new("snn").annotation("policy.nri-align.io/pod", "single-numa-node"))
        .expect("pod");
    let e = refused(&ctrd, &npod, &guaranteed("big", 1).memory(big_mem));
    let msg = e
        .split("nri-align: ")
        .nth(1)
        .map(|m| m.lines().next().unwrap_or("").trim().to_string())
        .unwrap_or_else(|| panic!("no nri-align message in {e}"));
    assert!(
        msg.contains("memory") && msg.contains("default/snn/big"),
        "{msg}"
    );
    if m.nodes.len() > 1 {
        assert!(msg.contains("under policy single-numa-node"), "{msg}");
    }
    assert!(
        plugin.output().contains(&msg),
        "the logged rejection is the same message"
    );

    // Bad annotations fail with a message that names the key and the accepted values.
    let apod = ctrd
        .run_pod(&PodSpec::new("ann").annotation("cpus.nri-align.io/container.main", "lots"))
        .expect("pod");
    let e = refused(&ctrd, &apod, &guaranteed("main", 1));
    assert!(
        e.contains(
            "nri-align: invalid annotation cpus.nri-align.io/container.main=\"lots\": expected \
             one of: auto exclusive shared"
        ),
        "{e}"
    );
    let dpod = ctrd
        .run_pod(&PodSpec::new("ann2").annotation("gpus.nri-align.io/pod", "1"))
        .expect("pod");
    let e = refused(&ctrd, &dpod, &burstable("main"));
    assert!(e.contains("disabled device annotations"), "{e}");

    // Metrics: admissions, rejections by reason, the latency histogram, free CPUs and GPUs.
    let body = scrape(&metrics).expect("scrape");
    let sum = |prefix: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    // s1, h1, s2 and its update, g1, g2, r1, and the exclusive x containers.
    let admitted = sum("nri_align_admissions_total{");
    assert_eq!(admitted, (7 + online.len() - 1) as f64, "{body}");
    assert!(
        metric(
            &body,
            "nri_align_admissions_total{policy=\"best-effort\",aligned=\"true\"}"
        )
        .is_some(),
        "{body}"
    );
    for (reason, n) in [
        ("shared-pool-exhausted", 1.0),
        ("invalid-annotation", 2.0),
        ("conflict", 1.0),
    ] {
        let series = format!("nri_align_rejections_total{{reason=\"{reason}\"}}");
        assert_eq!(metric(&body, &series), Some(n), "{series} in\n{body}");
    }
    // Those three and the memory refusal.
    let rejected = sum("nri_align_rejections_total{");
    assert_eq!(rejected, 5.0, "{body}");
    assert_eq!(
        metric(&body, "nri_align_decision_duration_seconds_count"),
        Some(admitted + rejected),
        "{body}"
    );
    // The latency histogram: every decision in the +Inf bucket, and it has finer buckets.
    assert_eq!(
        metric(
            &body,
            "nri_align_decision_duration_seconds_bucket{le=\"+Inf\"}"
        ),
        Some(admitted + rejected),
        "{body}"
    );
    assert!(
        body.lines()
            .filter(|l| l.starts_with("nri_align_decision_duration_seconds_bucket{"))
            .count()
            > 3,
        "{body}"
    );
    let node0 = m.nodes.keys().next().copied().unwrap_or(0);
    let free_cpus = metric(&body, &format!("nri_align_free_cpus{{node=\"{node0}\"}}"));
    assert_eq!(
        free_cpus,
        Some((m.nodes[&node0].len() - 1) as f64),
        "g1 holds one: {body}"
    );
    let free_gpus = metric(&body, &format!("nri_align_free_gpus{{node=\"{node0}\"}}"));
    assert_eq!(free_gpus, Some(0.0), "g1 and g2 hold both: {body}");

    // verify: every running container matches its decision...
    let out = run.verify(&[]).expect("verify");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for id in [&s1, &g1, &g2, &r1] {
        let line = text
            .lines()
            .find(|l| l.contains(&id[..13]))
            .unwrap_or_else(|| panic!("{id} not in\n{text}"));
        assert!(line.starts_with("ok "), "{line}");
    }
    // ...until a cpuset is changed behind nri-align's back.
    let cg = cpuset_dir(l1.pid).join("cpuset.cpus");
    std::fs::write(&cg, format_list(&online)).expect("widen g1's cpuset");
    let out = run.verify(&[]).expect("verify");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success(), "drift must fail verify:\n{text}");
    assert!(
        text.contains(&format!(
            "cgroup cpuset.cpus is {}, decided {}",
            format_list(&online),
            format_list(&l1.cpus)
        )),
        "{text}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("1 of "),
        "{out:?}"
    );
    std::fs::write(&cg, format_list(&l1.cpus)).expect("restore g1's cpuset");

    // containerd restarted: nri-align registers again and the next container is aligned, on
    // what the state kept (g1's CPU and both GPUs are still held).
    ctrd.kill(Signal::SIGKILL).expect("kill containerd");
    ctrd.start().expect("containerd comes back");
    plugin
        .wait_registrations(2, Duration::from_secs(20))
        .expect("re-registers");
    let next = ctrd.run_container(&spod, &burstable("next")).expect("next");
    assert_eq!(live(&ctrd, &next).cpus, rest);
    assert!(cri
        .env(&next)
        .expect("env")
        .contains_key("NRI_ALIGN_DECISION"));
    let e = refused(
        &ctrd,
        &gpod3,
        &burstable("g4").env("NVIDIA_VISIBLE_DEVICES", &gpu1.uuid),
    );
    assert!(
        e.contains("not enough free gpu"),
        "both GPUs still held: {e}"
    );
    eprintln!("{test}: total {:?}", t0.elapsed());
}

#[test]
fn containerd_1_7_trixie_enforce() {
    enforce(Flavor::Trixie);
}

#[test]
fn containerd_2_1_sid_enforce() {
    enforce(Flavor::Sid);
}
