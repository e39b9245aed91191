//! Tests of the NRI plugin's event handlers against a fake placer.

use super::*;
use crate::enforce::adjust::Adjustment;
use crate::enforce::testing::{AllDevices, FakePlacer};
use crate::topology::CpuSet;

fn plugin() -> AlignPlugin<FakePlacer> {
    let engine = Engine::new(
        FakePlacer::new(),
        Config::default(),
        None,
        None,
        Box::new(AllDevices),
    );
    AlignPlugin::new(Arc::new(Mutex::new(engine)), false)
}

fn pod() -> PodSandbox {
    PodSandbox {
        id: "sb".into(),
        uid: "u".into(),
        name: "p".into(),
        namespace: "ns".into(),
        ..Default::default()
    }
}

fn container(id: &str, cores: i64, gpu: Option<i64>) -> Container {
    let cpu = api::LinuxCPU {
        shares: MessageField::some(api::OptionalUInt64 {
            value: (cores.max(0) as u64 * 1024).max(2),
            ..Default::default()
        }),
        quota: MessageField::some(api::OptionalInt64 {
            value: if cores > 0 { cores * 100_000 } else { -1 },
            ..Default::default()
        }),
        period: MessageField::some(api::OptionalUInt64 {
            value: 100_000,
            ..Default::default()
        }),
        ..Default::default()
    };
    let devices = gpu
        .map(|m| {
            vec![api::LinuxDevice {
                path: format!("/dev/nvidia{m}"),
                type_: "c".into(),
                major: 195,
                minor: m,
                ..Default::default()
            }]
        })
        .unwrap_or_default();
    Container {
        id: id.into(),
        pod_sandbox_id: "sb".into(),
        name: id.into(),
        linux: MessageField::some(api::LinuxContainer {
            devices,
            resources: MessageField::some(LinuxResources {
                cpu: MessageField::some(cpu),
                ..Default::default()
            }),
            cgroups_path: format!("/k8s.io/{id}"),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn create_returns_cpuset_devices_env_and_pool_updates() {
    let p = plugin();
    let shared = p
        .create_container(pod(), container("s1", 0, None))
        .await
        .expect("shared");
    let cpus = |r: &CreateContainerResponse| r.adjust.linux.resources.cpu.cpus.clone();
    assert_eq!(cpus(&shared), "0-7");
    let gpu = p
        .create_container(pod(), container("g1", 2, Some(0)))
        .await
        .expect("gpu");
    assert_eq!(cpus(&gpu), "0-1");
    assert_eq!(gpu.adjust.linux.resources.cpu.mems, "0");
    let env: Vec<(String, String)> = gpu
        .adjust
        .env
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect();
    assert!(
        env.contains(&("CUDA_VISIBLE_DEVICES".into(), "0".into())),
        "{env:?}"
    );
    assert!(
        env.contains(&("NVIDIA_VISIBLE_DEVICES".into(), "GPU-0aaa".into())),
        "{env:?}"
    );
    assert!(gpu
        .adjust
        .annotations
        .contains_key(crate::enforce::adjust::DECISION_KEY));
    let rules = &gpu.adjust.linux.resources.devices;
    assert!(rules
        .iter()
        .any(|r| r.allow && r.major.value == 195 && r.minor.value == 0 && r.access == "rwm"));
    // The shared container follows the shrunken pool with a cpuset-only update.
    assert_eq!(gpu.update.len(), 1);
    let u = &gpu.update[0];
    assert_eq!(
        (u.container_id.as_str(), u.linux.resources.cpu.cpus.as_str()),
        ("s1", "2-7")
    );
    assert!(u.linux.resources.devices.is_empty() && u.linux.resources.memory.is_none());
    assert!(u.linux.resources.cpu.mems.is_empty() && u.ignore_failure);
}

#[tokio::test]
async fn rejection_fails_create_and_remove_grows_the_pool() {
    let p = plugin();
    let err = p
        .create_container(pod(), container("big", 6, None))
        .await
        .expect_err("too big");
    assert_eq!(
        err,
        HandlerError::Failed("nri-align: 6 CPUs do not fit on one NUMA node".into())
    );
    p.create_container(pod(), container("s1", 0, None))
        .await
        .expect("shared");
    p.create_container(pod(), container("x1", 4, None))
        .await
        .expect("x1");
    // Stopped, x1 keeps its CPUs (the kubelet keeps them until RemoveContainer).
    let stop = p
        .stop_container(pod(), container("x1", 4, None))
        .await
        .expect("stop");
    assert!(stop.update.is_empty(), "{:?}", stop.update);
    // Removed, they go back to the pool; the update rides on the next response.
    p.remove_container(pod(), container("x1", 4, None))
        .await
        .expect("remove");
    let next = p
        .stop_container(pod(), container("s1", 0, None))
        .await
        .expect("stop s1");
    assert_eq!(next.update.len(), 1);
    assert_eq!(next.update[0].container_id, "s1");
    assert_eq!(next.update[0].linux.resources.cpu.cpus, "0-7");
}

#[tokio::test]
async fn cri_update_moves_the_container_and_the_pool() {
    let p = plugin();
    p.create_container(pod(), container("s1", 0, None))
        .await
        .expect("shared");
    p.create_container(pod(), container("x1", 2, None))
        .await
        .expect("x1");
    let res = |c: &Container| c.linux.resources.clone().into_option();
    let none = p
        .update_container(pod(), container("x1", 2, None), None)
        .await
        .expect("ok");
    assert!(none.update.is_empty());
    let bigger = container("x1", 3, None);
    let out = p
        .update_container(pod(), container("x1", 2, None), res(&bigger))
        .await
        .expect("ok");
    let got: Vec<(String, String)> = out
        .update
        .iter()
        .map(|u| (u.container_id.clone(), u.linux.resources.cpu.cpus.clone()))
        .collect();
    assert_eq!(
        got,
        vec![("x1".into(), "0-2".into()), ("s1".into(), "3-7".into())]
    );
}

#[tokio::test]
async fn updates_without_a_response_wait_for_the_next_one() {
    let p = plugin();
    p.create_container(pod(), container("s1", 0, None))
        .await
        .expect("shared");
    p.create_container(pod(), container("x1", 2, None))
        .await
        .expect("x1");
    // Released at RemoveContainer (no StopContainer seen): s1 must grow back, but a
    // notification has no response, and UpdateContainers could deadlock containerd.
    p.remove_container(pod(), container("x1", 2, None))
        .await
        .expect("remove");
    let next = p
        .create_container(pod(), container("s2", 0, None))
        .await
        .expect("s2");
    let got: Vec<(String, String)> = next
        .update
        .iter()
        .map(|u| (u.container_id.clone(), u.linux.resources.cpu.cpus.clone()))
        .collect();
    assert_eq!(got, vec![("s1".into(), "0-7".into())]);
    // Sent once.
    let again = p
        .create_container(pod(), container("s3", 0, None))
        .await
        .expect("s3");
    assert!(again.update.is_empty());
}

/// A cgroup v1 host under `root` with a cpuset cgroup per id in `ids`, on CPUs `cpus`.
fn cgroup_host(root: &std::path::Path, ids: &[&str], cpus: &str) {
    let write = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    write(
        "proc/self/mountinfo",
        "30 25 0:26 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset\n",
    );
    for id in ids {
        write(
            &format!("sys/fs/cgroup/cpuset/k8s.io/{id}/cpuset.cpus"),
            cpus,
        );
        write(
            &format!("sys/fs/cgroup/cpuset/k8s.io/{id}/cpuset.mems"),
            "0",
        );
    }
}

fn cgroup_cpus(root: &std::path::Path, id: &str) -> String {
    std::fs::read_to_string(root.join(format!("sys/fs/cgroup/cpuset/k8s.io/{id}/cpuset.cpus")))
        .expect("read")
        .trim()
        .to_string()
}

#[tokio::test]
async fn freed_cpus_reach_the_shared_cgroups_at_once_and_the_runtime_with_the_next_response() {
    let t = tempfile::tempdir().expect("tmp");
    for remove_pod in [false, true] {
        let root = t.path().join(if remove_pod { "rmp" } else { "rm" });
        let p = plugin().with_host_root(&root);
        p.create_container(pod(), container("s1", 0, None))
            .await
            .expect("shared");
        // The exclusive container has a pod of its own, so that removing the pod leaves s1.
        let xpod = PodSandbox {
            id: "sb-x".into(),
            uid: "u-x".into(),
            name: "px".into(),
            ..pod()
        };
        let x = p
            .create_container(xpod.clone(), container("x1", 2, None))
            .await
            .expect("x1");
        // The runtime applied the shrunken pool the create's response carried.
        let shrunk = x
            .update
            .iter()
            .find(|u| u.container_id == "s1")
            .map(|u| u.linux.resources.cpu.cpus.clone())
            .expect("s1 shrinks");
        assert_ne!(shrunk, "0-7");
        cgroup_host(&root, &["s1"], &shrunk);
        let started = std::time::Instant::now();
        if remove_pod {
            p.stop_pod_sandbox(xpod.clone()).await.expect("stopp");
            p.remove_pod_sandbox(xpod).await.expect("rmp");
        } else {
            p.remove_container(xpod, container("x1", 2, None))
                .await
                .expect("remove");
        }
        // Nothing else happens on the node: the cgroup follows within a second.
        while cgroup_cpus(&root, "s1") != "0-7" {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(1),
                "s1 still on {} a second after the removal",
                cgroup_cpus(&root, "s1")
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // The runtime's own record follows with the next response that can carry it.
        let next = p
            .create_container(pod(), container("s2", 0, None))
            .await
            .expect("s2");
        assert!(
            next.update
                .iter()
                .any(|u| u.container_id == "s1" && u.linux.resources.cpu.cpus == "0-7"),
            "{:?}",
            next.update
        );
    }
}

#[tokio::test]
async fn a_panic_inside_an_event_is_recovered_with_the_placer_back_on_the_records() {
    let engine = Arc::new(Mutex::new(Engine::new(
        FakePlacer::new(),
        Config::default(),
        None,
        None,
        Box::new(AllDevices),
    )));
    let p = Arc::new(AlignPlugin::new(engine.clone(), false));
    p.create_container(pod(), container("x1", 2, None))
        .await
        .expect("x1");
    let lock = || engine.lock().unwrap_or_else(|e| e.into_inner());
    lock().placer_mut().panic_on_plan = true;
    // The CRI update releases x1 to decide again, and the decision panics: the lock is
    // poisoned with x1 recorded but no longer in the placer.
    let bigger = container("x1", 3, None)
        .linux
        .resources
        .clone()
        .into_option();
    let plugin = p.clone();
    let panicked = tokio::spawn(async move {
        plugin
            .update_container(pod(), container("x1", 2, None), bigger)
            .await
    })
    .await;
    assert!(
        panicked.is_err_and(|e| e.is_panic()),
        "the injected panic happened"
    );
    assert!(engine.is_poisoned());
    lock().placer_mut().panic_on_plan = false;
    // The next event finds the poisoned lock and puts the placer back on the records.
    let next = p
        .create_container(pod(), container("x2", 2, None))
        .await
        .expect("x2");
    assert!(!engine.is_poisoned());
    let e = lock();
    let mut held: Vec<String> = e
        .placer()
        .held()
        .into_iter()
        .map(|a| a.container_id)
        .collect();
    held.sort();
    let recorded: Vec<&String> = e.records().containers.keys().collect();
    assert_eq!(recorded, vec!["x1", "x2"]);
    assert_eq!(held, vec!["x1".to_string(), "x2".to_string()]);
    // x2 got CPUs x1 does not hold.
    let x1 = &e.records().containers["x1"].assignment.cpus;
    let x2 = next.adjust.linux.resources.cpu.cpus.clone();
    assert!(
        CpuSet::parse_list(&x2).expect("set").is_disjoint(x1),
        "x1 {x1}, x2 {x2}"
    );
}

#[test]
fn removed_devices_use_the_dash_prefix() {
    let adj = Adjustment {
        remove_devices: vec!["/dev/nvidia3".into()],
        ..Default::default()
    };
    let out = container_adjustment(&adj);
    assert_eq!(out.linux.devices[0].path, "-/dev/nvidia3");
}

#[test]
fn a_memory_policy_becomes_the_nri_v0_12_field() {
    use crate::placement::{MemPolicy, MemoryPolicy};
    let none = container_adjustment(&Adjustment::default());
    assert!(none.linux.memory_policy.is_none());
    for (mode, want) in [
        (MemPolicy::Bind, api::MpolMode::MPOL_BIND),
        (MemPolicy::Interleave, api::MpolMode::MPOL_INTERLEAVE),
        (MemPolicy::PreferredMany, api::MpolMode::MPOL_PREFERRED_MANY),
        (
            MemPolicy::WeightedInterleave,
            api::MpolMode::MPOL_WEIGHTED_INTERLEAVE,
        ),
    ] {
        let adj = Adjustment {
            memory_policy: Some(MemoryPolicy {
                mode,
                nodes: "0-1".parse().expect("nodes"),
            }),
            ..Default::default()
        };
        let out = container_adjustment(&adj);
        let p = &out.linux.memory_policy;
        assert_eq!(p.mode.enum_value(), Ok(want), "{mode}");
        assert_eq!(p.nodes, "0-1");
        assert!(p.flags.is_empty());
    }
}

#[test]
fn only_events_every_nri_release_knows_are_requested() {
    let mask = wanted_events();
    assert!(
        mask.contains(api::Event::CREATE_CONTAINER) && mask.contains(api::Event::STOP_CONTAINER)
    );
    assert!(!mask.contains(api::Event::UPDATE_POD_SANDBOX));
    assert_eq!(
        mask.intersection(EventMask::up_to(api::Event::REMOVE_CONTAINER)),
        mask
    );
}

/// While the running containers are listed over CRI (no Synchronize on NRI v0.6.1), a creation
/// waits for the listing and is then decided with what it found held.
#[tokio::test]
async fn a_creation_waits_for_the_cri_listing_then_avoids_what_it_found() {
    use crate::enforce::container::{ContainerState, ContainerView, PodView, ResourcesView};
    use crate::enforce::cri_listing::Listing;
    let p = Arc::new(plugin());
    p.learning_begins();
    let waiting = {
        let p = p.clone();
        tokio::spawn(async move { p.create_container(pod(), container("x2", 2, None)).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "the creation waits for the listing");
    // The listing: x1 runs on CPUs 0-1 as a Guaranteed 2-CPU container.
    let held = ContainerView {
        id: "x1".into(),
        name: "x1".into(),
        pod_sandbox_id: "sb".into(),
        state: ContainerState::Running,
        resources: ResourcesView {
            cpu_shares: Some(2048),
            cpu_quota: Some(200_000),
            cpu_period: Some(100_000),
            cpuset_cpus: "0-1".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let listed_pod = PodView {
        id: "sb".into(),
        uid: "u".into(),
        name: "p".into(),
        namespace: "ns".into(),
        ..Default::default()
    };
    p.learned(Some(Listing {
        pods: vec![listed_pod],
        containers: vec![held],
        ..Listing::default()
    }));
    let x2 = waiting.await.expect("task").expect("created");
    assert_eq!(x2.adjust.linux.resources.cpu.cpus, "2-3", "never x1's CPUs");
}

/// A listing that does not come holds a creation up to `LEARN_WAIT` only.
#[tokio::test]
async fn a_creation_waits_for_a_missing_listing_at_most_learn_wait() {
    let p = plugin();
    p.learning_begins();
    let started = std::time::Instant::now();
    p.create_container(pod(), container("x1", 1, None))
        .await
        .expect("created after the wait");
    let waited = started.elapsed();
    assert!(
        waited >= LEARN_WAIT && waited < LEARN_WAIT * 10,
        "{waited:?}"
    );
    p.stop_waiting();
    let started = std::time::Instant::now();
    p.create_container(pod(), container("x2", 1, None))
        .await
        .expect("created at once");
    assert!(started.elapsed() < LEARN_WAIT, "no wait once it stopped");
}

fn cgroup_mems(root: &std::path::Path, id: &str) -> String {
    std::fs::read_to_string(root.join(format!("sys/fs/cgroup/cpuset/k8s.io/{id}/cpuset.mems")))
        .expect("read")
        .trim()
        .to_string()
}

#[tokio::test]
async fn cpus_another_plugin_set_after_creation_move_the_memory_nodes_only() {
    let t = tempfile::tempdir().expect("tmp");
    let config = Config {
        leave_to_others: crate::config::LeftToOthers::of(&[crate::config::LeftField::Cpus]),
        ..Config::default()
    };
    let engine = Engine::new(FakePlacer::new(), config, None, None, Box::new(AllDevices));
    let p = AlignPlugin::new(Arc::new(Mutex::new(engine)), false).with_host_root(t.path());
    let created = p
        .create_container(pod(), container("c1", 0, None))
        .await
        .expect("c1");
    assert_eq!(created.adjust.linux.resources.cpu.cpus, "");
    cgroup_host(t.path(), &["c1"], "0-7");
    // The other plugin, after nri-align, put it on CPUs of node 1: PostStart shows them.
    let mut started = container("c1", 0, None);
    started.state = api::ContainerState::CONTAINER_RUNNING.into();
    if let Some(linux) = started.linux.as_mut() {
        linux
            .resources
            .mut_or_insert_default()
            .cpu
            .mut_or_insert_default()
            .cpus = "5-6".into();
    }
    p.post_start_container(pod(), started).await.expect("start");
    assert_eq!(cgroup_mems(t.path(), "c1"), "1", "cgroup written at once");
    assert_eq!(cgroup_cpus(t.path(), "c1"), "0-7", "the cpuset is not ours");
    // The runtime hears of it with the next response: cpuset.mems only, once.
    let next = p
        .create_container(pod(), container("c2", 0, None))
        .await
        .expect("c2");
    let mems: Vec<_> = next
        .update
        .iter()
        .filter(|u| u.container_id == "c1")
        .map(|u| {
            let cpu = &u.linux.resources.cpu;
            (cpu.cpus.clone(), cpu.mems.clone())
        })
        .collect();
    assert_eq!(mems, vec![(String::new(), "1".to_string())]);
    let again = p
        .create_container(pod(), container("c3", 0, None))
        .await
        .expect("c3");
    assert!(again.update.is_empty(), "{:?}", again.update);
}

fn budget_plugin() -> AlignPlugin<FakePlacer> {
    let config = Config {
        pod_budgets: true,
        ..Config::default()
    };
    let engine = Engine::new(FakePlacer::new(), config, None, None, Box::new(AllDevices));
    AlignPlugin::new(Arc::new(Mutex::new(engine)), false)
}

/// `cores` whole CPUs, requests equal to limits, and 1 GiB, as NRI carries them.
fn pod_level(cores: i64) -> LinuxResources {
    let mut r = container("r", cores, None)
        .linux
        .resources
        .clone()
        .into_option()
        .expect("resources");
    r.memory = MessageField::some(api::LinuxMemory {
        limit: MessageField::some(api::OptionalInt64 {
            value: 1 << 30,
            ..Default::default()
        }),
        ..Default::default()
    });
    r
}

#[tokio::test]
async fn update_pod_sandbox_is_asked_for_with_budgets_and_grows_the_pods_pool() {
    assert!(!plugin().events().contains(api::Event::UPDATE_POD_SANDBOX));
    let p = budget_plugin();
    assert!(p.events().contains(api::Event::UPDATE_POD_SANDBOX));
    let mut budgeted = pod();
    budgeted.linux = MessageField::some(api::LinuxPodSandbox {
        pod_resources: MessageField::some(pod_level(4)),
        ..Default::default()
    });
    let out = p
        .create_container(budgeted.clone(), container("s1", 0, None))
        .await
        .expect("sidecar");
    let cpus = &out.adjust.linux.resources.cpu.cpus;
    assert_eq!(CpuSet::parse_list(cpus).expect("cpus").len(), 4, "{cpus}");
    p.update_pod_sandbox(api::UpdatePodSandboxRequest {
        pod: MessageField::some(budgeted),
        linux_resources: MessageField::some(pod_level(6)),
        ..Default::default()
    })
    .await
    .expect("update");
    // UpdatePodSandbox has no response: the move rides on the next one.
    let mut other = pod();
    other.id = "sb2".into();
    let next = p
        .create_container(other, container("s2", 0, None))
        .await
        .expect("s2");
    let grown: Vec<&str> = next
        .update
        .iter()
        .filter(|u| u.container_id == "s1")
        .map(|u| u.linux.resources.cpu.cpus.as_str())
        .collect();
    assert_eq!(grown.len(), 1, "{:?}", next.update);
    let grown = CpuSet::parse_list(grown[0]).expect("cpus");
    assert!(CpuSet::parse_list(cpus).expect("cpus").is_subset(&grown));
    assert_eq!(grown.len(), 6);
}

#[tokio::test]
async fn exclusive_cpus_run_without_a_cfs_quota_across_a_resize() {
    let p = plugin();
    let quota = |r: &api::LinuxResources| r.cpu.quota.as_ref().map(|q| q.value);
    let x = p
        .create_container(pod(), container("x1", 2, None))
        .await
        .expect("x1");
    assert_eq!(quota(&x.adjust.linux.resources), Some(-1));
    let s = p
        .create_container(pod(), container("s1", 0, None))
        .await
        .expect("s1");
    assert_eq!(
        quota(&s.adjust.linux.resources),
        None,
        "shared: the kubelet's"
    );
    // The kubelet's resize carries its quota (300000): the answer sets -1 again, with the
    // container's new cpuset, in one update.
    let bigger = container("x1", 3, None)
        .linux
        .resources
        .clone()
        .into_option();
    let out = p
        .update_container(pod(), container("x1", 2, None), bigger)
        .await
        .expect("ok");
    let x1: Vec<_> = out
        .update
        .iter()
        .filter(|u| u.container_id == "x1")
        .collect();
    assert_eq!(x1.len(), 1);
    assert_eq!(x1[0].linux.resources.cpu.cpus, "0-2");
    assert_eq!(quota(&x1[0].linux.resources), Some(-1));
}
