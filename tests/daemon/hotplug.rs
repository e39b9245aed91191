//! CPU hot-plug under the release daemon: an emulated host tree (`emulate --host vm-2s4n`,
//! CPUs 0-7 on four nodes) given as `--host-root`, a simulated runtime on its NRI socket, and
//! the tree's `cpu/online` rewritten as the kernel would on `echo 0 > cpuN/online`:
//! - with no event at all, the daemon's own poll sees the change: the exclusive container
//!   that held the CPU is reported (log, gauge, `placements`), the next shared container gets
//!   the pool without the offline CPU, and a new exclusive one never gets it;
//! - a half-written `online` file and a vanished one are counted and logged once per kind,
//!   and change nothing;
//! - the CPU back online returns to its holder.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nri_align::topology::CpuSet;
use nri_protocol::api::{self, MessageField};
use test_support::daemon::{connect, create_in, gauge, pod};
use test_support::e2e::{wait_until, write_private, PluginProcess};
use test_support::nri_sim::RuntimeSide;
use tokio::net::UnixListener;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_nri-align")
}

/// A Guaranteed container of `cores` CPUs (0: Burstable, the shared pool).
fn container(id: &str, cores: i64) -> api::Container {
    let (shares, quota) = if cores > 0 {
        (cores as u64 * 1024, cores * 100_000)
    } else {
        (256, 50_000)
    };
    let cpu = api::LinuxCPU {
        shares: MessageField::some(api::OptionalUInt64 {
            value: shares,
            ..Default::default()
        }),
        quota: MessageField::some(api::OptionalInt64 {
            value: quota,
            ..Default::default()
        }),
        period: MessageField::some(api::OptionalUInt64 {
            value: 100_000,
            ..Default::default()
        }),
        ..Default::default()
    };
    let memory = api::LinuxMemory {
        limit: MessageField::some(api::OptionalInt64 {
            value: 64 << 20,
            ..Default::default()
        }),
        ..Default::default()
    };
    api::Container {
        id: id.into(),
        pod_sandbox_id: "sb-full".into(),
        name: id.into(),
        linux: MessageField::some(api::LinuxContainer {
            resources: MessageField::some(api::LinuxResources {
                cpu: MessageField::some(cpu),
                memory: MessageField::some(memory),
                ..Default::default()
            }),
            cgroups_path: format!("/nri-align-test-hotplug/{id}"),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn create(rt: &RuntimeSide, id: &str, cores: i64) -> String {
    let reply = create_in(rt, pod(), container(id, cores)).await;
    reply.adjust.linux.resources.cpu.cpus.clone()
}

fn set_online(root: &Path, cpus: &str) {
    std::fs::write(root.join("sys/devices/system/cpu/online"), cpus).expect("online");
}

fn placements(root: &Path, state: &Path) -> serde_json::Value {
    let out = Command::new(bin())
        .args(["placements", "--json", "--state-dir"])
        .arg(state)
        .arg("--host-root")
        .arg(root)
        .output()
        .expect("placements");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn start(dir: &Path, root: &Path, state: &Path) -> PluginProcess {
    let config = dir.join("nri-align.yaml");
    write_private(&config, "metrics_address: \"127.0.0.1:0\"\n").expect("config");
    let mut cmd = Command::new(bin());
    cmd.arg("run")
        .arg("--socket")
        .arg(dir.join("nri.sock"))
        .arg("--state-dir")
        .arg(state)
        .arg("--config")
        .arg(&config)
        .arg("--host-root")
        .arg(root)
        .env("RUST_LOG", "info");
    PluginProcess::spawn_logged(cmd, dir.join("nri-align.log")).expect("start nri-align")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offlined_cpu_under_a_running_daemon_is_followed_without_an_event() {
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path().join("root");
    let out = Command::new(bin())
        .args(["emulate", "--host", "vm-2s4n", "--out"])
        .arg(&root)
        .output()
        .expect("emulate");
    assert!(out.status.success(), "{out:?}");
    let state = dir.path().join("state");
    let listener = UnixListener::bind(dir.path().join("nri.sock")).expect("runtime socket");
    let mut d = start(dir.path(), &root, &state);
    let addr = d.metrics_address().expect("metrics address");
    let rt = connect(&listener).await;

    let held = create(&rt, "exclusive", 2).await;
    assert_eq!(held, "0-1", "{}", d.output());
    assert_eq!(create(&rt, "shared", 0).await, "2-7");

    // CPU 1 (held) and CPU 4 (in the pool) go offline; no event follows.
    set_online(&root, "0,2-3,5-7\n");
    assert!(
        wait_until(Duration::from_secs(15), || gauge(
            &addr,
            "nri_align_held_cpus_offline"
        ) == Some(1.0)),
        "not seen within the poll: {}",
        d.output()
    );
    let out = d.output();
    assert!(
        out.contains("a container's exclusive CPUs went offline"),
        "{out}"
    );
    assert!(out.contains("offline=1"), "{out}");
    let p = placements(&root, &state);
    let ex = p
        .as_array()
        .and_then(|a| a.iter().find(|r| r["id"] == "exclusive"))
        .expect("exclusive listed");
    assert_eq!(ex["cpus"], "0-1");
    assert_eq!(ex["offline_cpus"], "1", "{p}");
    // The pool lost CPU 4; a new exclusive container never gets CPU 1 or 4.
    assert_eq!(create(&rt, "shared-2", 0).await, "2-3,5-7");
    let got = create(&rt, "exclusive-2", 2).await;
    assert!(
        !got.split([',', '-']).any(|c| c == "1" || c == "4"),
        "{got}"
    );

    // Half-written, then gone: nothing changes, each kind said once.
    set_online(&root, "0-");
    create(&rt, "shared-3", 0).await;
    create(&rt, "shared-4", 0).await;
    std::fs::remove_file(root.join("sys/devices/system/cpu/online")).expect("rm");
    create(&rt, "shared-5", 0).await;
    create(&rt, "shared-6", 0).await;
    let out = d.output();
    let said = |kind: &str| {
        out.lines()
            .filter(|l| l.contains("online CPUs or memory nodes not read") && l.contains(kind))
            .count()
    };
    assert_eq!((said("malformed"), said("missing")), (1, 1), "{out}");
    assert_eq!(
        gauge(
            &addr,
            "nri_align_topology_read_failures_total{kind=\"malformed\"}"
        ),
        Some(2.0)
    );
    assert_eq!(gauge(&addr, "nri_align_held_cpus_offline"), Some(1.0));

    // Back online: CPU 1 is its holder's again, CPU 4 the pool's.
    set_online(&root, "0-7\n");
    let pool: CpuSet = create(&rt, "shared-7", 0).await.parse().expect("cpus");
    let mut want: CpuSet = "2-7".parse().expect("cpus");
    want.subtract(&got.parse().expect("cpus"));
    assert_eq!(pool, want, "CPU 4 back in the pool, CPU 1 not");
    assert_eq!(gauge(&addr, "nri_align_held_cpus_offline"), Some(0.0));
    let p = placements(&root, &state);
    let ex = p
        .as_array()
        .and_then(|a| a.iter().find(|r| r["id"] == "exclusive"))
        .expect("exclusive listed");
    assert!(ex.get("offline_cpus").is_none(), "{p}");
    rt.hang_up().await;
    d.stop(nix::sys::signal::Signal::SIGTERM);
}
