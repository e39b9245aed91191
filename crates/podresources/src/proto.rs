//! PodResources v1 message types generated at build time from proto/podresources/api.proto.
#![allow(warnings, clippy::all, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/pr/api_include.rs"));
