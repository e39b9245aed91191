//! The release daemon, driven over its NRI socket by a simulated runtime (the runtime side of
//! `crates/nri-protocol`'s tests), with its state dir on a real tmpfs that fills up and is
//! freed again (root only: skipped with the reason otherwise):
//! - while the disk is full, every CreateContainer is answered with its placement, at the
//!   usual cost; the failure is logged once, not per event, and
//!   `nri_align_state_write_failing` says it;
//! - once space is back, the next event persists every live record, a container removed
//!   during the outage included, and logs the recovery once;
//! - a restart reloads exactly those records.

mod common;
#[path = "../crates/nri-protocol/tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::testfs::Mounted;
use common::PluginProcess;
use common::{log_events, metric, nri_align_bin, scrape, wait_until, write_private};
use nri_align::enforce::state::{Loaded, StateStore};
use nri_protocol::api::{self, MessageField};
use support::{ctx, RuntimeSide};
use tokio::net::UnixListener;

fn pod() -> api::PodSandbox {
    api::PodSandbox {
        id: "sb-full".into(),
        uid: "uid-full".into(),
        name: "full".into(),
        namespace: "default".into(),
        ..Default::default()
    }
}

/// A Burstable container (250m request): the shared pool, whatever this machine's CPUs.
fn burstable(id: &str) -> api::Container {
    let cpu = api::LinuxCPU {
        shares: MessageField::some(api::OptionalUInt64 {
            value: 256,
            ..Default::default()
        }),
        quota: MessageField::some(api::OptionalInt64 {
            value: 50_000,
            ..Default::default()
        }),
        period: MessageField::some(api::OptionalUInt64 {
            value: 100_000,
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
                ..Default::default()
            }),
            cgroups_path: format!("/nri-align-test-full/{id}"),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn start_daemon(dir: &Path, state: &Path) -> PluginProcess {
    let config = dir.join("nri-align.yaml");
    write_private(&config, "metrics_address: \"127.0.0.1:0\"\n").expect("config");
    let mut cmd = Command::new(nri_align_bin());
    cmd.arg("run")
        .arg("--socket")
        .arg(dir.join("nri.sock"))
        .arg("--state-dir")
        .arg(state)
        .arg("--config")
        .arg(&config)
        .env("RUST_LOG", "info");
    let log = dir.join(format!("nri-align-{}.log", std::process::id()));
    PluginProcess::spawn_logged(cmd, log).expect("start nri-align")
}

/// Accepts the daemon's connection and plays containerd 2.1 up to an empty Synchronize.
async fn connect(listener: &UnixListener) -> RuntimeSide {
    let (stream, _) = tokio::time::timeout(Duration::from_secs(20), listener.accept())
        .await
        .expect("nri-align did not connect")
        .expect("accept");
    let mut rt = RuntimeSide::start(stream).await;
    rt.expect_registration().await;
    rt.configure("containerd", "v2.1.9", "v0.8.0", "")
        .await
        .expect("configure");
    rt.plugin
        .synchronize(ctx(), &api::SynchronizeRequest::default())
        .await
        .expect("synchronize");
    rt
}

/// Creates `id`: the cpuset of its answer (never empty: it was placed).
async fn create(rt: &RuntimeSide, id: &str) -> String {
    let req = api::CreateContainerRequest {
        pod: MessageField::some(pod()),
        container: MessageField::some(burstable(id)),
        ..Default::default()
    };
    let reply = rt
        .plugin
        .create_container(ctx(), &req)
        .await
        .unwrap_or_else(|e| panic!("CreateContainer {id} refused: {e:?}"));
    let cpus = reply.adjust.linux.resources.cpu.cpus.clone();
    assert!(!cpus.is_empty(), "{id} placed");
    cpus
}

fn gauge(addr: &str, series: &str) -> Option<f64> {
    metric(&scrape(addr).expect("metrics"), series)
}

fn recorded(state: &Path) -> Vec<String> {
    match StateStore::open_read_only(state).expect("reader").load() {
        Loaded::Doc(d) => d.containers.keys().cloned().collect(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_state_disk_admits_every_creation_and_space_back_persists_every_live_record() {
    let Some(fs) = Mounted::tmpfs("daemon_diskfull", 256) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let state = fs.root.join("state");
    let listener = UnixListener::bind(dir.path().join("nri.sock")).expect("runtime socket");
    let mut d = start_daemon(dir.path(), &state);
    let addr = d.metrics_address().expect("metrics address");
    let rt = connect(&listener).await;
    let pool = create(&rt, "before-0").await;
    create(&rt, "before-1").await;
    let started = Instant::now();
    for i in 0..20 {
        create(&rt, &format!("warm-{i}")).await;
    }
    let baseline = started.elapsed() / 20;
    assert_eq!(recorded(&state).len(), 22);
    fs.fill();

    // Full: every creation is answered with its placement.
    let started = Instant::now();
    for i in 0..40 {
        assert_eq!(create(&rt, &format!("full-{i}")).await, pool);
    }
    let per_create = started.elapsed() / 40;
    eprintln!(
        "CreateContainer round trip: {baseline:?} each with room, {per_create:?} with the \
         state disk full"
    );
    assert!(per_create < Duration::from_millis(50), "{per_create:?}");
    // Released while the disk is full.
    let removed = api::RemoveContainerRequest {
        pod: MessageField::some(pod()),
        container: MessageField::some(burstable("before-1")),
        ..Default::default()
    };
    rt.plugin
        .remove_container(ctx(), &removed)
        .await
        .expect("remove");
    let out = d.output();
    let failed: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("decision not persisted"))
        .collect();
    assert_eq!(
        failed.len(),
        1,
        "one line for the outage, not one per event:\n{out}"
    );
    assert!(failed[0].contains("No space left on device"), "{out}");
    eprintln!("{}", failed[0]);
    assert_eq!(gauge(&addr, "nri_align_state_write_failing"), Some(1.0));
    assert_eq!(
        gauge(&addr, "nri_align_state_write_failures_total"),
        Some(1.0),
        "one failed write, the others skipped until the retry"
    );

    // Space back: the first event after the retry delay persists every live record.
    fs.free();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create(&rt, "after").await;
    assert!(
        wait_until(Duration::from_secs(5), || {
            d.output().contains("state persisted again")
        }),
        "{}",
        d.output()
    );
    assert_eq!(gauge(&addr, "nri_align_state_write_failing"), Some(0.0));
    let mut want: Vec<String> = ["before-0", "after"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    want.extend((0..40).map(|i| format!("full-{i}")));
    want.extend((0..20).map(|i| format!("warm-{i}")));
    want.sort();
    assert_eq!(recorded(&state), want, "every live record, before-1 not");
    let recovered = d
        .output()
        .lines()
        .filter(|l| l.contains("state persisted again"))
        .map(str::to_string)
        .collect::<Vec<_>>();
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert!(recovered[0].contains("records=62"), "{recovered:?}");
    eprintln!("{}", recovered[0]);

    // A restart reloads exactly those.
    rt.hang_up().await;
    d.stop(nix::sys::signal::Signal::SIGTERM);
    let mut d = start_daemon(dir.path(), &state);
    assert!(
        d.wait_for_output("previous decisions restored", Duration::from_secs(20)),
        "{}",
        d.output()
    );
    let restored = log_events(&d.output(), "previous decisions restored");
    assert_eq!(restored[0]["restored"], "62", "{}", d.output());
    d.stop(nix::sys::signal::Signal::SIGTERM);
}
