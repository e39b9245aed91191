//! The daemon's memory during an NRI Synchronize at the documented limits (64 MiB of encoded
//! pods and containers, `MAX_SYNC_OBJECTS` of them, in chunks of at most ttrpc's 4 MiB frame): its peak RSS (`VmHWM`) stays within twice what was sent plus
//! its steady state before the Synchronize, whatever the messages carry. Each case runs in a
//! fresh daemon, since the peak only ever grows:
//! - many containers with huge environments (20 pods, 75,000 variables each),
//! - tens of MiB of empty environment strings,
//! - a 4 MiB chunk of empty containers (more than the object limit: refused, still bounded),
//! - the documented maxima together: 8,192 pods and containers in nearly 64 MiB (the figure
//!   the DaemonSet's memory request and limit come from, see docs/install.md).

use std::time::Duration;

use nri_protocol::api::{self, Message, MessageField};
use test_support::daemon::{burstable, connect_configured, start_daemon};
use test_support::nri_sim::ctx;
use tokio::net::UnixListener;

/// ttrpc's largest frame (`ttrpc::proto::MESSAGE_LENGTH_MAX`), less room for its header.
const CHUNK_BYTES: usize = (4 << 20) - 4096;

/// `VmRSS` and `VmHWM` of process `pid`, in bytes.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} in {status}"))
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / f64::from(1 << 20))
}

fn sandbox(i: usize) -> api::PodSandbox {
    api::PodSandbox {
        id: format!("sb-{i}"),
        uid: format!("uid-{i}"),
        name: format!("pod-{i}"),
        namespace: "default".into(),
        ..Default::default()
    }
}

fn running(id: &str, pod: usize, env: Vec<String>) -> api::Container {
    let mut c = burstable(id);
    c.pod_sandbox_id = format!("sb-{pod}");
    c.state = api::ContainerState::CONTAINER_RUNNING.into();
    c.env = env;
    c
}

/// Splits pods and containers into Synchronize chunks of at most [`CHUNK_BYTES`], the last
/// one with `more` false, as NRI v0.7+ runtimes send them.
fn chunked(
    pods: Vec<api::PodSandbox>,
    containers: Vec<api::Container>,
) -> Vec<api::SynchronizeRequest> {
    let mut out = vec![api::SynchronizeRequest {
        pods,
        ..Default::default()
    }];
    let mut size = out[0].compute_size() as usize;
    for c in containers {
        // A container's field costs its size, a tag and a length of at most 5 bytes.
        let cost = c.compute_size() as usize + 6;
        if size + cost > CHUNK_BYTES {
            out.push(api::SynchronizeRequest::default());
            size = 0;
        }
        size += cost;
        out.last_mut().expect("one chunk").containers.push(c);
    }
    let n = out.len();
    for (i, r) in out.iter_mut().enumerate() {
        r.more = i + 1 < n;
    }
    out
}

/// A context with room for the daemon to place a node's worth of containers (debug build).
fn long_ctx() -> ttrpc::context::Context {
    ttrpc::context::with_duration(Duration::from_secs(120))
}

