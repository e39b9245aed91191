//! The request the placement benches time: a Guaranteed container as the kubelet and a device
//! plugin hand it over. Shared by `benches/placement.rs` and `benches/scaling.rs`.

use nri_align::placement::Request;

/// A Guaranteed container: `cpus` exclusive CPUs, `gib` of memory, and `gpus` and `nics` as a
/// device plugin would have allocated them.
pub fn req(id: &str, cpus: u64, gib: u64, gpus: &[String], nics: &[String]) -> Request {
    let mut r = Request {
        container_id: id.into(),
        container_name: "c".into(),
        cpu_request_milli: cpus * 1000,
        cpu_limit_milli: Some(cpus * 1000),
        memory_limit_bytes: Some(gib << 30),
        allocated_gpus: gpus.to_vec(),
        allocated_nics: nics.to_vec(),
        ..Request::default()
    };
    r.pod.uid = id.into();
    r.pod.name = id.into();
    r.pod.namespace = "bench".into();
    r
}
