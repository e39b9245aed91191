//! From what NRI shows of a container (resources, device nodes, mounts, env, CDI devices) and
//! what the kubelet reports for it to the placement [`Request`]: CPU request and limit in
//! millicores, memory limit, and the GPUs and RDMA NICs it was allocated (`devices.rs`), with
//! those devices as one typed value ([`DeviceClaims`], `claims.rs`) that the rest of the create
//! path reads instead of the container's env, device nodes and CDI names.

use crate::placement::{HugePageNeed, PodInfo, PodTotals, Request};
use crate::topology::Topology;

use crate::enforce::container::{ContainerView, PodView, ResourcesView};

mod cdi;
mod claims;
mod decision;
mod devices;
mod found;
mod privileged;
pub use cdi::{matched_back, resolve_cdi};
pub use claims::{DeviceClaims, GenericClaim, GpuClaim, NicClaim, SpecDevices};
pub use decision::placed_exclusive_on;
pub use found::{GpuSource, Unread};

/// A container whose resources or devices cannot be understood. Only authoritative sources
/// (the kubelet, CDI, device nodes, volume-mounts mounts) produce one: what only the
/// environment says is never a reason to refuse a container.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A GPU reference (index, UUID, minor) matches no GPU of this host.
    #[error("container {container}: {origin} names GPU {given}, which this host does not have")]
    UnknownGpu {
        /// Container name.
        container: String,
        /// Where the reference came from (`NVIDIA_VISIBLE_DEVICES`, `device /dev/nvidia3`...).
        origin: String,
        /// The reference, quoted (cut to its start when long).
        given: String,
    },
}

/// Inverse of the kubelet's `shares = milli * 1024 / 1000` (at least 2). Rounding up makes the
/// round trip exact; 2 shares (the floor) means no request.
pub fn shares_to_milli(shares: u64) -> u64 {
    if shares <= 2 {
        return 0;
    }
    // Saturating: the runtime passes whatever the pod spec said; input never panics the daemon.
    shares.saturating_mul(1000).div_ceil(1024)
}

/// CFS quota and period to a limit in millicores; `None` when unlimited.
pub fn quota_to_milli(quota: Option<i64>, period: Option<u64>) -> Option<u64> {
    let quota = u64::try_from(quota?).ok().filter(|q| *q > 0)?;
    // The kernel's default period applies when the spec has none.
    let period = period.filter(|p| *p > 0).unwrap_or(100_000);
    Some(quota.saturating_mul(1000).div_ceil(period))
}

/// What a pod asks for in all, from its pod-level resources (the kubelet's sum over its
/// containers): exclusive CPUs by the Guaranteed rule applied to the sum, the memory limit.
/// GPUs and NICs are not in pod resources; the containers carry them.
pub fn pod_totals(r: &ResourcesView) -> PodTotals {
    let request = r.cpu_shares.map(shares_to_milli).unwrap_or(0);
    let limit = quota_to_milli(r.cpu_quota, r.cpu_period);
    let exclusive = limit == Some(request) && request > 0 && request % 1000 == 0;
    let memory = r
        .memory_limit
        .and_then(|m| u64::try_from(m).ok())
        .unwrap_or(0);
    PodTotals {
        exclusive_cpus: if exclusive {
            u32::try_from(request / 1000).unwrap_or(u32::MAX)
        } else {
            0
        },
        memory_bytes: if exclusive { memory } else { 0 },
        gpus: 0,
        nics: 0,
    }
}

/// A request with what was learnt on the way.
#[derive(Debug, Clone)]
pub struct Built {
    /// The placement request.
    pub request: Request,
    /// Its devices, each with where it came from, and what the spec and env say of them.
    pub devices: DeviceClaims,
    /// Device references that could not be used (logged and counted by the engine).
    pub unread: Vec<Unread>,
    /// The GPUs (indices in the topology) the kubelet lists as allocatable, when it was asked
    /// and answered: the only ones a remap may choose.
    pub allocatable_gpus: Option<std::collections::BTreeSet<usize>>,
    /// Claim devices other than GPUs (NIC names, generic devices' PCI bus ids) the container
    /// uses through a CDI name a running sibling of its pod holds them by: set by the engine
    /// before placement, kept in the record (`Record::shared_devices`).
    pub shared_claim_devices: Vec<String>,
}

/// Builds the placement request for container `c` of pod `pod` (the environment untrusted).
pub fn build_request(
    topo: &Topology,
    pod: &PodView,
    c: &ContainerView,
) -> Result<Request, RequestError> {
    build(topo, pod, c, false).map(|b| b.request)
}

/// [`build_request`] with the source of its GPUs and what could not be read; `trust_env` as
/// in `devices::find`.
pub fn build(
    topo: &Topology,
    pod: &PodView,
    c: &ContainerView,
    trust_env: bool,
) -> Result<Built, RequestError> {
    let r = &c.resources;
    let found = devices::find(topo, c, trust_env)?;
    let claims = DeviceClaims::of(c, &found);
    Ok(Built {
        request: Request {
            container_id: c.id.clone(),
            container_name: c.name.clone(),
            pod: PodInfo {
                uid: pod.uid.clone(),
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                annotations: pod.annotations.clone(),
            },
            cpu_request_milli: r.cpu_shares.map(shares_to_milli).unwrap_or(0),
            cpu_limit_milli: quota_to_milli(r.cpu_quota, r.cpu_period),
            memory_limit_bytes: r
                .memory_limit
                .and_then(|m| u64::try_from(m).ok())
                .filter(|m| *m > 0),
            allocated_gpus: found.gpus,
            allocated_nics: found.nics,
            shared_gpus: found.shared_gpus,
            generic_devices: found.generic,
            hugepages: hugepage_needs(&r.hugepage_limits),
            // The engine reads the scheduler's choice on the create path alone
            // (`Engine::create_container`): a running container's is history.
            scheduler: None,
        },
        devices: claims,
        unread: found.unread,
        allocatable_gpus: c
            .kubelet_allocatable
            .as_deref()
            .map(|a| devices::allocatable_gpus(topo, a)),
        shared_claim_devices: Vec::new(),
    })
}

/// The huge pages the container's hugetlb limits ask for, per size. A page size that does
/// not read (runc writes `<n>KB`, `<n>MB`, `<n>GB` in powers of 1024, kubelet's
/// `HugePageUnitSizeFromByteSize`) is left out: the runtime itself refuses a limit it cannot
/// map to a hugetlb controller file.
pub fn hugepage_needs(limits: &[(String, u64)]) -> Vec<HugePageNeed> {
    limits
        .iter()
        .filter_map(|(size, limit)| HugePageNeed::of_limit(page_size_kb(size)?, *limit))
        .collect()
}

/// `2MB` -> 2048, `1GB` -> 1048576, `64KB` -> 64 (KiB).
fn page_size_kb(s: &str) -> Option<u64> {
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let shift = match unit {
        "KB" => 0,
        "MB" => 10,
        "GB" => 20,
        "TB" => 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
pub(crate) mod tests;
