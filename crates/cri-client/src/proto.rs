//! CRI v1 message types generated at build time from proto/cri/api.proto.
#![allow(warnings, clippy::all, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/cri/api_include.rs"));
