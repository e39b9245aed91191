//! In-place resize on every real runtime (containerd 1.7 and 2.1, CRI-O): the kubelet's
//! `UpdateContainerResources` (`crictl update`) of a Guaranteed container, its
//! `Cpus_allowed_list` read from /proc before and after:
//! - a memory-only resize keeps its CPUs;
//! - a grow that does not fit fails the update with nri-align's resize message, and the
//!   container keeps its CPUs;
//! - where the host has CPUs for it (4 or more), a grow keeps every CPU it holds and adds
//!   others, a shrink gives back only those, the shared container follows both.

use test_support::e2e::suite::{burstable, guaranteed, Enforced};
use test_support::e2e::{PodSpec, Runtime};
use test_support::each_runtime;

const MIB: i64 = 1 << 20;

/// `crictl update` as the kubelet sends an in-place resize to `cpus` whole CPUs and
/// `memory_mib` (request = limit).
fn resize(e: &Enforced, id: &str, cpus: i64, memory_mib: i64) -> Result<String, String> {
    let (quota, shares, memory) = (
        (cpus * 100_000).to_string(),
        (cpus * 1024).to_string(),
        (memory_mib * MIB).to_string(),
    );
    let args = [
        "update",
        "--cpu-period",
        "100000",
        "--cpu-quota",
        &quota,
        "--cpu-share",
        &shares,
        "--memory",
        &memory,
        id,
    ];
    e.rt.cri().ok(&args).map_err(|err| err.to_string())
}

fn without(online: &[u32], held: &[u32]) -> Vec<u32> {
    online
        .iter()
        .copied()
        .filter(|c| !held.contains(c))
        .collect()
}

fn resize_keeps_what_it_holds(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "resize", "e2e-resize").start() else {
        return;
    };
    let online = e.online();
    let spod = e.rt.run_pod(&PodSpec::new("shared")).expect("pod");
    let s1 = e.run(&spod, &burstable("s1"));
    let xpod = e.rt.run_pod(&PodSpec::new("excl")).expect("pod");
    let x = e.run(&xpod, &guaranteed("x", 1));
    let before = e.live(&x).cpus;
    assert_eq!(before.len(), 1, "{rt:?}: x {before:?}");
    e.wait_cpus(&s1, &without(&online, &before));

    // Memory only (64 MiB to 128 MiB): the CPUs stay where they are.
    resize(&e, &x, 1, 128).unwrap_or_else(|err| panic!("{rt:?}: memory resize: {err}"));
    e.wait_cpus(&x, &before);

    // More than the host can give next to it: refused, nothing moves.
    let n = online.len() as i64;
    let err = resize(&e, &x, n, 128).expect_err("a grow past the host");
    assert!(
        err.contains("cannot resize") && err.contains("in place"),
        "{rt:?}: {err}"
    );
    e.wait_cpus(&x, &before);
    e.wait_cpus(&s1, &without(&online, &before));

    if online.len() < 4 {
        eprintln!("{rt:?}: {} CPUs: the grow and shrink need 4", online.len());
        return;
    }
    resize(&e, &x, 3, 128).unwrap_or_else(|err| panic!("{rt:?}: grow: {err}"));
    let grown = e.live(&x).cpus;
    assert_eq!(grown.len(), 3, "{rt:?}: {grown:?}");
    assert!(
        before.iter().all(|c| grown.contains(c)),
        "{rt:?}: {before:?} kept in {grown:?}"
    );
    e.wait_cpus(&x, &grown);
    e.wait_cpus(&s1, &without(&online, &grown));

    resize(&e, &x, 1, 128).unwrap_or_else(|err| panic!("{rt:?}: shrink: {err}"));
    e.wait_cpus(&x, &before);
    e.wait_cpus(&s1, &without(&online, &before));
}

each_runtime!(resize_keeps_what_it_holds);
