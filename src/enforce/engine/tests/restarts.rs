//! Restarts after other events: what the random sequences of `props` found, kept as named
//! cases. A CRI update changes CPUs, never which GPUs a container holds; an exempt restart
//! releases the instance it replaces, so that the next restart finds the right predecessor.

use super::kubernetes::{events, kctr, kpod, real, BUS};
use super::*;
use crate::enforce::container::KubeletDevices;
use crate::enforce::state::RECORDED_AS_RUNNING;
use crate::placement::Allocator;

fn kubelet_gpu(c: &mut ContainerView, uuid: &str) {
    c.env = vec![format!("NVIDIA_VISIBLE_DEVICES={uuid}")];
    c.kubelet_devices = Some(vec![KubeletDevices {
        resource: "nvidia.com/gpu".into(),
        ids: vec![uuid.into()],
    }]);
}

fn resize(e: &mut Engine<Allocator>, p: &PodView, c: &ContainerView, milli: u64) {
    let mut r = c.resources.clone();
    r.cpu_shares = Some(milli * 1024 / 1000);
    r.cpu_quota = Some((milli * 100) as i64);
    e.update_container(p, c, &r).expect("resize");
}

/// The kubelet restarts container `c` (stopped, then created again as `new_id`): the new
/// instance's decision.
fn restart(
    e: &mut Engine<Allocator>,
    p: &PodView,
    c: &ContainerView,
    new_id: &str,
) -> crate::placement::Assignment {
    e.container_stopped(&c.id);
    let again = ContainerView {
        id: new_id.into(),
        ..c.clone()
    };
    e.create_container(p, &again)
        .expect("create")
        .expect("placed");
    e.records().containers[new_id].assignment.clone()
}

#[test]
fn a_resize_keeps_the_gpus_a_container_holds_even_when_another_names_them_in_its_env() {
    let mut e = real(Config::default(), "7");
    let p = kpod("ml", "train", &[]);
    let mut c = kctr(&p, "c-0", "cuda", 1000, Some(1000));
    kubelet_gpu(&mut c, "GPU-0aaa");
    e.create_container(&p, &c).expect("create").expect("placed");
    let held = e.records().containers["c-0"].assignment.clone();
    assert_eq!(held.gpus.len(), 1);
    // A container whose env alone names that GPU shares it (env is not an allocation).
    let q = kpod("ml", "peek", &[]);
    let mut d = kctr(&q, "d-0", "peek", 1000, Some(1000));
    d.env = vec![format!(
        "NVIDIA_VISIBLE_DEVICES=GPU-{}aaa",
        BUS.iter()
            .position(|b| *b == held.gpus[0])
            .expect("a known GPU")
    )];
    e.create_container(&q, &d).expect("create").expect("placed");
    // Down to a shared-pool request and back: the GPU stays c-0's alone, remap included.
    resize(&mut e, &p, &c, 100);
    resize(&mut e, &p, &c, 1000);
    let now = &e.records().containers["c-0"].assignment;
    assert_eq!(now.gpus, held.gpus);
    assert!(now.shared_gpus.is_empty(), "{:?}", now.shared_gpus);
    assert_eq!(now.chosen_gpus, held.chosen_gpus);
    // So its restart is recognised as the same request and keeps CPUs and GPU.
    let before = now.clone();
    let after = restart(&mut e, &p, &c, "c-1");
    assert_eq!((&after.cpus, &after.gpus), (&before.cpus, &before.gpus));
}

#[test]
fn an_exempt_restart_releases_its_predecessor_so_the_next_restart_finds_the_right_one() {
    let exempt = Config {
        exempt_namespaces: vec!["ops".into()],
        ..Config::default()
    };
    let mut e = real(exempt, "");
    let p = kpod("ops", "agent", &[]);
    let c = kctr(&p, "a-0", "agent", 250, None);
    e.create_container(&p, &c).expect("create");
    e.container_stopped("a-0");
    let c1 = ContainerView {
        id: "a-1".into(),
        ..c.clone()
    };
    e.create_container(&p, &c1).expect("create");
    assert!(!e.records().containers.contains_key("a-0"));
    // The namespace stops being exempt; the container comes back with a GPU, then restarts.
    e.reload(Config::default()).expect("reload");
    let mut g = kctr(&p, "a-2", "agent", 1000, Some(1000));
    kubelet_gpu(&mut g, "GPU-0aaa");
    e.create_container(&p, &g).expect("create").expect("placed");
    let first = e.records().containers["a-2"].assignment.clone();
    let again = restart(&mut e, &p, &g, "a-3");
    let ids: Vec<&String> = e.records().containers.keys().collect();
    assert_eq!(ids, ["a-3"]);
    assert_eq!((&again.cpus, &again.gpus), (&first.cpus, &first.gpus));
}

