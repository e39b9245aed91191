//! What the NRI plumbing costs per CreateContainer: a round trip from a simulated runtime to a
//! plugin built on the project's stub (connection multiplexer + ttrpc + the stub's dispatch and
//! conversions), against a raw ttrpc round trip of the same request and response on a plain
//! unix socket (no multiplexer, no stub), measured in the same run.
//!
//! Both sides answer with the same small adjustment, so the difference is the plumbing, not
//! the decision (crates/simulate/benches/placement.rs measures that). Batches of each side alternate, round
//! after round, so load drift on a shared box hits both alike; the table gives the medians,
//! the median of the per-round ratios and their spread.
//!
//! `cargo bench --bench nri_roundtrip`

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nri_protocol::api::{
    self, Container, CreateContainerRequest, CreateContainerResponse, Event, EventMask, LinuxCPU,
    LinuxContainer, LinuxMemory, LinuxResources, MessageField, Mount, PodSandbox,
};
use nri_protocol::mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use nri_protocol::services::{self, create_plugin, create_runtime, PluginClient};
use nri_protocol::stub::{HandlerResult, Plugin, Stub, StubOptions};
use test_support::nri_sim::cpu_adjustment;
use tokio::net::UnixListener;
use ttrpc::asynchronous::{Client, Server, TtrpcContext};

const ROUNDS: usize = 15;
const PER_BATCH: usize = 200;

