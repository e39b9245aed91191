//! Placement requests as the kubelet and a device plugin hand them over, for the placement tests
//! and benches: one builder, so a field added to `Request` is filled in one place.

use std::collections::BTreeMap;

use align_core::placement::Request;
use align_core::topology::Topology;

/// A gibibyte, the unit the tests give memory in.
pub const GIB: u64 = 1 << 30;

/// A Guaranteed container `id` alone in its pod (pod name `id`, uid `uid-ID`, namespace
/// `default`): `cpu_milli` requested and as much as its limit, `memory` bytes its memory limit.
pub fn guaranteed(id: &str, cpu_milli: u64, memory: Option<u64>) -> Request {
    let mut r = Request {
        container_id: id.into(),
        container_name: id.into(),
        cpu_request_milli: cpu_milli,
        cpu_limit_milli: Some(cpu_milli),
        memory_limit_bytes: memory,
        ..Request::default()
    };
    r.pod.uid = format!("uid-{id}");
    r.pod.name = id.into();
    r.pod.namespace = "default".into();
    r
}

/// `r` in pod `pod` (uid `uid-POD`), with the other containers of that pod.
pub fn in_pod(mut r: Request, pod: &str) -> Request {
    r.pod.uid = format!("uid-{pod}");
    r.pod.name = pod.into();
    r
}

/// `r` with its pod's annotations `ann`.
pub fn annotated(mut r: Request, ann: &[(&str, &str)]) -> Request {
    r.pod.annotations = ann
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<BTreeMap<_, _>>();
    r
}

/// `r` with the GPUs at `idx` of `topo`, as a device plugin allocates them (PCI addresses).
pub fn with_gpus(mut r: Request, topo: &Topology, idx: &[usize]) -> Request {
    r.allocated_gpus = idx
        .iter()
        .map(|i| topo.gpus[*i].pci_bus_id.clone())
        .collect();
    r
}

/// `r` with these GPUs and NICs (PCI addresses) allocated by device plugins.
pub fn with_devices(mut r: Request, gpus: &[String], nics: &[String]) -> Request {
    r.allocated_gpus = gpus.to_vec();
    r.allocated_nics = nics.to_vec();
    r
}
