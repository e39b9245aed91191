//! The device nodes the RDMA shared device plugin hands every container of an `rdma/*`
//! resource.
//!
//! Mellanox/k8s-rdma-shared-dev-plugin (`pkg/resources/server.go`, `rdma_device_spec.go`)
//! answers every `Allocate` with the same `DeviceSpec`s: for each selected HCA the character
//! devices Mellanox/rdmamap finds (`GetRdmaCharDevices`: `ucmN`, `issmN`, `umadN`, `uverbsN`
//! under `/dev/infiniband`, and the shared `/dev/infiniband/rdma_cm`), host path equal to
//! container path, permissions `rwm`. Its device ids are `0..rdmaHcaMax-1`: counters, not
//! HCAs (every container gets every HCA of the resource), so only the nodes tell which HCA a
//! container uses. In CDI mode it sets the annotation `cdi.k8s.io/nvidia.com_net-rdma` with
//! `nvidia.com/net-rdma=<PCI address>` per HCA instead.

/// Directory of the RDMA character devices.
pub const DEVICE_DIR: &str = "/dev/infiniband";
/// The connection-manager node every HCA's list ends with (shared, not per HCA).
pub const RDMA_CM: &str = "/dev/infiniband/rdma_cm";
/// Resource prefix of the plugin (`rdma/<resourceName>`).
pub const RESOURCE_PREFIX: &str = "rdma/";
/// CDI vendor and class of the plugin's CDI mode.
pub const CDI_KIND: &str = "nvidia.com/net-rdma";

/// One `/dev/infiniband` node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RdmaNode {
    /// `uverbsN`: the verbs device of one HCA (its sysfs entry names the HCA and its PCI device).
    Uverbs(u32),
    /// `umadN`: management datagrams of one HCA port.
    Umad(u32),
    /// `issmN`: subnet-manager access of one HCA port.
    Issm(u32),
    /// `ucmN`: the old userspace CM of one HCA.
    Ucm(u32),
    /// `rdma_cm`: the shared connection manager.
    RdmaCm,
}

impl RdmaNode {
    /// Whether the node belongs to one HCA (everything but `rdma_cm`).
    pub fn is_per_hca(self) -> bool {
        !matches!(self, RdmaNode::RdmaCm)
    }

    /// The node's sysfs class directory, which links to the HCA (`/sys/class/<class>/<name>`).
    pub fn sysfs_class(self) -> Option<&'static str> {
        match self {
            RdmaNode::Uverbs(_) => Some("infiniband_verbs"),
            RdmaNode::Umad(_) | RdmaNode::Issm(_) => Some("infiniband_mad"),
            RdmaNode::Ucm(_) => Some("infiniband_cm"),
            RdmaNode::RdmaCm => None,
        }
    }
}

/// Classifies a device path; `None` for anything outside `/dev/infiniband` or unknown there.
pub fn parse_device_node(path: &str) -> Option<RdmaNode> {
    let name = path.strip_prefix(DEVICE_DIR)?.strip_prefix('/')?;
    if name == "rdma_cm" {
        return Some(RdmaNode::RdmaCm);
    }
    let numbered = |prefix: &str| -> Option<u32> {
        let n = name.strip_prefix(prefix)?;
        if n.is_empty() || n.len() > 10 || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n.parse().ok()
    };
    None.or_else(|| numbered("uverbs").map(RdmaNode::Uverbs))
        .or_else(|| numbered("umad").map(RdmaNode::Umad))
        .or_else(|| numbered("issm").map(RdmaNode::Issm))
        .or_else(|| numbered("ucm").map(RdmaNode::Ucm))
}

/// Whether `resource` is one of the plugin's resource names (`rdma/...`).
pub fn is_rdma_resource(resource: &str) -> bool {
    resource
        .strip_prefix(RESOURCE_PREFIX)
        .is_some_and(|r| !r.is_empty())
}

#[cfg(test)]
#[path = "rdma_tests.rs"]
mod tests;
