//! Requests the placement unit tests share.

use super::request::{PodInfo, Request};

/// Container `c{n}` of pod `pod{n}`: Guaranteed with `cpus` whole CPUs and 1 GiB (exclusive),
/// or, with 0, a shared container without limits.
pub(crate) fn request(n: usize, cpus: u64) -> Request {
    Request {
        container_id: format!("c{n}"),
        container_name: "main".into(),
        pod: PodInfo {
            uid: format!("uid{n}"),
            namespace: "default".into(),
            name: format!("pod{n}"),
            ..PodInfo::default()
        },
        cpu_request_milli: cpus * 1000,
        cpu_limit_milli: (cpus > 0).then_some(cpus * 1000),
        memory_limit_bytes: (cpus > 0).then_some(1 << 30),
        ..Request::default()
    }
}
