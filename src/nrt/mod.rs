//! The cluster view: the node's per-NUMA-node resources as a NodeResourceTopology object
//! (`topology.node.k8s.io/v1alpha2`), built from plain data and published to the API server so
//! topology-aware schedulers (scheduler-plugins' NodeResourceTopologyMatch) stop sending pods a
//! node cannot align.
//!
//! - [`object`]: the v1alpha2 types, field for field, and the resource's coordinates;
//! - [`quantity`]: Kubernetes quantity strings;
//! - [`builder`]: topology + free resources + settings -> object (pure);
//! - [`fingerprint`]: the pod-set fingerprint the scheduler's cache resyncs on;
//! - [`client`]: in-cluster or kubeconfig access (client certificates, bearer tokens);
//! - [`bounded`]: every answer's size and time bounded;
//! - [`ownership`]: whether the server's object is nri-align's to replace (foreign objects,
//!   other producers rewriting it);
//! - [`publish`]: the background publisher (debounced, create-or-replace, retries, backoff);
//! - [`feed`]: the daemon's state changes handed to the publisher without waiting;
//! - [`metrics`]: its counters.
//!
//! docs/nrt.md says what is published and why, with the upstream sources.
//!
//! May use: `placement` (free resources) and `topology`; the `kube` client is used only here,
//! and the engine reaches it only through its observer seam, so no event waits for the API
//! server.

pub mod bounded;
pub mod builder;
pub mod client;
mod failure;
pub mod feed;
pub mod fingerprint;
pub mod metrics;
pub mod object;
pub mod ownership;
pub mod publish;
pub mod quantity;

pub use builder::{build, NrtSettings, ResourceNames, ZoneFree};
pub use client::{ApiAccess, ClientError};
pub use feed::Feed;
pub use object::NodeResourceTopology;
pub use publish::{PublishOptions, PublishStatus, Publisher, Snapshot};