/// Starts a daemon, plays containerd 2.1 up to Configure, sends `chunks` as one Synchronize,
/// and checks the daemon's peak against its steady state and what was sent. Returns whether
/// the runtime got an answer to every chunk.
async fn peak_within_bound(case: &str, chunks: Vec<api::SynchronizeRequest>) -> bool {
    let dir = tempfile::tempdir().expect("tmp");
    let listener = UnixListener::bind(dir.path().join("nri.sock")).expect("runtime socket");
    let mut d = start_daemon(dir.path(), &dir.path().join("state"));
    let rt = connect_configured(&listener).await;
    // Settle: the metrics listener and the first NRT/metrics refresh are part of steady state.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (steady, hwm_before) = memory(d.pid());
    let encoded: u64 = chunks.iter().map(|c| c.compute_size()).sum();
    let mut answered = true;
    for chunk in &chunks {
        let ctx = if chunk.more { ctx() } else { long_ctx() };
        if let Err(e) = rt.plugin.synchronize(ctx, chunk).await {
            eprintln!("{case}: Synchronize chunk refused: {e:?}");
            answered = false;
            break;
        }
    }
    let (_, peak) = memory(d.pid());
    assert!(
        d.exited().is_none(),
        "{case}: the daemon died:\n{}",
        d.output()
    );
    // RSS counts whole pages, and the runtime's threads touch a little memory of their own
    // meanwhile (a new allocator arena on a loaded machine): 2 MiB of slack for that, far
    // below what decoding whole cost.
    let bound = steady + 2 * encoded + (2 << 20);
    eprintln!(
        "{case}: {} chunk(s), {} encoded; steady {} (peak before {}), peak {}, bound {}",
        chunks.len(),
        mib(encoded),
        mib(steady),
        mib(hwm_before),
        mib(peak),
        mib(bound)
    );
    assert!(
        peak <= bound,
        "{case}: peak RSS {} is over twice the {} sent plus the {} steady state (and 2 MiB)",
        mib(peak),
        mib(encoded),
        mib(steady)
    );
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_environments_cost_at_most_twice_their_size() {
    // 20 pods, one container each, 75,000 variables of about 9 bytes: 12.9 MiB.
    let pods = (0..20).map(sandbox).collect();
    let containers = (0..20)
        .map(|i| {
            let env = (0..75_000).map(|k| format!("V{k:05}=x")).collect();
            running(&format!("huge-env-{i}"), i, env)
        })
        .collect();
    let chunks = chunked(pods, containers);
    assert!(peak_within_bound("huge env", chunks).await, "answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_environment_strings_cost_at_most_twice_their_size() {
    // 15 containers of 1.9 million empty strings each: 57 MiB of 2-byte entries, under the
    // 64 MiB limit.
    let pods = vec![sandbox(0)];
    let containers = (0..15)
        .map(|i| running(&format!("empty-env-{i}"), 0, vec![String::new(); 1_990_000]))
        .collect();
    let chunks = chunked(pods, containers);
    assert!(
        peak_within_bound("empty env strings", chunks).await,
        "answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_of_empty_containers_costs_at_most_twice_its_size() {
    // One 4 MiB chunk of empty containers (2 bytes each): two million of them, far over the
    // object limit, so the Synchronize is refused; the refusal must be bounded too.
    let req = api::SynchronizeRequest {
        containers: vec![api::Container::default(); (CHUNK_BYTES - 16) / 2],
        more: false,
        ..Default::default()
    };
    let answered = peak_within_bound("empty containers", vec![req]).await;
    assert!(
        !answered,
        "two million containers are over the object limit"
    );
}

#[allow(dead_code)]
fn _uses(_: MessageField<api::LinuxContainer>) {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_maxima_cost_at_most_twice_their_size() {
    // nri-align's limits together: 8,192 pods and containers (256 pods, 7,936 containers with
    // a runtime's 64-hex ids and cgroups paths) in nearly 64 MiB, the rest of each container
    // being environment and annotations it does not read, as a real node's are.
    let objects = nri_align::enforce::nri::MAX_SYNC_OBJECTS;
    let pods: Vec<_> = (0..256).map(sandbox).collect();
    let containers = (0..objects - 256)
        .map(|i| {
            let id = format!("{:064x}", i as u128 * 0x9e37_79b9_7f4a_7c15);
            let env = (0..120)
                .map(|k| format!("PAD_{k:03}={}", "p".repeat(56)))
                .collect();
            let mut c = running(&id, i % 256, env);
            c.name = format!("ctr-{}", i / 256);
            c.annotations
                .insert("io.kubernetes.container.hash".into(), format!("{i:08x}"));
            if let Some(l) = c.linux.as_mut() {
                l.cgroups_path = format!("kubepods-burstable-pod{i}.slice:cri-containerd:{id}");
            }
            c
        })
        .collect();
    let chunks = chunked(pods, containers);
    let encoded: u64 = chunks.iter().map(|c| c.compute_size()).sum();
    assert!(
        encoded <= 64 << 20,
        "{encoded} bytes, over the 64 MiB limit"
    );
    assert!(encoded >= 60 << 20, "{encoded} bytes: not at the limit");
    assert!(
        peak_within_bound("documented maxima", chunks).await,
        "answered"
    );
}
