//! A simulated runtime for the benches (`benches/daemon_scale/main.rs`, `benches/engine_create.rs`): listens on an NRI socket like containerd, serves the
//! Runtime service on multiplexed connection 2 (registration; updates accepted) and calls the
//! plugin's service on connection 1, with pods and containers shaped as containerd sends them.
//! [`daemon`]: the release daemon those benches start on an emulated host, and the node whose
//! containers they create and remove through it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub mod daemon;

use async_trait::async_trait;
use nri_protocol::api::{
    self, Container, LinuxCPU, LinuxContainer, LinuxMemory, LinuxResources, MessageField,
    PodSandbox,
};
use nri_protocol::mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use nri_protocol::services::{self, create_runtime, PluginClient};
use tokio::net::UnixListener;
use tokio::sync::mpsc;
use ttrpc::asynchronous::{Client, Server, TtrpcContext};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The runtime's Runtime service: tells the bench when the plugin registered.
struct Registrar(mpsc::UnboundedSender<()>);

#[async_trait]
impl services::Runtime for Registrar {
    async fn register_plugin(
        &self,
        _ctx: &TtrpcContext,
        _req: api::RegisterPluginRequest,
    ) -> ttrpc::Result<api::Empty> {
        let _ = self.0.send(());
        Ok(api::Empty::default())
    }

    async fn update_containers(
        &self,
        _ctx: &TtrpcContext,
        _req: api::UpdateContainersRequest,
    ) -> ttrpc::Result<api::UpdateContainersResponse> {
        Ok(api::UpdateContainersResponse::default())
    }
}

pub fn ctx() -> ttrpc::context::Context {
    ttrpc::context::with_duration(Duration::from_secs(30))
}

/// One plugin connection, as the runtime holds it.
pub struct Connection {
    pub plugin: PluginClient,
    mux: Mux,
    server: Server,
    registered: mpsc::UnboundedReceiver<()>,
}

impl Connection {
    /// Accepts the plugin's connection on `listener` and starts serving the Runtime service.
    pub async fn accept(listener: &UnixListener) -> Result<Connection, BoxError> {
        let (stream, _) = tokio::time::timeout(Duration::from_secs(60), listener.accept())
            .await
            .map_err(|_| "the plugin did not connect within 60 s")??;
        // The plugin registers as soon as it is connected: open both connections before
        // reading, or its RegisterPlugin can be dropped (containerd does the same).
        let mux = Mux::blocked(stream);
        let (tx, registered) = mpsc::unbounded_channel();
        let mut server = Server::new()
            .register_service(create_runtime(Arc::new(Registrar(tx))))
            .add_listener(mux.listener(RUNTIME_SERVICE_CONN)?);
        server.start().await?;
        let plugin = PluginClient::new(Client::new(mux.socket(PLUGIN_SERVICE_CONN)?));
        mux.unblock();
        Ok(Connection {
            plugin,
            mux,
            server,
            registered,
        })
    }

    /// Waits for RegisterPlugin, then configures the plugin as containerd 2.1 does.
    pub async fn register_and_configure(&mut self) -> Result<(), BoxError> {
        tokio::time::timeout(Duration::from_secs(60), self.registered.recv())
            .await
            .map_err(|_| "no RegisterPlugin within 60 s")?
            .ok_or("runtime service gone")?;
        let configure = api::ConfigureRequest {
            runtime_name: "containerd".into(),
            runtime_version: "v2.1.9".into(),
            registration_timeout: 5000,
            request_timeout: 2000,
            ..Default::default()
        };
        self.plugin.configure(ctx(), &configure).await?;
        Ok(())
    }

    /// Synchronize in chunks of at most `chunk` containers (NRI v0.7+), as a runtime with
    /// many containers sends it; returns the updates of the last chunk's reply.
    pub async fn synchronize(
        &self,
        pods: &[PodSandbox],
        containers: &[Container],
        chunk: usize,
    ) -> Result<usize, BoxError> {
        let chunks: Vec<&[Container]> = if containers.is_empty() {
            vec![&[]]
        } else {
            containers.chunks(chunk.max(1)).collect()
        };
        let n = chunks.len();
        let mut updates = 0;
        for (i, part) in chunks.into_iter().enumerate() {
            let first = i == 0;
            let req = api::SynchronizeRequest {
                pods: if first { pods.to_vec() } else { Vec::new() },
                containers: part.to_vec(),
                more: i + 1 < n,
                ..Default::default()
            };
            let reply = self.plugin.synchronize(ctx(), &req).await?;
            updates = reply.update.len();
        }
        Ok(updates)
    }

