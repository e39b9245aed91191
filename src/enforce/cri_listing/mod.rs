//! Learning the running containers from the runtime's CRI, where NRI does not tell them.
//!
//! A plugin the runtime launches from its plugin directory gets no Synchronize on NRI before
//! v0.7.0 (containerd 1.7). Its state file is then all it knows of what runs; when that file is
//! unusable (a rollback to a build that reads another layout, a damaged disk), missing (first
//! install on a running node), or silent about containers created while the plugin was down,
//! exclusive CPUs and GPUs that running containers hold could be handed out again. So, once
//! the link says the runtime will send no Synchronize, nri-align lists the pods and containers
//! over the runtime's CRI socket (`ListPodSandbox`, `ListContainers`, `ContainerStatus` with
//! `verbose` for each created or running container: the OCI spec NRI would have described) and
//! records every container it has no record of as it runs ([`Engine::adopt_listed`]). It only
//! adds: a record the listing does not mention is left alone, since a container created
//! between the listing and its use must never be released by it.
//!
//!
//! This module only lists; when to list, and what the plugin does meanwhile, is the NRI
//! side's (`enforce::nri::learning`), which knows whether the runtime sends Synchronize.
//!
//! [`Engine::adopt_listed`]: crate::enforce::engine::Engine::adopt_listed

pub mod spec;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cri_client::config::Settings;
use cri_client::grpc::{Code, GrpcError};
use cri_client::proto as cri;
use cri_client::CriClient;
use futures::StreamExt;

use crate::enforce::container::{ContainerState, ContainerView, PodView};

/// containerd's CRI socket where its packages put it.
pub const CONTAINERD_SOCKET: &str = "/run/containerd/containerd.sock";
/// CRI-O's CRI socket where its packages put it.
pub const CRIO_SOCKET: &str = "/var/run/crio/crio.sock";

/// Deadline of one CRI call.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to keep trying: a runtime still starting may not serve CRI yet (containerd 1.7.24
/// here answered the first try, right after Configure; a slower start or a runtime restarting
/// its CRI service answers later).
const TRY_FOR: Duration = Duration::from_secs(120);
/// How long creations wait for the listing at most, counted from the first try: long enough
/// for a runtime finishing its start-up, short enough that a wrong `cri_socket` delays
/// creations (by up to the plugin's wait for the listing each) only briefly.
const HOLD_CREATIONS_FOR: Duration = Duration::from_secs(10);
/// Pause between tries.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// Why the running containers could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum BackfillError {
    /// The socket did not answer.
    #[error("cannot reach the runtime's CRI at {}: {source} (set cri_socket in nri-align's config to the runtime's CRI socket, or \"\" to turn this off)", socket.display())]
    Connect {
        /// The socket tried.
        socket: PathBuf,
        /// What failed.
        source: GrpcError,
    },
    /// A call failed.
    #[error("CRI {call} on {}: {source}", socket.display())]
    Call {
        /// The call.
        call: &'static str,
        /// The socket.
        socket: PathBuf,
        /// What failed.
        source: GrpcError,
    },
}

/// What the runtime's CRI lists.
#[derive(Debug, Default)]
pub struct Listing {
    /// Every pod sandbox.
    pub pods: Vec<PodView>,
    /// Created and running containers (exited ones hold nothing).
    pub containers: Vec<ContainerView>,
    /// Containers whose status carried no runtime spec: recorded with their cpuset and
    /// limits, without device nodes.
    pub status_only: usize,
    /// Containers that ended between the listing and their status.
    pub vanished: usize,
}

/// The CRI socket to read: the configured one (`Some("")` turns learning off), else the
/// packaged default of the runtime `runtime_name` names (as Configure reports it).
pub fn socket_for(configured: Option<&Path>, runtime_name: &str) -> Option<PathBuf> {
    match configured {
        Some(p) if p.as_os_str().is_empty() => None,
        Some(p) => Some(p.to_path_buf()),
        None if runtime_name.eq_ignore_ascii_case("cri-o") => Some(PathBuf::from(CRIO_SOCKET)),
        None if runtime_name.eq_ignore_ascii_case("containerd") => {
            Some(PathBuf::from(CONTAINERD_SOCKET))
        }
        None => None,
    }
}

/// Most `ContainerStatus` calls in flight at once on the listing's one connection. A node runs
/// up to a few hundred containers (the kubelet's default is 110 pods, 250 at most) and
/// creations wait for the listing (up to the plugin's `LEARN_WAIT` each). One
/// call after another, 500 containers took 0.24-0.32 s (median) on containerd 1.7.24 on a
/// 2-core box, 16 at once 0.11-0.16 s (1.8-2.2 times faster); 4 and 64 at once were slower at
/// 500 (`hack/bench-cri-listing`, docs/performance.md). Bounded, so that the answers held at
/// once stay few (about 10 KiB each, at most the client's 16 MiB) and a runtime busy starting
/// containers is not flooded.
pub const STATUS_IN_FLIGHT: usize = 16;

