//! The kubelet's PodResources v1 API: which devices (and exclusive CPUs, memory) the kubelet
//! allocated to each container, read from its unix socket.
//!
//! - [`PodResourcesClient`]: `List`, `Get` and `GetAllocatableResources` with a deadline on
//!   every call (covering the decoding) and a response size limit ([`MAX_RESPONSE`], 4 MiB, by
//!   default), so a broken or hostile kubelet gives a clear error, never an unbounded
//!   allocation or a caller held past its deadline.
//! - [`TestKubelet`]: a server of our own implementing the same service on a unix socket and
//!   serving whatever allocation a test sets (there is no kubelet binary on the test machines),
//!   with the kubelet's answers for an unknown pod and a disabled `Get`, and knobs for a slow,
//!   oversized or vanished kubelet.
//! - [`resource_matches`] and [`DEFAULT_RESOURCES`]: which resource names are devices nri-align
//!   aligns.
//!
//! gRPC goes through `unix-grpc` (h2 with rust-protobuf messages, the stack the CRI client
//! uses): see that crate for why not tonic/prost. What the kubelet serves (from
//! `pkg/kubelet/apis/podresources/server_v1.go`, Kubernetes 1.33/1.34): `List` returns active
//! pods; each pod's containers are its restartable init containers, then its app containers
//! (plain init containers are never listed); a device appears once per NUMA node it reports
//! (one id per `ContainerDevices`), without topology when its plugin gave none. Pods are named
//! by namespace and name: the API carries no pod UID.
#![warn(missing_docs)]

pub mod proto;
mod server;

use std::path::{Path, PathBuf};
use std::time::Duration;

use unix_grpc::{Channel, ChannelOptions, GrpcError};

pub use server::{Behaviour, TestKubelet};

/// Where the kubelet serves the API (`--root-dir` /var/lib/kubelet).
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// Resource names whose devices nri-align aligns by default: NVIDIA GPUs (also time-sliced
/// and MPS-shared ones renamed `.shared`), NVIDIA MIG devices of the mixed strategy, and every
/// RDMA shared device plugin resource. A trailing `*` matches any rest.
pub const DEFAULT_RESOURCES: &[&str] = &[
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-*",
    "rdma/*",
];

/// Largest answer accepted by default. A node's whole `List` is tens of KiB (a few hundred
/// pods with a handful of device ids each); a 15 MiB answer, under gRPC's usual 16 MiB, grew
/// the daemon to 3.1 GiB while decoding and held every container creation for seconds.
pub const MAX_RESPONSE: usize = 4 * 1024 * 1024;

/// gRPC method paths (package `v1`, service `PodResourcesLister`).
pub mod method {
    /// `List`.
    pub const LIST: &str = "/v1.PodResourcesLister/List";
    /// `Get`.
    pub const GET: &str = "/v1.PodResourcesLister/Get";
    /// `GetAllocatableResources`.
    pub const GET_ALLOCATABLE: &str = "/v1.PodResourcesLister/GetAllocatableResources";
}

/// Whether `name` matches `pattern` (exact, or a prefix when the pattern ends with `*`).
pub fn resource_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Why a PodResources call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The socket is absent or refused the connection: no kubelet (or no access to it).
    #[error("kubelet PodResources socket {path}: {source}")]
    Unavailable {
        /// Socket path.
        path: PathBuf,
        /// What failed.
        source: GrpcError,
    },
    /// `Get` for a pod the kubelet does not know.
    #[error("kubelet has no pod {namespace}/{name}")]
    PodNotFound {
        /// Namespace asked for.
        namespace: String,
        /// Name asked for.
        name: String,
    },
    /// Any other failure of a call (deadline, status, size limit, malformed answer).
    #[error("kubelet PodResources {call}: {source}")]
    Call {
        /// "List", "Get", "GetAllocatableResources".
        call: &'static str,
        /// What failed.
        source: GrpcError,
    },
}

/// Limits of a [`PodResourcesClient`].
#[derive(Debug, Clone, Copy)]
pub struct ClientOptions {
    /// Deadline of each call.
    pub timeout: Duration,
    /// Deadline of dialling and the HTTP/2 handshake.
    pub connect_timeout: Duration,
    /// Largest response accepted, in bytes (gRPC's receive limit: a larger one is refused from
    /// its frame header, before it is read).
    pub max_message: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            max_message: MAX_RESPONSE,
        }
    }
}

/// A connected PodResources client.
#[derive(Clone)]
pub struct PodResourcesClient {
    channel: Channel,
    path: PathBuf,
    timeout: Duration,
}

impl PodResourcesClient {
    /// Connects to the kubelet's socket at `path`.
    pub async fn connect(path: &Path, options: ClientOptions) -> Result<Self, Error> {
        let channel = Channel::connect_with(
            path,
            ChannelOptions {
                max_message: options.max_message,
                connect_timeout: options.connect_timeout,
                ..Default::default()
            },
        )
        .await
        .map_err(|source| Error::Unavailable {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            channel,
            path: path.to_path_buf(),
            timeout: options.timeout,
        })
    }

