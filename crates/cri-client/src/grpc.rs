//! Unary gRPC on a unix socket: the shared `unix-grpc` crate (also behind the kubelet
//! PodResources client), re-exported under the path this crate has always used.

pub use unix_grpc::*;
