//! Proves what nri-align reports about itself is true, on every real runtime (containerd 1.7,
//! 2.1, CRI-O), on an emulated host with this machine's CPUs and nodes plus two fake GPUs:
//! - after connecting it runs with no capability left, and says so;
//! - its metrics count admissions and rejections by reason, time every decision, and report
//!   the free CPUs and GPUs per node;
//! - `nri-align verify` passes while containers run as decided, and fails naming the cgroup
//!   file and both values when a cpuset is changed behind nri-align's back.

use test_support::e2e;
use test_support::e2e::suite::{burstable, guaranteed, Enforced};
use test_support::e2e::{format_list, log_events, metric, scrape, PodSpec, Runtime};
use test_support::each_runtime;

const METRICS: &str = concat!(
    "metrics_address: \"127.0.0.1:0\"\n",
    "trust_visible_devices_env: true\n"
);
/// These suites name GPUs the envvar strategy's way without a kubelet: the node vouches for
/// the variable (tests/e2e/devices.rs covers the kubelet's PodResources path).
const TRUST: &str = "trust_visible_devices_env: true\n";

fn capabilities_are_dropped(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "capabilities", "e2e-caps").start() else {
        return;
    };
    let caps = &log_events(&e.plugin.output(), "capabilities dropped")[0];
    assert_eq!(caps["kept"], "[]", "{}", e.plugin.output());
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", e.plugin.pid())).expect("status");
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(
            e2e::status_field(&status, set).as_deref(),
            Some("0000000000000000"),
            "{set} of the running plugin"
        );
    }
}

fn metrics_count_what_happened(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "metrics", "e2e-metrics")
        .gpus(2)
        .config(METRICS)
        .start()
    else {
        return;
    };
    let addr = e.plugin.metrics_address().expect("metrics endpoint");
    let m = e.host.machine.clone();
    let online = e.online();
    let pod = e.rt.run_pod(&PodSpec::new("m")).expect("pod");
    // Admitted: one shared, one exclusive with a GPU, one shared with the other GPU.
    e.run(&pod, &burstable("s1"));
    let g1 = e.run(
        &pod,
        &guaranteed("g1", 1).env("NVIDIA_VISIBLE_DEVICES", &e.host.gpus[0].uuid),
    );
    e.run(
        &pod,
        &burstable("g2").env("NVIDIA_VISIBLE_DEVICES", &e.host.gpus[1].uuid),
    );
    // Rejected: one exclusive too many on this machine (or a GPU too many), a bad annotation.
    let mut expected_rejections = vec![("invalid-annotation", 1.0)];
    if online.len() == 2 {
        e.refused(&pod, &guaranteed("x", 1));
        expected_rejections.push(("shared-pool-exhausted", 1.0));
    } else {
        e.refused(
            &pod,
            &burstable("g3").env("NVIDIA_VISIBLE_DEVICES", &e.host.gpus[0].uuid),
        );
        expected_rejections.push(("insufficient", 1.0));
    }
    let bad =
        e.rt.run_pod(&PodSpec::new("bad").annotation("policy.nri-align.io/pod", "sometimes"))
            .expect("pod");
    e.refused(&bad, &burstable("b"));

    let body = scrape(&addr).expect("scrape");
    let sum = |prefix: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(sum("nri_align_admissions_total{"), 3.0, "{body}");
    assert!(
        metric(
            &body,
            "nri_align_admissions_total{policy=\"best-effort\",aligned=\"true\"}"
        )
        .is_some(),
        "{body}"
    );
    for (reason, n) in &expected_rejections {
        let series = format!("nri_align_rejections_total{{reason=\"{reason}\"}}");
        assert_eq!(metric(&body, &series), Some(*n), "{series} in\n{body}");
    }
    assert_eq!(sum("nri_align_rejections_total{"), 2.0, "{body}");
    // Every decision is timed: all in the +Inf bucket, and there are finer buckets.
    assert_eq!(
        metric(&body, "nri_align_decision_duration_seconds_count"),
        Some(5.0),
        "{body}"
    );
    assert_eq!(
        metric(
            &body,
            "nri_align_decision_duration_seconds_bucket{le=\"+Inf\"}"
        ),
        Some(5.0),
        "{body}"
    );
    assert!(
        body.lines()
            .filter(|l| l.starts_with("nri_align_decision_duration_seconds_bucket{"))
            .count()
            > 3,
        "{body}"
    );
    // g1 holds one CPU of its node; both GPUs are held.
    let g1_node = m.node_of(e.live(&g1).cpus[0]).expect("node");
    assert_eq!(
        metric(
            &body,
            &format!("nri_align_free_cpus{{numa_node=\"{g1_node}\"}}")
        ),
        Some((m.nodes[&g1_node].len() - 1) as f64),
        "{body}"
    );
    let gpu_node = m.nodes.keys().next().copied().unwrap_or(0);
    assert_eq!(
        metric(
            &body,
            &format!("nri_align_free_gpus{{numa_node=\"{gpu_node}\"}}")
        ),
        Some(0.0),
        "{body}"
    );
}

fn verify_detects_drift(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "verify", "e2e-verify")
        .gpus(1)
        .config(TRUST)
        .start()
    else {
        return;
    };
    let online = e.online();
    let pod = e.rt.run_pod(&PodSpec::new("v")).expect("pod");
    let s1 = e.run(&pod, &burstable("s1"));
    let g1 = e.run(
        &pod,
        &guaranteed("g1", 1).env("NVIDIA_VISIBLE_DEVICES", &e.host.gpus[0].uuid),
    );
    let l1 = e.live(&g1);
    e.wait_cpus(
        &s1,
        &online
            .iter()
            .copied()
            .filter(|c| !l1.cpus.contains(c))
            .collect::<Vec<_>>(),
    );

    // Every running container matches its decision...
    e.assert_verified(&[&s1, &g1]);
    // ...until a cpuset is changed behind nri-align's back.
    let cg = e2e::cpuset_dir(l1.pid).expect("cgroup").join("cpuset.cpus");
    std::fs::write(&cg, format_list(&online)).expect("widen g1's cpuset");
    let out = e.run.verify(&[]).expect("verify");
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
    let out = e.run.verify(&[]).expect("verify");
    assert!(
        out.status.success(),
        "restored:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

each_runtime!(
    capabilities_are_dropped,
    metrics_count_what_happened,
    verify_detects_drift,
);