    /// The socket this client talks to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every active pod with its containers' allocations.
    pub async fn list(&self) -> Result<Vec<proto::PodResources>, Error> {
        let resp: proto::ListPodResourcesResponse = self
            .channel
            .unary(
                method::LIST,
                &proto::ListPodResourcesRequest::new(),
                self.timeout,
            )
            .await
            .map_err(|source| self.call_error("List", source))?;
        Ok(resp.pod_resources)
    }

    /// One pod's allocations; [`Error::PodNotFound`] when the kubelet does not know it.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<proto::PodResources, Error> {
        let mut req = proto::GetPodResourcesRequest::new();
        req.pod_namespace = namespace.to_string();
        req.pod_name = name.to_string();
        let resp: Result<proto::GetPodResourcesResponse, _> =
            self.channel.unary(method::GET, &req, self.timeout).await;
        match resp {
            Ok(r) => r.pod_resources.into_option().ok_or_else(|| Error::Call {
                call: "Get",
                source: GrpcError::Protocol("response: Get answered without pod_resources".into()),
            }),
            // The kubelet answers an unknown pod with fmt.Errorf("pod %s in namespace %s not
            // found"), which gRPC sends as code Unknown; NotFound is accepted too.
            Err(GrpcError::Status { code, message })
                if (code == 2 || code == 5) && message.ends_with("not found") =>
            {
                Err(Error::PodNotFound {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                })
            }
            Err(source) => Err(self.call_error("Get", source)),
        }
    }

    /// What the node can allocate.
    pub async fn allocatable(&self) -> Result<proto::AllocatableResourcesResponse, Error> {
        self.channel
            .unary(
                method::GET_ALLOCATABLE,
                &proto::AllocatableResourcesRequest::new(),
                self.timeout,
            )
            .await
            .map_err(|source| self.call_error("GetAllocatableResources", source))
    }

    fn call_error(&self, call: &'static str, source: GrpcError) -> Error {
        match source {
            // The connection broke under us (kubelet restarted): the same as not being there.
            GrpcError::Transport(_) | GrpcError::Connect { .. } => Error::Unavailable {
                path: self.path.clone(),
                source,
            },
            source => Error::Call { call, source },
        }
    }
}

/// Builds allocations the way the kubelet reports them, for tests and the test server.
pub mod build {
    use super::proto;

    /// A pod with containers.
    pub fn pod(
        namespace: &str,
        name: &str,
        containers: Vec<proto::ContainerResources>,
    ) -> proto::PodResources {
        let mut p = proto::PodResources::new();
        p.namespace = namespace.into();
        p.name = name.into();
        p.containers = containers;
        p
    }

    /// A container with device entries (and no exclusive CPUs).
    pub fn container(
        name: &str,
        devices: Vec<proto::ContainerDevices>,
    ) -> proto::ContainerResources {
        let mut c = proto::ContainerResources::new();
        c.name = name.into();
        c.devices = devices;
        c
    }

    /// One allocated device of a DRA claim as the kubelet reports it (`ClaimResource`): the
    /// driver, its pool and the device within it, with the CDI names the driver prepared.
    pub fn claim_resource(
        driver: &str,
        pool: &str,
        device: &str,
        cdi_names: &[&str],
    ) -> proto::ClaimResource {
        let mut r = proto::ClaimResource::new();
        r.driver_name = driver.into();
        r.pool_name = pool.into();
        r.device_name = device.into();
        r.cdi_devices = cdi_names
            .iter()
            .map(|n| {
                let mut d = proto::CDIDevice::new();
                d.name = (*n).to_string();
                d
            })
            .collect();
        r
    }

    /// A claim of the container (`DynamicResource`): its ResourceClaim's namespace and name
    /// and each allocated device.
    pub fn dynamic(
        namespace: &str,
        claim: &str,
        resources: Vec<proto::ClaimResource>,
    ) -> proto::DynamicResource {
        let mut d = proto::DynamicResource::new();
        d.claim_namespace = namespace.into();
        d.claim_name = claim.into();
        d.claim_resources = resources;
        d
    }

    /// The entries the kubelet writes for `ids` of `resource`: one per device and NUMA node
    /// (`numa: None` = the plugin reported no topology).
    pub fn devices(resource: &str, ids: &[(&str, Option<i64>)]) -> Vec<proto::ContainerDevices> {
        ids.iter()
            .map(|(id, numa)| {
                let mut d = proto::ContainerDevices::new();
                d.resource_name = resource.into();
                d.device_ids = vec![(*id).to_string()];
                if let Some(node) = numa {
                    let mut n = proto::NUMANode::new();
                    n.ID = *node;
                    let mut t = proto::TopologyInfo::new();
                    t.nodes = vec![n];
                    d.topology = protobuf::MessageField::some(t);
                }
                d
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
