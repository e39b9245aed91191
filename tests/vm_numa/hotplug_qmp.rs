//! vCPU hot-unplug and hot-plug through QEMU's monitor while containers run: a guest CPU held
//! by an exclusive container and one of the shared pool are unplugged (`device_del`: the guest
//! kernel offlines each and ejects it through ACPI, so it leaves `present` too, unlike the
//! sysfs offlining of the t7 test), then plugged again (`device_add`; the kernel brings a
//! plugged CPU up offline unless udev onlines it, so the test onlines it through sysfs).
//!
//! The guest cannot reach QEMU's monitor: it asks the host by writing a request file into the
//! shared run directory, which hack/vm-qmp.sh's helper performs with QMP and answers there.
//! The guest is started with every CPU but the boot CPU as a device `cpuN` (N the guest's CPU
//! number), the only kind of CPU QEMU unplugs.

use std::path::{Path, PathBuf};

use crate::guest::{guest, ids, list, Guest, Ids};
use crate::hotplug::{
    changes, configured, gone_cpus_are_reported_and_never_given, gone_cpus_come_back,
};
use crate::kubepods::Qos;
use test_support::e2e::ContainerSpec;

const CPU_DIR: &str = "/sys/devices/system/cpu";

/// The request directory the host's QMP helper watches; `None` when the guest was started
/// without it (an older hack/vm-lib.sh, or `NRI_ALIGN_VM_HOTPLUG_CPUS=0`).
fn qmp_dir() -> Option<PathBuf> {
    let run = std::env::var("VM_RUN").ok()?;
    let dir = Path::new(&run).join("qmp");
    let cpus = Path::new(&run).join("qmp-cpus");
    let any = std::fs::read_to_string(cpus).is_ok_and(|s| !s.trim().is_empty());
    (dir.is_dir() && any).then_some(dir)
}

/// Asks the host's helper for `verb cpuN` and waits for its answer (an unplug waits for the
/// guest's ejection, slow under TCG). `Err` carries the helper's reason.
fn ask(dir: &Path, verb: &str, cpu: u32) -> Result<String, String> {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("{}-{n}-{verb}-cpu{cpu}", std::process::id());
    let tmp = dir.join(format!("{name}.tmp"));
    std::fs::write(&tmp, format!("{verb} cpu{cpu}\n")).map_err(|e| format!("write: {e}"))?;
    std::fs::rename(&tmp, dir.join(format!("{name}.req"))).map_err(|e| format!("rename: {e}"))?;
    let ans = dir.join(format!("{name}.ans"));
    let mut answer = String::new();
    let answered = Guest::wait(240, || {
        answer = std::fs::read_to_string(&ans).unwrap_or_default();
        !answer.is_empty()
    });
    if !answered {
        return Err(format!("no answer to '{verb} cpu{cpu}' within 240s"));
    }
    match answer.strip_prefix("ok") {
        Some(rest) => Ok(rest.trim().to_string()),
        None => Err(answer.trim().to_string()),
    }
}

fn cpu_list(file: &str) -> Ids {
    ids(std::fs::read_to_string(Path::new(CPU_DIR).join(file))
        .unwrap_or_default()
        .trim())
}

/// Onlines `cpu` through sysfs unless it is online already (udev may have done it).
fn online(cpu: u32) {
    let path = format!("{CPU_DIR}/cpu{cpu}/online");
    if std::fs::read_to_string(&path).is_ok_and(|s| s.trim() == "0") {
        std::fs::write(&path, "1").unwrap_or_else(|e| panic!("write {path}: {e}"));
    }
}

/// Plugs `cpu` back and onlines it; `Err` when it is not present and online within a minute.
fn plug(dir: &Path, cpu: u32) -> Result<(), String> {
    if !cpu_list("present").contains(&cpu) {
        ask(dir, "plug", cpu)?;
    }
    if !Guest::wait(60, || cpu_list("present").contains(&cpu)) {
        return Err(format!("CPU {cpu} not present a minute after device_add"));
    }
    // The cpuN directory comes with the ACPI notification, its `online` file a moment later.
    Guest::wait(10, || {
        Path::new(&format!("{CPU_DIR}/cpu{cpu}/online")).exists()
    });
    online(cpu);
    if Guest::wait(30, || cpu_list("online").contains(&cpu)) {
        Ok(())
    } else {
        Err(format!("CPU {cpu} plugged but not online"))
    }
}

