//! The listing's calls against a CRI server of our own (`unix-grpc`'s server on a unix socket):
//! the `ContainerStatus` calls really overlap on the one connection, never more than the bound,
//! and the answers keep the listing's order, the vanished and the failed apart.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cri_client::grpc::{Handler, Server, ServerOptions, Status};
use cri_client::proto as cri;
use protobuf::Message;
use tokio::sync::Barrier;

use super::{list_running_with, BackfillError};

/// gRPC codes the fake answers with.
const NOT_FOUND: u32 = 5;
const UNAVAILABLE: u32 = 14;

/// What the fake CRI lists and how it answers `ContainerStatus`.
struct Fake {
    /// Containers `ListContainers` returns (id, state).
    containers: Vec<(String, cri::ContainerState)>,
    /// Ids whose status answers with this code instead.
    fail: Vec<(String, u32)>,
    /// The first `hold` status calls wait (at most 2 s) until that many are in flight at once.
    hold: usize,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    arrived: AtomicUsize,
    barrier: Barrier,
}

impl Fake {
    fn new(containers: Vec<(String, cri::ContainerState)>, hold: usize) -> Arc<Self> {
        Arc::new(Self {
            containers,
            fail: Vec::new(),
            hold,
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            arrived: AtomicUsize::new(0),
            barrier: Barrier::new(hold.max(1)),
        })
    }

    async fn status(&self, payload: Bytes) -> Result<Bytes, Status> {
        let req = cri::ContainerStatusRequest::parse_from_bytes(&payload)
            .map_err(|e| Status::new(3, e.to_string()))?;
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        if self.arrived.fetch_add(1, Ordering::SeqCst) < self.hold {
            // A client making one call at a time never gets past this: the test fails on the
            // peak instead of hanging (the wait ends before the client's 5 s call deadline).
            let _ = tokio::time::timeout(Duration::from_secs(2), self.barrier.wait()).await;
        }
        // Later containers answer sooner: the answers arrive out of the listing's order.
        let idx = self
            .containers
            .iter()
            .position(|(id, _)| *id == req.container_id);
        let later = idx.map_or(0, |i| self.containers.len() - i) as u64;
        tokio::time::sleep(Duration::from_millis(later % 5)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if let Some((_, code)) = self.fail.iter().find(|(id, _)| *id == req.container_id) {
            return Err(Status::new(*code, "as the test wants"));
        }
        let status = cri::ContainerStatusResponse {
            status: protobuf::MessageField::some(cri::ContainerStatus {
                id: req.container_id,
                ..Default::default()
            }),
            ..Default::default()
        };
        encode(&status)
    }

    fn serve(self: &Arc<Self>, dir: &tempfile::TempDir) -> Server {
        let fake = self.clone();
        let handler: Handler = Arc::new(move |method, payload| {
            let fake = fake.clone();
            Box::pin(async move {
                match method.as_str() {
                    "/runtime.v1.RuntimeService/ListPodSandbox" => {
                        encode(&cri::ListPodSandboxResponse::new())
                    }
                    "/runtime.v1.RuntimeService/ListContainers" => {
                        let mut resp = cri::ListContainersResponse::new();
                        for (id, state) in &fake.containers {
                            resp.containers.push(cri::Container {
                                id: id.clone(),
                                pod_sandbox_id: "pod".into(),
                                state: (*state).into(),
                                ..Default::default()
                            });
                        }
                        encode(&resp)
                    }
                    "/runtime.v1.RuntimeService/ContainerStatus" => fake.status(payload).await,
                    other => Err(Status::new(12, format!("{other} not served"))),
                }
            })
        });
        Server::bind(
            &dir.path().join("cri.sock"),
            handler,
            ServerOptions::default(),
        )
        .expect("bind")
    }
}

fn encode(m: &impl Message) -> Result<Bytes, Status> {
    m.write_to_bytes()
        .map(Bytes::from)
        .map_err(|e| Status::new(13, e.to_string()))
}

/// `n` containers `c00`, `c01`...: every fifth exited, the others created or running.
fn containers(n: usize) -> Vec<(String, cri::ContainerState)> {
    (0..n)
        .map(|i| {
            let state = match i % 5 {
                4 => cri::ContainerState::CONTAINER_EXITED,
                3 => cri::ContainerState::CONTAINER_CREATED,
                _ => cri::ContainerState::CONTAINER_RUNNING,
            };
            (format!("c{i:02}"), state)
        })
        .collect()
}

fn live_ids(fake: &Fake, skip: &[&str]) -> Vec<String> {
    fake.containers
        .iter()
        .filter(|(id, s)| {
            *s != cri::ContainerState::CONTAINER_EXITED && !skip.contains(&id.as_str())
        })
        .map(|(id, _)| id.clone())
        .collect()
}

#[tokio::test]
async fn status_calls_overlap_up_to_the_bound_and_keep_the_listing_s_order() {
    for bound in [1, 4, 16] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut fake = Fake::new(containers(40), bound);
        Arc::get_mut(&mut fake).expect("unshared").fail = vec![("c07".into(), NOT_FOUND)];
        let server = fake.serve(&dir);
        let listing = list_running_with(server.path(), bound)
            .await
            .expect("listing");
        assert_eq!(
            fake.peak.load(Ordering::SeqCst),
            bound,
            "{bound} in flight on the one connection, never more"
        );
        let ids: Vec<String> = listing.containers.iter().map(|c| c.id.clone()).collect();
        assert_eq!(ids, live_ids(&fake, &["c07"]), "bound {bound}");
        assert_eq!(listing.vanished, 1, "NOT_FOUND: ended meanwhile");
        assert_eq!(listing.status_only, ids.len(), "no verbose info served");
    }
}

#[tokio::test]
async fn a_failed_status_fails_the_listing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut fake = Fake::new(containers(40), 0);
    Arc::get_mut(&mut fake).expect("unshared").fail = vec![("c21".into(), UNAVAILABLE)];
    let server = fake.serve(&dir);
    let err = list_running_with(server.path(), 16)
        .await
        .expect_err("UNAVAILABLE is not an ended container");
    assert!(
        matches!(
            err,
            BackfillError::Call {
                call: "ContainerStatus",
                ..
            }
        ),
        "{err}"
    );
}
