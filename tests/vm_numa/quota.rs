//! No CFS throttling on exclusive CPUs, read from the unified hierarchy's `cpu.max` and
//! `cpu.stat`: a 2-CPU exclusive container runs without a quota (`max ...`), its pod's cgroup
//! too (the kubelet's rule: any exclusive container), a shared sibling keeps the kubelet's
//! quota, two busy threads on its two CPUs are never throttled over 10 s, and a resize to shared
//! (the kubelet's CRI update) gives the container the kubelet's quota back and the pod the sum of
//! its containers'. With `exclusive_cpu_quota: keep` (reloaded for that test) both keep the
//! kubelet's quota; the host suite proves the same on cgroup v1 (tests/e2e/quota.rs).

use std::path::Path;

use crate::guest::guest;
use crate::kubepods::Qos;
use test_support::e2e::ContainerSpec;

/// `cpu.max` of cgroup `dir`, verbatim.
fn cpu_max(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("cpu.max"))
        .unwrap_or_else(|e| panic!("{}/cpu.max: {e}", dir.display()))
        .trim()
        .to_string()
}

/// `nr_throttled` of cgroup `dir`.
fn throttled(dir: &Path) -> u64 {
    let stat = std::fs::read_to_string(dir.join("cpu.stat")).expect("cpu.stat");
    stat.lines()
        .find_map(|l| l.strip_prefix("nr_throttled "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no nr_throttled in {stat}"))
}

#[test]
fn t11_an_exclusive_container_and_its_pod_run_without_a_cfs_quota() {
    let Some(g) = guest("t11") else { return };
    let pod = g.pod("quota", Qos::Guaranteed, &[]);
    let shared = ContainerSpec::new("side")
        .cpu_millis(500, Some(500))
        .memory(64 << 20);
    let s1 = g.run(&pod, &shared);
    let sdir = g.seen(&s1).cgroup;
    let pod_dir = sdir.parent().expect("pod cgroup").to_path_buf();
    // The kubelet's pod quota: 2 CPUs and the 500m sidecar.
    std::fs::write(pod_dir.join("cpu.max"), "250000 100000").expect("pod quota");

    let busy = ContainerSpec::new("busy")
        .cpu_millis(2000, Some(2000))
        .memory(64 << 20);
    let x1 = g.run(&pod, &busy);
    let xdir = g.seen(&x1).cgroup;
    assert!(
        cpu_max(&xdir).starts_with("max "),
        "exclusive container: cpu.max {}\n{}",
        cpu_max(&xdir),
        g.plugin_tail(20)
    );
    assert_eq!(
        cpu_max(&sdir),
        "50000 100000",
        "the shared sidecar keeps its quota"
    );
    assert!(
        cpu_max(&pod_dir).starts_with("max "),
        "pod: cpu.max {}\n{}",
        cpu_max(&pod_dir),
        g.plugin_tail(20)
    );

    // Two busy threads on its two CPUs for 10 s.
    let before = throttled(&xdir);
    let spin = "timeout 10 sh -c 'while :; do :; done'";
    let r = g
        .ctrd
        .cri()
        .exec(&x1, &["sh", "-c", &format!("{spin} & {spin}; wait; true")])
        .expect("exec");
    assert_eq!(r.code, 0, "busy threads: {}", r.stderr);
    assert_eq!(throttled(&xdir), before, "throttled without a quota");

    // The kubelet's resize to 1.5 CPUs, limit 2: shared, its quota back; the pod's the sum.
    g.ctrd
        .cri()
        .ok(&[
            "update",
            "--cpu-period",
            "100000",
            "--cpu-quota",
            "200000",
            "--cpu-share",
            "1536",
            &x1,
        ])
        .expect("crictl update");
    assert_eq!(cpu_max(&xdir), "200000 100000", "{}", g.plugin_tail(20));
    assert_eq!(cpu_max(&pod_dir), "250000 100000", "{}", g.plugin_tail(20));
}

#[test]
fn t15_with_keep_an_exclusive_container_and_its_pod_keep_the_kubelets_quota() {
    let Some(g) = guest("t15") else { return };
    let _config = g.reconfigured("exclusive_cpu_quota: keep\n");
    let pod = g.pod("quota-keep", Qos::Guaranteed, &[]);
    let shared = ContainerSpec::new("side")
        .cpu_millis(500, Some(500))
        .memory(64 << 20);
    let s1 = g.run(&pod, &shared);
    let pod_dir = g
        .seen(&s1)
        .cgroup
        .parent()
        .expect("pod cgroup")
        .to_path_buf();
    // The kubelet's pod quota: 1 CPU and the 500m sidecar.
    std::fs::write(pod_dir.join("cpu.max"), "150000 100000").expect("pod quota");
    let busy = ContainerSpec::new("busy")
        .cpu_millis(1000, Some(1000))
        .memory(64 << 20);
    let x = g.run(&pod, &busy);
    let s = g.seen(&x);
    assert_eq!(s.cpus.len(), 1, "one exclusive CPU: {s}");
    assert_eq!(
        cpu_max(&s.cgroup),
        "100000 100000",
        "keep: the kubelet's container quota stays\n{}",
        g.plugin_tail(20)
    );
    assert_eq!(
        cpu_max(&pod_dir),
        "150000 100000",
        "keep: the pod cgroup keeps the kubelet's quota\n{}",
        g.plugin_tail(20)
    );
}
