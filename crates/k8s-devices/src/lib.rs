//! How Kubernetes device plugins name the devices they hand a container, parsed without I/O.
//!
//! Every function here is pure (a `&str` in, a value or a typed error out), bounded in what it
//! allocates, and never panics on any input, so the daemon can call them on whatever a runtime
//! forwards and a fuzzer can call them on anything. What each module reads, and where its rules
//! come from:
//!
//! - [`cdi`]: CDI qualified device names `vendor/class=name` and the `cdi.k8s.io/` container
//!   annotations, as cncf-tags/container-device-interface `pkg/parser` and `pkg/cdi`
//!   (annotations.go) define them (CDI spec 1.1.0).
//! - [`cdi_spec`]: CDI spec files (JSON or YAML, spec versions 0.3.0 to 1.1.0) as
//!   `specs-go/config.go` defines them, validated as `specs-go/version.go` and the reference
//!   library's spec validation do.
//! - [`nvidia`]: `NVIDIA_VISIBLE_DEVICES` values (indices, GPU and MIG UUIDs, MIG indices, the
//!   old MIG form, `all` / `none` / `void` / empty, the volume-mounts marker), the device plugin's
//!   replica ids (`<id>::<n>`), and the `/dev/nvidia*` nodes the device plugin passes
//!   (NVIDIA/k8s-device-plugin `internal/plugin/server.go`, `internal/rm`).
//! - [`rdma`]: the `/dev/infiniband/*` nodes the RDMA shared device plugin passes
//!   (Mellanox/k8s-rdma-shared-dev-plugin through Mellanox/rdmamap).
#![warn(missing_docs)]

pub mod cdi;
pub mod cdi_spec;
pub mod nvidia;
pub mod rdma;

/// Longest input any parser here looks at (an env value, an annotation value, a path): longer
/// input is refused with an error instead of being split or copied.
pub const MAX_INPUT_LEN: usize = 64 * 1024;

/// Most list entries (devices in one env value or annotation) any parser returns.
pub const MAX_ENTRIES: usize = 1024;

/// The start of `s`, at most 64 bytes and cut on a character boundary, for error messages
/// (a hostile 1 MB value is never echoed whole).
pub(crate) fn excerpt(s: &str) -> String {
    const LIMIT: usize = 64;
    if s.len() <= LIMIT {
        return s.to_string();
    }
    let mut end = LIMIT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &s[..end], s.len())
}

#[cfg(test)]
mod tests;
