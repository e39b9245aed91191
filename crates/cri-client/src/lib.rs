//! A small CRI (Kubernetes Container Runtime Interface) client: gRPC over a unix socket, the
//! runtime.v1 messages, crictl's config file and JSON config formats, and the
//! `nri-align-crictl` command line.
pub mod cli;
pub mod client;
pub mod commands;
pub mod config;
pub mod grpc;
pub mod jsonconf;
pub mod output;
pub mod proto;
pub mod render;

pub use client::CriClient;