/// Plugs its CPUs back when dropped, so that a failed assertion does not leave later tests on
/// a smaller guest.
struct Replug(PathBuf, Vec<u32>);

impl Drop for Replug {
    fn drop(&mut self) {
        for cpu in &self.1 {
            if let Err(e) = plug(&self.0, *cpu) {
                eprintln!("could not restore CPU {cpu}: {e}");
            }
        }
    }
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario in the multi-NUMA guest, step by step: each step checks what the steps before left in the guest"
)]
fn t8_a_vcpu_unplugged_and_plugged_through_qemus_monitor_is_followed() {
    let Some(g) = guest("t8") else { return };
    let Some(dir) = qmp_dir() else {
        eprintln!("SKIP t8: the guest has no hot-pluggable CPUs or no QMP helper (hack/vm-qmp.sh)");
        return;
    };
    let cpus = ask(&dir, "cpus", 0)
        .unwrap_or_else(|e| panic!("the host's QMP helper does not answer: {e}"));
    // QEMU's single-threaded TCG aborts when the guest ejects a CPU: the helper says so.
    if let Some(why) = cpus.lines().find_map(|l| l.strip_prefix("unplug: no")) {
        eprintln!(
            "SKIP t8: the host cannot unplug CPUs of this guest {}",
            why.trim()
        );
        return;
    }
    eprintln!("QEMU's hot-pluggable CPUs: {cpus}");
    let pod = g.pod("qmp-excl", Qos::Guaranteed, &[("policy", "best-effort")]);
    let excl = g.run(
        &pod,
        &ContainerSpec::new("busy")
            .cpu_millis(2000, Some(2000))
            .memory(32 << 20),
    );
    let pod = g.pod("qmp-shared", Qos::Burstable, &[("policy", "best-effort")]);
    let shared = g.run(
        &pod,
        &ContainerSpec::new("app")
            .cpu_millis(250, None)
            .memory(32 << 20),
    );
    let (e0, s0) = (g.seen(&excl), g.seen(&shared));
    eprintln!("before: exclusive {e0}\n        shared {s0}");
    // CPU 0 is the boot CPU, the one QEMU cannot unplug.
    let held = *e0.cpus.iter().max().expect("exclusive CPUs");
    let pooled = *s0.cpus.iter().filter(|c| **c != 0).max().expect("pool CPU");
    assert!(held != 0 && !s0.cpus.contains(&held), "{e0}\n{s0}");
    let possible = cpu_list("possible");

    let _replug = Replug(dir.clone(), vec![held, pooled]);
    let seen_before = changes(g);
    for cpu in [held, pooled] {
        if let Err(e) = ask(&dir, "unplug", cpu) {
            panic!("unplugging CPU {cpu}: {e}\n{}", g.plugin_tail(10));
        }
    }
    let (on, present) = (cpu_list("online"), cpu_list("present"));
    eprintln!(
        "unplugged {held},{pooled}: online {}, present {}, possible {}",
        list(&on),
        list(&present),
        list(&cpu_list("possible"))
    );
    for cpu in [held, pooled] {
        assert!(
            !on.contains(&cpu) && !present.contains(&cpu),
            "CPU {cpu} still online or present after device_del: online {}, present {}",
            list(&on),
            list(&present)
        );
    }
    // The slots stay possible: that is what lets QEMU plug them again.
    assert_eq!(cpu_list("possible"), possible);

    assert!(
        Guest::wait(60, || changes(g) > seen_before),
        "no change seen:\n{}",
        g.plugin_tail(20)
    );
    assert!(
        Guest::wait(30, || !configured(&s0.cgroup).contains(&pooled)),
        "the shared container's cgroup still has CPU {pooled}: {}\n{}",
        list(&configured(&s0.cgroup)),
        g.plugin_tail(20)
    );
    assert!(
        !g.seen(&shared).cpus.contains(&pooled),
        "{}",
        g.seen(&shared)
    );
    gone_cpus_are_reported_and_never_given(g, &excl, held, pooled, "qmp", "unplugged");

    // Plugged again (and onlined): the pool and the holder get them back.
    let seen_before = changes(g);
    for cpu in [held, pooled] {
        if let Err(e) = plug(&dir, cpu) {
            panic!("plugging CPU {cpu} back: {e}");
        }
    }
    gone_cpus_come_back(
        g,
        seen_before,
        (&excl, &e0.cpus, held),
        (&shared, pooled),
        "plugged again",
    );
}