    pub async fn close(mut self) {
        self.mux.close();
        let _ = self.server.shutdown().await;
    }
}

/// Binds the runtime's NRI socket at `path`.
pub fn listen(path: &Path) -> Result<UnixListener, BoxError> {
    Ok(UnixListener::bind(path)?)
}

/// A 64-hex-digit id, as containerd makes them, from a number.
pub fn hex_id(kind: u8, n: u64) -> String {
    format!("{kind:02x}{n:062x}")
}

/// A pod as containerd sends it: labels and annotations as the kubelet sets them.
pub fn pod(n: u64) -> PodSandbox {
    let kv = |k: &str, v: String| (k.to_string(), v);
    PodSandbox {
        id: hex_id(0xaa, n),
        name: format!("bench-{n}"),
        uid: format!("5f0e6d1c-2b3a-4c5d-8e9f-{n:012x}"),
        namespace: "bench".into(),
        labels: [
            kv("io.kubernetes.pod.name", format!("bench-{n}")),
            kv("io.kubernetes.pod.namespace", "bench".into()),
            kv("app", "bench".into()),
        ]
        .into_iter()
        .collect(),
        annotations: [
            kv("kubernetes.io/config.source", "api".into()),
            kv("kubernetes.io/config.seen", "2026-11-24T10:00:00Z".into()),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    }
}

/// A container of pod `n`: Guaranteed with `cpus` whole CPUs and 64 MiB, or (cpus 0)
/// Burstable with a 100m request, on the shared pool.
pub fn container(n: u64, cpus: i64) -> Container {
    let p = pod(n);
    let cpu = if cpus > 0 {
        LinuxCPU {
            shares: MessageField::some(api::OptionalUInt64 {
                value: cpus as u64 * 1024,
                ..Default::default()
            }),
            quota: MessageField::some(api::OptionalInt64 {
                value: cpus * 100_000,
                ..Default::default()
            }),
            period: MessageField::some(api::OptionalUInt64 {
                value: 100_000,
                ..Default::default()
            }),
            ..Default::default()
        }
    } else {
        LinuxCPU {
            shares: MessageField::some(api::OptionalUInt64 {
                value: 102,
                ..Default::default()
            }),
            period: MessageField::some(api::OptionalUInt64 {
                value: 100_000,
                ..Default::default()
            }),
            ..Default::default()
        }
    };
    let id = hex_id(0xcc, n);
    Container {
        linux: MessageField::some(LinuxContainer {
            resources: MessageField::some(LinuxResources {
                cpu: MessageField::some(cpu),
                memory: MessageField::some(LinuxMemory {
                    limit: MessageField::some(api::OptionalInt64 {
                        value: 64 << 20,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            cgroups_path: format!("/kubepods/pod{}/{id}", p.uid),
            ..Default::default()
        }),
        pod_sandbox_id: p.id.clone(),
        name: format!("c{n}"),
        args: vec!["/bin/sleep".into(), "infinity".into()],
        env: vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            "KUBERNETES_SERVICE_HOST=10.96.0.1".into(),
            "KUBERNETES_SERVICE_PORT=443".into(),
        ],
        labels: [
            ("io.kubernetes.container.name".to_string(), format!("c{n}")),
            ("io.kubernetes.pod.name".to_string(), p.name.clone()),
            ("io.kubernetes.pod.namespace".to_string(), "bench".into()),
        ]
        .into_iter()
        .collect(),
        id,
        state: api::ContainerState::CONTAINER_RUNNING.into(),
        ..Default::default()
    }
}

/// Median and the given quantile of `v` (sorted in place).
pub fn quantiles(v: &mut [f64], q: f64) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(q))
}

/// The 1-, 5- and 15-minute load averages, for the table headers.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Stops and removes container `n` (`exclusive`: made with one CPU of its own), as the runtime
/// does; returns the updates the stop's reply carries (a removal that grows the shared pool
/// sends the shared containers' new cpusets there).
pub async fn stop_and_remove(
    conn: &Connection,
    n: u64,
    exclusive: bool,
) -> Result<Vec<api::ContainerUpdate>, BoxError> {
    let c = container(n, i64::from(exclusive));
    let stop = api::StopContainerRequest {
        pod: MessageField::some(pod(n)),
        container: MessageField::some(c.clone()),
        ..Default::default()
    };
    let reply = conn.plugin.stop_container(ctx(), &stop).await?;
    let remove = api::RemoveContainerRequest {
        pod: MessageField::some(pod(n)),
        container: MessageField::some(c),
        ..Default::default()
    };
    conn.plugin.remove_container(ctx(), &remove).await?;
    Ok(reply.update)
}