/// Lists the pod sandboxes and the created and running containers over `socket`, with up to
/// [`STATUS_IN_FLIGHT`] `ContainerStatus` calls in flight.
pub async fn list_running(socket: &Path) -> Result<Listing, BackfillError> {
    list_running_with(socket, STATUS_IN_FLIGHT).await
}

/// [`list_running`] with up to `in_flight` `ContainerStatus` calls at once (1: one after
/// another; 0 counts as 1). The containers come out in the order `ListContainers` gave them,
/// whatever order the answers arrive in. A container gone before its status
/// (`NOT_FOUND`) is counted in [`Listing::vanished`]; any other failure fails the listing (the
/// calls still in flight are dropped with it).
pub async fn list_running_with(socket: &Path, in_flight: usize) -> Result<Listing, BackfillError> {
    let settings = Settings {
        runtime_socket: socket.to_path_buf(),
        image_socket: socket.to_path_buf(),
        timeout: CALL_TIMEOUT,
    };
    let client = CriClient::connect(&settings)
        .await
        .map_err(|source| BackfillError::Connect {
            socket: socket.to_path_buf(),
            source,
        })?;
    let call_err = |call: &'static str| {
        move |source| BackfillError::Call {
            call,
            socket: socket.to_path_buf(),
            source,
        }
    };
    let pods = client
        .list_pod_sandbox(&cri::ListPodSandboxRequest::new())
        .await
        .map_err(call_err("ListPodSandbox"))?;
    let listed = client
        .list_containers(&cri::ListContainersRequest::new())
        .await
        .map_err(call_err("ListContainers"))?;
    let mut out = Listing {
        pods: pods.items.iter().map(spec::pod_view).collect(),
        ..Listing::default()
    };
    // The calls share the client's one HTTP/2 connection (h2 multiplexes them as streams; its
    // connection task runs apart from this one). `buffered` keeps at most `in_flight` calls
    // (and their answers) pending and yields the answers in the listing's order. The calls are
    // made into a Vec of (not yet started) futures first, not mapped by a closure over the
    // stream: a closure taking borrowed containers made this future fail `tokio::spawn`'s Send
    // check ("implementation of FnOnce is not general enough").
    let calls: Vec<_> = listed
        .containers
        .iter()
        .filter_map(|c| {
            let state = c.state.enum_value().ok().and_then(spec::live_state)?;
            Some(status_of(&client, c, state))
        })
        .collect();
    let mut statuses = futures::stream::iter(calls).buffered(in_flight.max(1));
    while let Some((c, state, answer)) = statuses.next().await {
        let status = match answer {
            Ok(s) => s,
            Err(GrpcError::Status { code, .. }) if code == Code::NOT_FOUND => {
                out.vanished += 1;
                continue;
            }
            Err(e) => return Err(call_err("ContainerStatus")(e)),
        };
        let (view, source) = spec::container_view(c, state, &status);
        if source == spec::Source::StatusOnly {
            out.status_only += 1;
        }
        out.containers.push(view);
    }
    Ok(out)
}

/// One verbose `ContainerStatus` call, with what the answer is for.
async fn status_of<'a>(
    client: &CriClient,
    c: &'a cri::Container,
    state: ContainerState,
) -> (
    &'a cri::Container,
    ContainerState,
    Result<cri::ContainerStatusResponse, GrpcError>,
) {
    let req = cri::ContainerStatusRequest {
        container_id: c.id.clone(),
        verbose: true,
        ..Default::default()
    };
    (c, state, client.container_status(&req).await)
}

/// Lists over `socket`, retrying until `TRY_FOR` (two minutes) has passed; `slow` is called
/// once when `HOLD_CREATIONS_FOR` (ten seconds) has passed without a listing (so that
/// creations stop waiting). What cannot be had is said in the log, with what to change; `None`
/// then.
pub async fn learn(socket: &Path, slow: impl FnOnce()) -> Option<Listing> {
    let started = Instant::now();
    let mut tries = 0u32;
    let mut slow = Some(slow);
    loop {
        if started.elapsed() >= HOLD_CREATIONS_FOR {
            if let Some(f) = slow.take() {
                tracing::warn!(socket = %socket.display(), "running containers still not listed over CRI after {}s: creations no longer wait for the listing (check cri_socket)", HOLD_CREATIONS_FOR.as_secs());
                f();
            }
        }
        tries += 1;
        match list_running(socket).await {
            Ok(l) => {
                tracing::info!(
                    socket = %socket.display(),
                    pods = l.pods.len(),
                    containers = l.containers.len(),
                    without_spec = l.status_only,
                    ended_meanwhile = l.vanished,
                    tries,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "listed the running containers over CRI (this runtime sends launched plugins no Synchronize)"
                );
                return Some(l);
            }
            Err(e) if started.elapsed() < TRY_FOR => {
                if tries == 1 || tries % 50 == 0 {
                    tracing::info!("running containers not listed yet, retrying: {e}");
                }
                tokio::time::sleep(RETRY_EVERY).await;
            }
            Err(e) => {
                tracing::error!(tries, "running containers not listed, giving up: {e}; containers the state file does not record are not accounted for until the runtime restarts this plugin");
                return None;
            }
        }
    }
}

#[cfg(test)]
mod listing_tests;
#[cfg(test)]
mod tests;