/// A Guaranteed container (1 CPU) found running on every CPU by Synchronize, as `w-0` of pod
/// `web`: recorded as it runs, in the shared pool.
fn recorded_as_running() -> (Engine<Allocator>, PodView, ContainerView) {
    let mut e = real(Config::default(), "");
    let p = kpod("default", "web", &[]);
    let mut c = kctr(&p, "w-0", "web", 1000, Some(1000));
    c.state = ContainerState::Running;
    c.resources.cpuset_cpus = e.placer.topology().online_cpus().to_string().into();
    e.synchronize(std::slice::from_ref(&p), std::slice::from_ref(&c));
    (e, p, c)
}

/// Found by tests/e2e/soak.rs (CRI-O, seed 213152819): a Guaranteed container the runtime
/// created while nri-align was down runs on every CPU, and Synchronize records it as it runs,
/// in the shared pool. When the kubelet restarts it, the new instance asks nri-align with the
/// same request: that record was never a decision for it, so it is placed anew (a CPU of its
/// own, or refused), not kept in the shared pool for the rest of its pod's life.
#[test]
fn a_guaranteed_container_recorded_as_running_is_placed_anew_when_it_restarts() {
    let (mut e, p, c) = recorded_as_running();
    assert!(!e.records().containers["w-0"].assignment.exclusive);
    let again = restart(&mut e, &p, &c, "w-1");
    assert!(again.exclusive, "{again:?}");
    assert_eq!(again.cpus.len(), 1, "{again:?}");
    let ids: Vec<&String> = e.records().containers.keys().collect();
    assert_eq!(ids, ["w-1"]);
}

/// The same container recorded as it ran (Synchronize, on every CPU), its record then changed
/// by `edit`; its restart's decision.
fn restart_recorded_as_running(edit: impl FnOnce(&mut Record)) -> crate::placement::Assignment {
    let (mut e, p, c) = recorded_as_running();
    assert!(e.records().containers["w-0"].found_running);
    edit(&mut e.doc.containers.get_mut("w-0").expect("w-0"));
    restart(&mut e, &p, &c, "w-1")
}

/// The flag decides, not the reason's text: a record flagged with any reason is placed anew,
/// one whose reason merely begins with "recorded as running" but is not flagged (a decision)
/// is kept. (The engine never makes the second kind, and the load flags such a reason from an
/// earlier version; this shows the text is no longer read.)
#[test]
fn whether_a_restart_is_placed_anew_follows_the_flag_not_the_reason() {
    let anew = restart_recorded_as_running(|r| r.assignment.reason = "anything".into());
    assert!(anew.exclusive && anew.cpus.len() == 1, "{anew:?}");
    let kept = restart_recorded_as_running(|r| {
        assert!(r.assignment.reason.starts_with(RECORDED_AS_RUNNING));
        r.found_running = false;
    });
    assert!(!kept.exclusive, "kept as the decision it was: {kept:?}");
    assert!(kept.reason.starts_with(RECORDED_AS_RUNNING), "{kept:?}");
}

/// A container recorded as it ran and then resized (a CRI update: nri-align decides for the
/// new request) has a decision: its restart with that request keeps it.
#[test]
fn a_container_recorded_as_running_then_resized_keeps_its_decision_when_it_restarts() {
    let (mut e, p, c) = recorded_as_running();
    // Down to 500m: the shared pool, now as nri-align's decision.
    resize(&mut e, &p, &c, 500);
    let decided = e.records().containers["w-0"].clone();
    assert!(
        !decided.assignment.exclusive && !decided.found_running,
        "{decided:?}"
    );
    let mut resized = kctr(&p, "w-0", "web", 500, Some(500));
    resized.state = ContainerState::Running;
    restart(&mut e, &p, &resized, "w-1");
    assert!(
        events(&e).contains("event=\"restart-kept\"} 1"),
        "{}",
        events(&e)
    );
}

/// The CPUs a decision's per-GPU map names, together.
fn map_cpus(a: &crate::placement::Assignment) -> crate::topology::CpuSet {
    let mut all = crate::topology::CpuSet::new();
    for g in &a.device_map.gpus {
        all.extend_from(&g.cpus);
    }
    all
}

#[test]
fn a_shared_container_restarted_after_the_pool_moved_gets_the_map_of_the_pool_now() {
    let mut e = real(Config::default(), "7");
    let p = kpod("ml", "infer", &[]);
    let mut c = kctr(&p, "s-0", "cuda", 500, None);
    kubelet_gpu(&mut c, "GPU-0aaa");
    e.create_container(&p, &c).expect("create").expect("placed");
    let before = e.records().containers["s-0"].assignment.clone();
    assert!(!before.exclusive);
    assert_eq!(map_cpus(&before), before.cpus);
    // An exclusive container takes CPUs of the shared one's node out of the pool.
    let q = kpod("ml", "batch", &[]);
    let d = kctr(&q, "x-0", "batch", 2000, Some(2000));
    e.create_container(&q, &d).expect("create").expect("placed");
    let after = restart(&mut e, &p, &c, "s-1");
    assert_ne!(after.cpus, before.cpus, "the pool under it moved");
    assert_eq!(map_cpus(&after), after.cpus);
}
