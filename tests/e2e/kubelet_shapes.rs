//! The kubelet-shaped requests of `crates/test-support/src/e2e/kubelet.rs` on a real containerd (2.1, runc,
//! real cgroups): a Guaranteed pod (a sidecar init container and an app container with an NVIDIA
//! volume-mounts allocation) and a Burstable pod (a plain init container that runs to
//! completion, then an app container created again at restart count 1) are accepted, and each
//! container's cgroup holds the kubelet's cpu shares, CFS quota and period, and memory limit,
//! under the pod cgroup the kubelet names. This proves the shapes are valid CRI, not only valid
//! JSON. With `CRICTL` set (e.g. /work/shared/crictl/crictl) the real crictl sends them.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use test_support::e2e::kubelet::{
    KubeContainer, KubePod, ListStrategy, Node, NvidiaDevice, NvidiaPlugin, Qos, Resources,
};
use test_support::e2e::{skip_unless_root, wait_until, Containerd, Flavor};

/// What the kernel holds for a container: (cpu weight or shares, quota, period, memory limit).
#[derive(Debug, PartialEq)]
struct CgroupValues {
    shares: u64,
    quota: Option<u64>,
    period: u64,
    memory: Option<u64>,
}

/// Reads a container's cgroup from its `cgroupsPath` (cgroupfs driver: a plain path).
fn cgroup_values(cgroups_path: &str) -> CgroupValues {
    let read = |p: PathBuf| -> String {
        fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
            .trim()
            .to_string()
    };
    let num = |s: String| -> u64 { s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}")) };
    let rel = cgroups_path.trim_start_matches('/');
    if PathBuf::from("/sys/fs/cgroup/cgroup.controllers").exists() {
        // cgroup v2: runc maps shares to cpu.weight; quota/period in cpu.max; memory.max.
        let base = PathBuf::from("/sys/fs/cgroup").join(rel);
        let max = read(base.join("cpu.max"));
        let (q, p) = max.split_once(' ').unwrap_or((&max, "100000"));
        let mem = read(base.join("memory.max"));
        CgroupValues {
            shares: num(read(base.join("cpu.weight"))),
            quota: (q != "max").then(|| num(q.to_string())),
            period: num(p.to_string()),
            memory: (mem != "max").then(|| num(mem)),
        }
    } else {
        let cpu = PathBuf::from("/sys/fs/cgroup/cpu").join(rel);
        let quota: i64 = read(cpu.join("cpu.cfs_quota_us")).parse().unwrap_or(-1);
        let mem = num(read(
            PathBuf::from("/sys/fs/cgroup/memory")
                .join(rel)
                .join("memory.limit_in_bytes"),
        ));
        CgroupValues {
            shares: num(read(cpu.join("cpu.shares"))),
            quota: (quota > 0).then_some(quota as u64),
            period: num(read(cpu.join("cpu.cfs_period_us"))),
            // No limit reads as a page-rounded i64::MAX.
            memory: (mem < (1 << 62)).then_some(mem),
        }
    }
}

/// runc's conversion of cpu.shares to cgroup v2 cpu.weight (runc 1.1:
/// `1 + ((shares - 2) * 9999) / 262142`).
fn expected_shares(shares: u64) -> u64 {
    if PathBuf::from("/sys/fs/cgroup/cgroup.controllers").exists() {
        1 + ((shares - 2) * 9999) / 262_142
    } else {
        shares
    }
}

fn inspect_path(cd: &Containerd, id: &str) -> (String, Value) {
    let info = cd.cri().inspect(id).expect("inspect");
    let path = info["info"]["runtimeSpec"]["linux"]["cgroupsPath"]
        .as_str()
        .unwrap_or_else(|| panic!("no cgroupsPath in {info}"))
        .to_string();
    (path, info)
}

