//! Unary gRPC on unix sockets, over h2, with rust-protobuf messages: a client with a bounded
//! response size and a deadline on every step, and a small server.
//!
//! Two local, unary-only gRPC APIs meet nri-align: the CRI (`crates/cri-client`, the tests' and
//! the demo's CRI client) and the kubelet's PodResources v1 (`crates/podresources`, read by the
//! daemon and served by a test server of our own). Both need one POST per call with a 5-byte
//! length prefix and a `grpc-status` trailer, on a unix socket.
//!
//! Why this crate and not tonic + prost:
//! - **One protobuf stack.** The workspace generates every message with rust-protobuf (NRI
//!   through ttrpc-codegen, CRI and PodResources through protobuf-codegen, all in pure Rust).
//!   tonic's codegen targets prost, and prost-build needs a `protoc` binary (or a second pure-Rust
//!   parser): a second message type per proto, and conversions between them at every seam.
//! - **Build cost on 2 cores.** h2, http and bytes are already in the tree (the CRI client); tonic
//!   adds hyper, hyper-util, tower, tower-layer/service, http-body(-util), pin-project and, for a
//!   server, axum: tens of crates for features (streaming, TLS, load balancing, interceptors)
//!   that a local unary call does not use.
//! - **What hand-written code must get right is small and tested here:** framing (uncompressed,
//!   length-checked both ways), status codes and percent-decoded messages, trailers-only
//!   answers, deadlines (`grpc-timeout` sent, and enforced locally on connect, handshake and
//!   call), and hostile peers (a size limit checked against the frame's announced length before
//!   anything is buffered, header lists capped, a server that accepts and never answers).
//!
//! The protocol: gRPC over HTTP/2 (grpc/grpc `doc/PROTOCOL-HTTP2.md`): `POST /pkg.Service/Method`,
//! `content-type: application/grpc`, `te: trailers`, a body of `[compressed u8][len u32 BE][msg]`,
//! and `grpc-status` / `grpc-message` in the trailers (or in the headers of a trailers-only
//! response).
#![warn(missing_docs)]

mod client;
mod frame;
mod server;

pub use client::{Channel, ChannelOptions};
pub use frame::{
    code_name, decode_frame, encode_frame, grpc_timeout, percent_decode, percent_encode, Code,
    GrpcError, Status,
};
pub use server::{Handler, HandlerFuture, Server, ServerOptions};

/// Default largest message accepted (the kubelet's PodResources client and containerd use
/// 16 MiB too).
pub const DEFAULT_MAX_MESSAGE: usize = 16 * 1024 * 1024;
