//! The daemon driven over its NRI socket by a simulated runtime (the runtime side of
//! `crates/nri-protocol`'s tests), for the tests of its state dir (`tests/daemon/`): one pod of
//! Burstable containers, placed on the shared pool whatever this machine's CPUs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::e2e::{metric, nri_align_bin, scrape, write_private, PluginProcess};
use crate::nri_sim::{ctx, RuntimeSide};
use nri_align::enforce::state::{Loaded, StateStore};
use nri_protocol::api::{self, MessageField};
use tokio::net::UnixListener;

pub fn pod() -> api::PodSandbox {
    api::PodSandbox {
        id: "sb-full".into(),
        uid: "uid-full".into(),
        name: "full".into(),
        namespace: "default".into(),
        ..Default::default()
    }
}

/// A Burstable container (250m request): the shared pool, whatever this machine's CPUs.
pub fn burstable(id: &str) -> api::Container {
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

pub fn start_daemon(dir: &Path, state: &Path) -> PluginProcess {
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

/// Accepts the daemon's connection and plays containerd 2.1 up to Configure: the next call is
/// the Synchronize.
pub async fn connect_configured(listener: &UnixListener) -> RuntimeSide {
    let (stream, _) = tokio::time::timeout(Duration::from_secs(20), listener.accept())
        .await
        .expect("nri-align did not connect")
        .expect("accept");
    let mut rt = RuntimeSide::start(stream).await;
    rt.expect_registration().await;
    rt.configure("containerd", "v2.1.9", "v0.8.0", "")
        .await
        .expect("configure");
    rt
}

/// Accepts the daemon's connection and plays containerd 2.1 up to an empty Synchronize.
pub async fn connect(listener: &UnixListener) -> RuntimeSide {
    let rt = connect_configured(listener).await;
    rt.plugin
        .synchronize(ctx(), &api::SynchronizeRequest::default())
        .await
        .expect("synchronize");
    rt
}

/// Sends CreateContainer for `container` of `pod`; the daemon's answer (a refusal fails the
/// test).
pub async fn create_in(
    rt: &RuntimeSide,
    pod: api::PodSandbox,
    container: api::Container,
) -> api::CreateContainerResponse {
    let id = container.id.clone();
    let req = api::CreateContainerRequest {
        pod: MessageField::some(pod),
        container: MessageField::some(container),
        ..Default::default()
    };
    rt.plugin
        .create_container(ctx(), &req)
        .await
        .unwrap_or_else(|e| panic!("CreateContainer {id} refused: {e:?}"))
}

/// Creates `id`: the cpuset of its answer (never empty: it was placed).
pub async fn create(rt: &RuntimeSide, id: &str) -> String {
    let reply = create_in(rt, pod(), burstable(id)).await;
    let cpus = reply.adjust.linux.resources.cpu.cpus.clone();
    assert!(!cpus.is_empty(), "{id} placed");
    cpus
}

pub fn gauge(addr: &str, series: &str) -> Option<f64> {
    metric(&scrape(addr).expect("metrics"), series)
}

pub fn recorded(state: &Path) -> Vec<String> {
    match StateStore::open_read_only(state).expect("reader").load() {
        Loaded::Doc(d) => d.containers.keys().cloned().collect(),
        other => panic!("{other:?}"),
    }
}