fn start(cd: &Containerd, id: &str) {
    cd.cri().ok(&["start", id]).expect("start");
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario on a real runtime, step by step: each step checks what the steps before left there"
)]
fn kubelet_shaped_pods_run_with_the_kubelets_cgroup_values() {
    if skip_unless_root("kubelet_shaped_pods_run_with_the_kubelets_cgroup_values") {
        return;
    }
    let cd = Containerd::fresh(Flavor::Sid, "e2e-kubelet-shapes").expect("containerd comes up");
    let node = Node::for_instance(&cd).expect("node");
    let parent = cd.var("CGROUP_PARENT").expect("parent").to_string();

    // --- Guaranteed: sidecar 250m/64Mi, app 1 CPU/256Mi + one GPU by volume-mounts.
    let gpu = NvidiaDevice::Gpu {
        uuid: "GPU-0aaa".into(),
        index: 0,
        minor: 0,
        numa: Some(0),
    };
    let alloc = NvidiaPlugin::new()
        .strategies(&[ListStrategy::VolumeMounts])
        .allocate(&[(&gpu, None)]);
    let g = KubePod::new("ml", "train")
        .init_container(
            KubeContainer::new("proxy")
                .resources(Resources::none().both("cpu", "250m").both("memory", "64Mi")),
            true,
        )
        .container(
            KubeContainer::new("cuda")
                .resources(
                    Resources::none()
                        .both("cpu", "1")
                        .both("memory", "256Mi")
                        .both("nvidia.com/gpu", "1"),
                )
                .allocation(alloc),
        );
    assert_eq!(g.qos(), Qos::Guaranteed);
    let gs = cd
        .run_kube_pod(&g, &node)
        .expect("Guaranteed sandbox accepted");
    let proxy = cd
        .create_kube_container(&gs, &g, &node, "proxy", 0)
        .expect("sidecar accepted");
    start(&cd, &proxy);
    let cuda = cd
        .create_kube_container(&gs, &g, &node, "cuda", 0)
        .expect("app accepted");
    start(&cd, &cuda);

    let pod_cg = format!("{parent}/kubepods/pod{}", g.uid);
    for (id, shares, quota, mem) in [
        (&proxy, 256, 25_000, 64 << 20),
        (&cuda, 1024, 100_000, 256 << 20),
    ] {
        let (path, info) = inspect_path(&cd, id);
        assert!(
            path.starts_with(&format!("{pod_cg}/")),
            "{path} not under {pod_cg}"
        );
        assert_eq!(
            cgroup_values(&path),
            CgroupValues {
                shares: expected_shares(shares),
                quota: Some(quota),
                period: 100_000,
                memory: Some(mem)
            },
            "{id}"
        );
        let labels = &info["status"]["labels"];
        assert_eq!(labels["io.kubernetes.pod.uid"], g.uid.as_str(), "{labels}");
        assert!(labels["io.kubernetes.container.name"].is_string());
    }
    // The volume-mounts allocation is a valid mount: the GPU's name appears in the container.
    let ls = cd
        .cri()
        .exec(&cuda, &["ls", "/var/run/nvidia-container-devices"])
        .expect("exec");
    assert_eq!(ls.stdout.trim(), "GPU-0aaa", "{ls:?}");
    let env = cd.cri().env(&cuda).expect("env");
    assert_eq!(
        env.get("NVIDIA_VISIBLE_DEVICES").map(String::as_str),
        Some("/var/run/nvidia-container-devices")
    );

    // --- Burstable: init container runs to completion, then the app (100m/64Mi, limits 500m/128Mi).
    let b = KubePod::new("web", "frontend")
        .init_container(KubeContainer::new("setup").command(&["/bin/true"]), false)
        .container(
            KubeContainer::new("web").resources(
                Resources::none()
                    .request("cpu", "100m")
                    .request("memory", "64Mi")
                    .limit("cpu", "500m")
                    .limit("memory", "128Mi"),
            ),
        );
    assert_eq!(b.qos(), Qos::Burstable);
    let bs = cd
        .run_kube_pod(&b, &node)
        .expect("Burstable sandbox accepted");
    let setup = cd
        .create_kube_container(&bs, &b, &node, "setup", 0)
        .expect("init accepted");
    start(&cd, &setup);
    let mut last = Value::Null;
    let exited = wait_until(Duration::from_secs(20), || {
        last = cd
            .cri()
            .inspect(&setup)
            .map(|i| i["status"].clone())
            .unwrap_or_default();
        last["state"] == "CONTAINER_EXITED"
    });
    assert!(
        exited && last["exitCode"].as_i64().unwrap_or(0) == 0,
        "init container did not exit 0: {last}"
    );
    let web = cd
        .create_kube_container(&bs, &b, &node, "web", 0)
        .expect("app accepted");
    start(&cd, &web);
    let want = CgroupValues {
        shares: expected_shares(102),
        quota: Some(50_000),
        period: 100_000,
        memory: Some(128 << 20),
    };
    let (path, _) = inspect_path(&cd, &web);
    assert!(
        path.starts_with(&format!("{parent}/kubepods/burstable/pod{}/", b.uid)),
        "{path}"
    );
    assert_eq!(cgroup_values(&path), want);

    // The kubelet restarts a container as a new one with attempt and restartCount 1.
    cd.cri().ok(&["stop", &web]).expect("stop");
    let web1 = cd
        .create_kube_container(&bs, &b, &node, "web", 1)
        .expect("restart accepted");
    start(&cd, &web1);
    let (path1, info1) = inspect_path(&cd, &web1);
    assert_eq!(
        info1["status"]["metadata"]["attempt"], 1,
        "{}",
        info1["status"]["metadata"]
    );
    assert_eq!(
        info1["status"]["annotations"]["io.kubernetes.container.restartCount"],
        "1"
    );
    assert_eq!(cgroup_values(&path1), want);

    cd.cri().remove_pod(&bs).expect("remove Burstable pod");
    cd.cri().remove_pod(&gs).expect("remove Guaranteed pod");
}
