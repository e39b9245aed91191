//! CPU hot-plug in the guest: a guest CPU held by an exclusive container and one of the shared
//! pool are offlined through sysfs (`echo 0 > /sys/devices/system/cpu/cpuN/online`, as an
//! operator or a vCPU unplug does) while both containers run, then onlined again. nri-align
//! hears the kernel's uevent; everything checked here is what the guest shows.

use std::path::Path;

use crate::guest::{guest, ids, list, Guest, Ids};
use crate::kubepods::Qos;
use test_support::e2e::ContainerSpec;

fn set_online(cpu: u32, on: bool) {
    let path = format!("/sys/devices/system/cpu/cpu{cpu}/online");
    std::fs::write(&path, if on { "1" } else { "0" })
        .unwrap_or_else(|e| panic!("write {path}: {e}"));
}

/// Puts its CPUs back online when dropped, so that a failed assertion does not leave later
/// tests on a smaller guest.
struct Restore(Vec<u32>);

impl Drop for Restore {
    fn drop(&mut self) {
        for cpu in &self.0 {
            let _ = std::fs::write(format!("/sys/devices/system/cpu/cpu{cpu}/online"), "1");
        }
    }
}

pub(crate) fn changes(g: &Guest) -> usize {
    g.plugin
        .output()
        .lines()
        .filter(|l| l.contains("online CPUs or memory nodes changed"))
        .count()
}

/// The cgroup's configured `cpuset.cpus` (what was written to it, not the effective set the
/// kernel derives).
pub(crate) fn configured(cgroup: &Path) -> Ids {
    ids(std::fs::read_to_string(cgroup.join("cpuset.cpus"))
        .unwrap_or_default()
        .trim())
}

pub(crate) fn row<'a>(p: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    p.as_array()
        .and_then(|a| a.iter().find(|r| r["id"] == id))
        .unwrap_or_else(|| panic!("{id} not in placements: {p}"))
}

#[test]
fn t7_a_cpu_offlined_and_onlined_under_running_containers_is_followed() {
    let Some(g) = guest("t6") else { return };
    // Two exclusive CPUs: a whole core, so one of them is never CPU 0 (which x86 does not
    // offline).
    let pod = g.pod("hot-excl", Qos::Guaranteed, &[("policy", "best-effort")]);
    let excl = g.run(
        &pod,
        &ContainerSpec::new("busy")
            .cpu_millis(2000, Some(2000))
            .memory(32 << 20),
    );
    let pod = g.pod("hot-shared", Qos::Burstable, &[("policy", "best-effort")]);
    let shared = g.run(
        &pod,
        &ContainerSpec::new("app")
            .cpu_millis(250, None)
            .memory(32 << 20),
    );
    let (e0, s0) = (g.seen(&excl), g.seen(&shared));
    eprintln!("before: exclusive {e0}\n        shared {s0}");
    let held = *e0.cpus.iter().max().expect("exclusive CPUs");
    let pooled = *s0.cpus.iter().filter(|c| **c != 0).max().expect("pool CPU");
    assert!(held != 0 && !s0.cpus.contains(&held), "{e0}\n{s0}");

    let _restore = Restore(vec![held, pooled]);
    let seen_before = changes(g);
    set_online(held, false);
    set_online(pooled, false);
    let noticed = Guest::wait(60, || changes(g) > seen_before);
    assert!(noticed, "no change seen:\n{}", g.plugin_tail(20));
    assert!(
        Guest::wait(30, || !configured(&s0.cgroup).contains(&pooled)),
        "the shared container's cgroup still has CPU {pooled}: {}\n{}",
        list(&configured(&s0.cgroup)),
        g.plugin_tail(20)
    );
    gone_cpus_are_reported_and_never_given(g, &excl, held, pooled, "hot", "offline");

    // Back online: the pool and the holder get them again.
    let seen_before = changes(g);
    set_online(held, true);
    set_online(pooled, true);
    gone_cpus_come_back(
        g,
        seen_before,
        (&excl, &e0.cpus, held),
        (&shared, pooled),
        "online again",
    );
}

/// With CPU `held` of the exclusive container `excl` and CPU `pooled` of the shared pool gone
/// (`how`: offline or unplugged): the holder is reported (log, `placements`, `verify`), and a new
/// exclusive and a new shared container (pods `PREFIX-new`, `PREFIX-new-shared`) get neither.
pub(crate) fn gone_cpus_are_reported_and_never_given(
    g: &Guest,
    excl: &str,
    held: u32,
    pooled: u32,
    prefix: &str,
    how: &str,
) {
    let log = g.plugin.output();
    assert!(
        log.lines()
            .any(|l| l.contains("exclusive CPUs went offline") && l.contains(excl)),
        "the holder is not reported:\n{}",
        g.plugin_tail(20)
    );
    let p = g.placements();
    assert_eq!(row(&p, excl)["offline_cpus"], held.to_string(), "{p}");
    let (ok, out) = g.verify();
    assert!(ok, "verify with an {how} CPU held:\n{out}");
    assert!(out.contains(&format!("offline: CPUs {held}")), "{out}");
    let pod = g.pod(
        &format!("{prefix}-new"),
        Qos::Guaranteed,
        &[("policy", "best-effort")],
    );
    let new_excl = g.seen(
        &g.run(
            &pod,
            &ContainerSpec::new("busy")
                .cpu_millis(1000, Some(1000))
                .memory(32 << 20),
        ),
    );
    let pod = g.pod(
        &format!("{prefix}-new-shared"),
        Qos::Burstable,
        &[("policy", "best-effort")],
    );
    let new_shared = g.seen(
        &g.run(
            &pod,
            &ContainerSpec::new("app")
                .cpu_millis(250, None)
                .memory(32 << 20),
        ),
    );
    eprintln!("{how} {held},{pooled}: new exclusive {new_excl}\n  new shared {new_shared}");
    for (what, s) in [("new exclusive", &new_excl), ("new shared", &new_shared)] {
        let decided = ids(s.decision.get("cpus").map_or("", String::as_str));
        assert!(
            !decided.contains(&held) && !decided.contains(&pooled) && !s.cpus.contains(&pooled),
            "{what} was given an {how} CPU: {s}"
        );
    }
}

/// After CPUs `held` (of the exclusive container `excl`, which ran on `cpus`) and `pooled` (of
/// the shared pool, where `shared` runs) came back (`how`): a change is seen, both containers
/// get them again, `placements` reports nothing offline and `verify` is clean.
pub(crate) fn gone_cpus_come_back(
    g: &Guest,
    seen_before: usize,
    (excl, cpus, held): (&str, &Ids, u32),
    (shared, pooled): (&str, u32),
    how: &str,
) {
    assert!(
        Guest::wait(60, || changes(g) > seen_before),
        "no change seen:\n{}",
        g.plugin_tail(20)
    );
    assert!(
        Guest::wait(30, || g.seen(shared).cpus.contains(&pooled)),
        "the shared container did not get CPU {pooled} back: {}\n{}",
        g.seen(shared),
        g.plugin_tail(20)
    );
    assert!(
        Guest::wait(30, || g.seen(excl).cpus == *cpus),
        "the exclusive container did not get CPU {held} back: {}\n{}",
        g.seen(excl),
        g.plugin_tail(20)
    );
    let p = g.placements();
    assert!(row(&p, excl).get("offline_cpus").is_none(), "{p}");
    let (ok, out) = g.verify();
    assert!(ok, "verify, {how}:\n{out}");
    eprintln!(
        "{how}: exclusive {}\n  shared {}",
        g.seen(excl),
        g.seen(shared)
    );
}