/// A request shaped like containerd's: pod and container with labels, annotations, env,
/// mounts and Linux resources (about 1.5 KiB on the wire).
fn request() -> CreateContainerRequest {
    let kv = |k: String, v: String| (k, v);
    let pod = PodSandbox {
        id: "a3f1c2d4e5b6a7980123456789abcdef0123456789abcdef0123456789abcdef".into(),
        name: "trainer-7d9f8c6b5-x2k4q".into(),
        uid: "5f0e6d1c-2b3a-4c5d-8e9f-0a1b2c3d4e5f".into(),
        namespace: "default".into(),
        labels: (0..5)
            .map(|i| kv(format!("label-{i}"), format!("value-{i}")))
            .collect(),
        annotations: (0..5)
            .map(|i| kv(format!("example.com/annotation-{i}"), format!("value-{i}")))
            .collect(),
        ..Default::default()
    };
    let container = Container {
        id: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".into(),
        pod_sandbox_id: pod.id.clone(),
        name: "trainer".into(),
        args: vec!["/bin/sleep".into(), "3600".into()],
        env: (0..10).map(|i| format!("VAR_{i}=value-{i}")).collect(),
        mounts: (0..5)
            .map(|i| Mount {
                destination: format!("/data/{i}"),
                type_: "bind".into(),
                source: format!("/var/lib/kubelet/pods/x/volumes/{i}"),
                options: vec!["rbind".into(), "rprivate".into(), "rw".into()],
                ..Default::default()
            })
            .collect(),
        linux: MessageField::some(LinuxContainer {
            resources: MessageField::some(LinuxResources {
                cpu: MessageField::some(LinuxCPU {
                    shares: MessageField::some(api::OptionalUInt64 {
                        value: 2048,
                        ..Default::default()
                    }),
                    quota: MessageField::some(api::OptionalInt64 {
                        value: 200_000,
                        ..Default::default()
                    }),
                    period: MessageField::some(api::OptionalUInt64 {
                        value: 100_000,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                memory: MessageField::some(LinuxMemory {
                    limit: MessageField::some(api::OptionalInt64 {
                        value: 1 << 30,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    CreateContainerRequest {
        pod: MessageField::some(pod),
        container: MessageField::some(container),
        ..Default::default()
    }
}

/// A plugin on the project's stub.
struct StubPlugin;

#[async_trait]
impl Plugin for StubPlugin {
    fn events(&self) -> EventMask {
        EventMask::of(&[Event::CREATE_CONTAINER])
    }

    async fn create_container(
        &self,
        _pod: PodSandbox,
        _container: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        Ok(CreateContainerResponse {
            adjust: MessageField::some(cpu_adjustment()),
            ..Default::default()
        })
    }
}

/// The generated Plugin service implemented directly: no stub, no multiplexer.
struct RawPlugin;

#[async_trait]
impl services::Plugin for RawPlugin {
    async fn create_container(
        &self,
        _ctx: &TtrpcContext,
        _req: CreateContainerRequest,
    ) -> ttrpc::Result<CreateContainerResponse> {
        Ok(CreateContainerResponse {
            adjust: MessageField::some(cpu_adjustment()),
            ..Default::default()
        })
    }
}

/// The runtime's Runtime service: accepts the registration, nothing else.
struct Registrar;

#[async_trait]
impl services::Runtime for Registrar {
    async fn register_plugin(
        &self,
        _ctx: &TtrpcContext,
        _req: api::RegisterPluginRequest,
    ) -> ttrpc::Result<api::Empty> {
        Ok(api::Empty::default())
    }
}

fn ctx() -> ttrpc::context::Context {
    ttrpc::context::with_duration(Duration::from_secs(10))
}

type BoxError = Box<dyn std::error::Error>;

/// The runtime side of a stub connection: the plugin dials `dir/nri.sock`, the runtime serves
/// its Runtime service on connection 2 and calls the plugin on connection 1, as containerd.
async fn stub_side(dir: &std::path::Path) -> Result<(PluginClient, Mux, Server), BoxError> {
    let path = dir.join("nri.sock");
    let listener = UnixListener::bind(&path)?;
    let stub = Stub::new(StubOptions::new("bench", "10").socket(&path))?;
    tokio::spawn(stub.run(Arc::new(StubPlugin)));
    let (stream, _) = listener.accept().await?;
    // Opened before reading, or an early RegisterPlugin is dropped (as containerd does).
    let mux = Mux::blocked(stream);
    let mut server = Server::new()
        .register_service(create_runtime(Arc::new(Registrar)))
        .add_listener(mux.listener(RUNTIME_SERVICE_CONN)?);
    server.start().await?;
    let client = PluginClient::new(Client::new(mux.socket(PLUGIN_SERVICE_CONN)?));
    mux.unblock();
    let configure = api::ConfigureRequest {
        runtime_name: "containerd".into(),
        runtime_version: "v2.1.1".into(),
        registration_timeout: 5000,
        request_timeout: 2000,
        ..Default::default()
    };
    client.configure(ctx(), &configure).await?;
    client
        .synchronize(ctx(), &api::SynchronizeRequest::default())
        .await?;
    Ok((client, mux, server))
}

async fn raw_side(dir: &std::path::Path) -> Result<(PluginClient, Server), BoxError> {
    let addr = format!("unix://{}", dir.join("raw.sock").display());
    let mut server = Server::new()
        .bind(&addr)?
        .register_service(create_plugin(Arc::new(RawPlugin)));
    server.start().await?;
    let client = PluginClient::new(Client::connect(&addr).await?);
    Ok((client, server))
}

/// Mean time per round trip over `n` sequential calls.
async fn batch(client: &PluginClient, req: &CreateContainerRequest, n: usize) -> Duration {
    let t = Instant::now();
    for _ in 0..n {
        let reply = client.create_container(ctx(), req).await;
        assert!(reply.is_ok_and(|r| r.adjust.is_some()), "round trip failed");
    }
    t.elapsed() / n as u32
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> Result<(), BoxError> {
    // `cargo test --benches` runs bench targets without --bench: nothing to time then.
    if !std::env::args().any(|a| a == "--bench") {
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let dir = tempfile::tempdir()?;
        let (stub, mux, mut stub_server) = stub_side(dir.path()).await?;
        let (raw, mut raw_server) = raw_side(dir.path()).await?;
        let req = request();
        // Warm both paths (allocator, connection buffers).
        batch(&stub, &req, PER_BATCH).await;
        batch(&raw, &req, PER_BATCH).await;
        let (mut s, mut r, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            let (a, b) = if round % 2 == 0 {
                let a = batch(&stub, &req, PER_BATCH).await;
                (a, batch(&raw, &req, PER_BATCH).await)
            } else {
                let b = batch(&raw, &req, PER_BATCH).await;
                (batch(&stub, &req, PER_BATCH).await, b)
            };
            s.push(a.as_secs_f64() * 1e6);
            r.push(b.as_secs_f64() * 1e6);
            ratio.push(a.as_secs_f64() / b.as_secs_f64());
        }
        let (lo, hi) = ratio
            .iter()
            .fold((f64::MAX, 0.0f64), |(l, h), x| (l.min(*x), h.max(*x)));
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "CreateContainer round trips: {ROUNDS} rounds of {PER_BATCH} calls per side; load {}",
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
        println!(
            "\n| path | per round trip (median) | ratio to raw ttrpc (median) | spread (min-max) |"
        );
        println!("|---|---|---|---|");
        println!(
            "| raw ttrpc, plain unix socket | {:.1} µs | 1.00 | - |",
            median(&mut r)
        );
        println!(
            "| nri-protocol stub: mux + ttrpc + dispatch | {:.1} µs | {:.2} | {lo:.2}-{hi:.2} |",
            median(&mut s),
            median(&mut ratio)
        );
        mux.close();
        stub_server.shutdown().await?;
        raw_server.shutdown().await?;
        Ok(())
    })
}
