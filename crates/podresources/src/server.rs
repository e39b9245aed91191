//! A PodResources v1 server of our own, serving an allocation a test sets, with the kubelet's
//! answers (`pkg/kubelet/apis/podresources/server_v1.go`) and knobs for a misbehaving kubelet.

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use protobuf::Message;
use unix_grpc::{GrpcError, Handler, Server, ServerOptions, Status};

use crate::{method, proto};

/// How the test kubelet misbehaves (all off by default).
#[derive(Debug, Clone, Default)]
pub struct Behaviour {
    /// Sleep this long before every answer (a slow or hung kubelet).
    pub delay: Option<Duration>,
    /// Answer `List` with this many bytes of padding pods on top of the real ones (a response
    /// over the client's size limit).
    pub oversize: Option<usize>,
    /// Answer `Get` as a kubelet without the KubeletPodResourcesGet feature gate does.
    pub get_disabled: bool,
}

#[derive(Default)]
struct State {
    pods: Vec<proto::PodResources>,
    allocatable: proto::AllocatableResourcesResponse,
    behaviour: Behaviour,
}

/// A running test kubelet (PodResources only). Dropping it stops it and removes its socket.
pub struct TestKubelet {
    state: Arc<RwLock<State>>,
    server: Server,
}

impl TestKubelet {
    /// Serves `pods` on a unix socket at `path` (on the current tokio runtime).
    pub fn start(path: &Path, pods: Vec<proto::PodResources>) -> Result<Self, GrpcError> {
        let state = Arc::new(RwLock::new(State {
            pods,
            ..Default::default()
        }));
        let handler = handler(state.clone());
        let server = Server::bind(path, handler, ServerOptions::default())?;
        Ok(Self { state, server })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        self.server.path()
    }

    /// Replaces the served allocation (a pod created, deleted, restarted).
    pub fn set_pods(&self, pods: Vec<proto::PodResources>) {
        if let Ok(mut s) = self.state.write() {
            s.pods = pods;
        }
    }

    /// Sets what `GetAllocatableResources` answers.
    pub fn set_allocatable(&self, allocatable: proto::AllocatableResourcesResponse) {
        if let Ok(mut s) = self.state.write() {
            s.allocatable = allocatable;
        }
    }

    /// Sets how the server misbehaves.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        if let Ok(mut s) = self.state.write() {
            s.behaviour = behaviour;
        }
    }

    /// Stops serving: open connections are dropped and the socket file removed (a kubelet
    /// that went away).
    pub async fn stop(self) {
        self.server.shutdown().await;
    }
}

fn handler(state: Arc<RwLock<State>>) -> Handler {
    Arc::new(move |path: String, payload: Bytes| {
        let state = state.clone();
        Box::pin(async move {
            let (delay, reply) = {
                let s = state
                    .read()
                    .map_err(|_| Status::new(13, "test kubelet state poisoned"))?;
                (s.behaviour.delay, answer(&s, &path, &payload))
            };
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            reply
        })
    })
}

fn answer(s: &State, path: &str, payload: &[u8]) -> Result<Bytes, Status> {
    match path {
        method::LIST => {
            proto::ListPodResourcesRequest::parse_from_bytes(payload).map_err(bad_request)?;
            let mut resp = proto::ListPodResourcesResponse::new();
            resp.pod_resources = s.pods.clone();
            if let Some(bytes) = s.behaviour.oversize {
                resp.pod_resources.push(padding_pod(bytes));
            }
            encode(&resp)
        }
        method::GET => {
            let req =
                proto::GetPodResourcesRequest::parse_from_bytes(payload).map_err(bad_request)?;
            if s.behaviour.get_disabled {
                return Err(Status::new(2, "PodResources API Get method disabled"));
            }
            let Some(pod) = s
                .pods
                .iter()
                .find(|p| p.namespace == req.pod_namespace && p.name == req.pod_name)
            else {
                // The kubelet's exact words, sent with code Unknown (a plain Go error).
                return Err(Status::new(
                    2,
                    format!(
                        "pod {} in namespace {} not found",
                        req.pod_name, req.pod_namespace
                    ),
                ));
            };
            let mut resp = proto::GetPodResourcesResponse::new();
            resp.pod_resources = protobuf::MessageField::some(pod.clone());
            encode(&resp)
        }
        method::GET_ALLOCATABLE => {
            proto::AllocatableResourcesRequest::parse_from_bytes(payload).map_err(bad_request)?;
            encode(&s.allocatable)
        }
        other => Err(Status::new(
            12,
            format!("unknown method {other} for service v1.PodResourcesLister"),
        )),
    }
}

/// A pod whose name pads the response by about `bytes` bytes.
fn padding_pod(bytes: usize) -> proto::PodResources {
    let mut p = proto::PodResources::new();
    p.namespace = "padding".into();
    p.name = "x".repeat(bytes);
    p
}

fn encode<M: Message>(m: &M) -> Result<Bytes, Status> {
    m.write_to_bytes()
        .map(Bytes::from)
        .map_err(|e| Status::new(13, format!("encode: {e}")))
}

fn bad_request(e: protobuf::Error) -> Status {
    Status::new(13, format!("grpc: error unmarshalling request: {e}"))
}
