//! The CFS quota of exclusive CPUs on real runtimes (runc writes what NRI carries), read from
//! the cgroups of the running containers:
//! - an exclusive container runs without a quota (`cpu.cfs_quota_us` -1 on v1, `cpu.max` `max`
//!   on v2), its pod's cgroup too (the kubelet's rule: any exclusive container), while a shared
//!   sibling keeps the kubelet's quota; a busy thread on its CPU is never throttled;
//! - a resize to shared (the kubelet's CRI update) gives the container the kubelet's quota back
//!   and the pod the sum of its containers' quotas;
//! - with `exclusive_cpu_quota: keep` the kubelet's quotas stay.
//!
//! The pod cgroup is made here with the kubelet's quota, as the kubelet makes it before the
//! sandbox; its assertions run on cgroup v1 (this host), the v2 ones in the QEMU guest
//! (tests/vm_numa).

use std::fs;
use std::path::PathBuf;

use test_support::e2e::suite::{burstable, guaranteed, Enforced};
use test_support::e2e::{PodSpec, Runtime};

/// The kubelet's quota of a pod of 1 CPU and a 500m sidecar (hosts with 2 CPUs run these:
/// one exclusive, one left to the shared pool).
const POD_QUOTA: i64 = 150_000;

/// The cgroup v1 `cpu` hierarchy, when this host has one (else cgroup v2).
fn v1_cpu() -> Option<PathBuf> {
    let p = PathBuf::from("/sys/fs/cgroup/cpu");
    p.is_dir().then_some(p)
}

/// The cgroup directory of process `pid` in the hierarchy that has the cpu controller.
fn cpu_dir(pid: u32) -> PathBuf {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("proc cgroup");
    let line = text
        .lines()
        .find(|l| match v1_cpu() {
            Some(_) => l
                .split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "cpu")),
            None => l.starts_with("0::"),
        })
        .unwrap_or_else(|| panic!("no cpu cgroup in {text}"));
    let rel = line.splitn(3, ':').nth(2).unwrap_or_default();
    let base = v1_cpu().unwrap_or_else(|| PathBuf::from("/sys/fs/cgroup"));
    base.join(rel.trim_start_matches('/'))
}

/// The CFS quota of cgroup `dir`: `None` for none.
fn quota(dir: &std::path::Path) -> Option<i64> {
    let read = |f: &str| fs::read_to_string(dir.join(f)).expect("quota file");
    let q = if v1_cpu().is_some() {
        read("cpu.cfs_quota_us").trim().to_string()
    } else {
        read("cpu.max")
            .split_whitespace()
            .next()
            .unwrap_or("max")
            .to_string()
    };
    q.parse::<i64>().ok().filter(|q| *q > 0)
}

/// `nr_throttled` of cgroup `dir`.
fn throttled(dir: &std::path::Path) -> u64 {
    let stat = fs::read_to_string(dir.join("cpu.stat")).expect("cpu.stat");
    stat.lines()
        .find_map(|l| l.strip_prefix("nr_throttled "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no nr_throttled in {stat}"))
}

/// A pod whose cgroup (`kubepods/pod<UID>` under the instance's parent) the kubelet made with
/// [`POD_QUOTA`] (on v1; on v2 the runtime makes it, without one). Returns its spec and the
/// directory made, to remove at the end.
fn kubelet_pod(e: &Enforced, name: &str) -> (PodSpec, Option<PathBuf>) {
    let uid = format!("{name}-0001");
    let parent = format!(
        "{}/kubepods/pod{uid}",
        e.rt.var("CGROUP_PARENT").expect("parent")
    );
    let made = v1_cpu().map(|cpu| {
        let dir = cpu.join(parent.trim_start_matches('/'));
        fs::create_dir_all(&dir).expect("pod cgroup");
        fs::write(dir.join("cpu.cfs_quota_us"), POD_QUOTA.to_string()).expect("pod quota");
        dir
    });
    let spec = PodSpec::new(name).uid(&uid).cgroup_parent(&parent);
    (spec, made)
}

/// Removes the pod cgroup made by [`kubelet_pod`] once the runtime left it empty.
fn remove_pod_cgroup(made: Option<PathBuf>) {
    if let Some(dir) = made {
        let _ = fs::remove_dir(&dir);
    }
}

fn exclusive_cpus_run_without_a_quota(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "quota", "e2e-quota").start() else {
        return;
    };
    let (spec, made) = kubelet_pod(&e, "quota");
    let pod = e.rt.run_pod(&spec).expect("pod");
    let x1 = e.run(&pod, &guaranteed("x1", 1));
    let s1 = e.run(&pod, &burstable("s1"));
    let (xdir, sdir) = (cpu_dir(e.live(&x1).pid), cpu_dir(e.live(&s1).pid));
    assert_eq!(quota(&xdir), None, "exclusive: {}", e.plugin.output());
    assert_eq!(quota(&sdir), Some(50_000), "shared keeps the kubelet's");
    let pod_dir = xdir.parent().expect("pod cgroup").to_path_buf();
    if made.is_some() {
        assert_eq!(quota(&pod_dir), None, "pod: {}", e.plugin.output());
    }

    // A busy thread on its CPU for 5 s: never throttled.
    let before = throttled(&xdir);
    let busy = "timeout 5 sh -c 'while :; do :; done'; true";
    e.rt.cri().exec(&x1, &["sh", "-c", busy]).expect("busy");
    assert_eq!(throttled(&xdir), before, "throttled without a quota");

    // The kubelet's resize to 250m/500m: shared, with its quota back; the pod's is the sum.
    e.rt.cri()
        .ok(&[
            "update",
            "--cpu-period",
            "100000",
            "--cpu-quota",
            "50000",
            "--cpu-share",
            "256",
            &x1,
        ])
        .expect("crictl update");
    assert_eq!(quota(&xdir), Some(50_000), "{}", e.plugin.output());
    if made.is_some() {
        assert_eq!(quota(&pod_dir), Some(100_000), "{}", e.plugin.output());
    }
    e.rt.cri().remove_pod(&pod).expect("remove pod");
    remove_pod_cgroup(made);
}

fn keep_leaves_the_kubelets_quota(rt: Runtime) {
    let config = "exclusive_cpu_quota: keep\n";
    let Some(e) = Enforced::builder(rt, "quota_keep", "e2e-quota-keep")
        .config(config)
        .start()
    else {
        return;
    };
    let (spec, made) = kubelet_pod(&e, "keep");
    let pod = e.rt.run_pod(&spec).expect("pod");
    let x1 = e.run(&pod, &guaranteed("x1", 1));
    let xdir = cpu_dir(e.live(&x1).pid);
    assert_eq!(quota(&xdir), Some(100_000), "{}", e.plugin.output());
    if made.is_some() {
        let pod_dir = xdir.parent().expect("pod cgroup");
        assert_eq!(quota(pod_dir), Some(POD_QUOTA));
    }
    e.rt.cri().remove_pod(&pod).expect("remove pod");
    remove_pod_cgroup(made);
}

test_support::each_runtime!(
    exclusive_cpus_run_without_a_quota,
    keep_leaves_the_kubelets_quota
);
