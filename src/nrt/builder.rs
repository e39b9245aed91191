//! Builds the NodeResourceTopology object of one node from plain data: the topology model, the
//! free resources of each NUMA node, the pods on the node (for the fingerprint) and the
//! settings. Pure: no clock, no I/O, the same input gives the same object (zones by node id,
//! resources in a fixed order), so "nothing changed" is a plain comparison.
//!
//! The shape follows NFD's topology-updater and what scheduler-plugins' NodeResourceTopologyMatch
//! reads; docs/nrt.md explains each field with its upstream source.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::fingerprint::{self, PodId};
use super::object::{
    AttributeInfo, CostInfo, NodeResourceTopology, ResourceInfo, Zone, API_VERSION, KIND,
    ZONE_TYPE_NODE,
};
use super::quantity;
use crate::placement::{NodeFree, Policy, Scope};
use crate::topology::{CpuSet, NumaNode, Topology};

/// Attribute: the topology manager policy, with the kubelet's names (`none`, `best-effort`,
/// `restricted`, `single-numa-node`).
pub const ATTR_POLICY: &str = "topologyManagerPolicy";
/// Attribute: the scope (`container`, `pod`).
pub const ATTR_SCOPE: &str = "topologyManagerScope";
/// Attribute: how many NUMA nodes the node aligns over (scheduler-plugins normalises its
/// LeastNUMANodes score by it; default 8 when absent).
pub const ATTR_MAX_NUMA_NODES: &str = "topologyManagerMaxNUMANodes";
/// Label every published object carries.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY: &str = "nri-align";

/// Why an object could not be built. These are caller errors: the publisher logs them and
/// publishes nothing rather than something wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The node name cannot name a Kubernetes object.
    #[error("node name {0:?} is not a valid object name (lowercase DNS subdomain, at most 253 characters)")]
    NodeName(String),
    /// A configured resource name is not a valid extended resource name.
    #[error("resource name {0:?} is not a valid extended resource name (DOMAIN/NAME, e.g. nvidia.com/gpu)")]
    ResourceName(String),
    /// The free resources name a NUMA node the topology does not have.
    #[error("free resources given for NUMA node {0}, which the topology does not have")]
    UnknownNode(u32),
    /// A NUMA node of the topology has no free-resource entry.
    #[error("no free resources given for NUMA node {0}")]
    MissingNode(u32),
}

/// Free resources of one NUMA node, as the allocator sees them right now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZoneFree {
    /// NUMA node id.
    pub node: u32,
    /// CPUs that can still be given exclusively (neither reserved nor held exclusively).
    pub cpus: u64,
    /// Memory not accounted to any container, in bytes.
    pub memory_bytes: u64,
    /// Free GPUs (PCI bus ids, sysfs form).
    pub gpus: Vec<String>,
    /// NICs no container uses (interface names).
    pub nics: Vec<String>,
    /// Free huge pages by page size: (size in KiB, pages), the pages no container holds (so
    /// each admission asking pages lowers it), and no more than the kernel's `free_hugepages`
    /// where the publisher reads it (pages used outside nri-align's containers). Sizes
    /// missing here are published with the free count of the topology (read at discovery).
    pub hugepages_free: Vec<(u64, u64)>,
    /// CPUs of the node's topology that are offline now (hot-unplugged or offlined since the
    /// topology was read): left out of `cpu` capacity and allocatable.
    pub offline_cpus: CpuSet,
    /// The node's memory is offline now: `memory` capacity and allocatable are 0.
    pub memory_offline: bool,
}

impl From<&NodeFree> for ZoneFree {
    fn from(f: &NodeFree) -> Self {
        ZoneFree {
            node: f.node,
            cpus: f.cpus.len() as u64,
            memory_bytes: f.memory_bytes,
            gpus: f.gpus.clone(),
            nics: f.nics.clone(),
            hugepages_free: f.hugepages.iter().map(|(s, _, free)| (*s, *free)).collect(),
            offline_cpus: f.offline_cpus.clone(),
            memory_offline: f.memory_offline,
        }
    }
}

/// Device resource names, as the device plugins register them. `None` leaves the device out of
/// the object (the scheduler then treats it as a node-level resource).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceNames {
    /// GPUs: the NVIDIA device plugin's `nvidia.com/gpu` by default (renamed resources and
    /// time-slicing replicas change it; set it to what the plugin registers, or `None`).
    pub gpu: Option<String>,
    /// RDMA NICs, one unit per NIC with an RDMA device: e.g. the SR-IOV network device
    /// plugin's `intel.com/<resourceName>` (or `nvidia.com/...` under the Network Operator).
    /// No default: no plugin owns a standard name, and the shared RDMA plugin counts
    /// `rdmaHcaMax` slots per resource, not NICs.
    pub rdma_nic: Option<String>,
}

impl Default for ResourceNames {
    fn default() -> Self {
        ResourceNames {
            gpu: Some("nvidia.com/gpu".into()),
            rdma_nic: None,
        }
    }
}

/// What the object says besides the resources (and whether a foreign one is replaced).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NrtSettings {
    /// The Kubernetes node name (the object's name).
    pub node_name: String,
    /// Node default policy.
    pub policy: Policy,
    /// Node default scope.
    pub scope: Scope,
    /// CPUs never given to containers.
    pub reserved_cpus: CpuSet,
    /// Device resource names.
    pub resources: ResourceNames,
    /// Owner of the object (e.g. the Node), so it is garbage-collected with it.
    pub owner: Option<OwnerReference>,
    /// Not part of the object: replace an object of the node's name that does not carry
    /// nri-align's label (`nrt.take_over_foreign`) instead of leaving it alone.
    pub take_over_foreign: bool,
}

/// The object for `topo` with `free` resources and, when known, the `pods` on the node.
pub fn build(
    topo: &Topology,
    free: &[ZoneFree],
    pods: Option<&[PodId]>,
    settings: &NrtSettings,
) -> Result<NodeResourceTopology, BuildError> {
    if !is_dns_subdomain(&settings.node_name) {
        return Err(BuildError::NodeName(settings.node_name.clone()));
    }
    let names = &settings.resources;
    for name in [&names.gpu, &names.rdma_nic].into_iter().flatten() {
        if !is_extended_resource_name(name) {
            return Err(BuildError::ResourceName(name.clone()));
        }
    }
    let mut by_node: BTreeMap<u32, &ZoneFree> = BTreeMap::new();
    for f in free {
        if topo.node(f.node).is_none() {
            return Err(BuildError::UnknownNode(f.node));
        }
        by_node.insert(f.node, f);
    }
    let zones = topo
        .numa_nodes
        .iter()
        .map(|n| {
            let f = by_node.get(&n.id).ok_or(BuildError::MissingNode(n.id))?;
            Ok(zone(topo, n, f, settings))
        })
        .collect::<Result<Vec<_>, BuildError>>()?;

    let mut attributes = vec![
        AttributeInfo::new(ATTR_POLICY, settings.policy.to_string()),
        AttributeInfo::new(ATTR_SCOPE, settings.scope.to_string()),
    ];
    // scheduler-plugins accepts only values above 1 (it divides by it).
    if topo.numa_nodes.len() > 1 {
        attributes.push(AttributeInfo::new(
            ATTR_MAX_NUMA_NODES,
            topo.numa_nodes.len().to_string(),
        ));
    }
    if let Some(pods) = pods {
        attributes.push(AttributeInfo::new(
            fingerprint::ATTRIBUTE,
            fingerprint::sign(pods),
        ));
        attributes.push(AttributeInfo::new(
            fingerprint::ATTRIBUTE_METHOD,
            fingerprint::METHOD_ALL,
        ));
    }

    Ok(NodeResourceTopology {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        metadata: ObjectMeta {
            name: Some(settings.node_name.clone()),
            labels: Some([(LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string())].into()),
            owner_references: settings.owner.clone().map(|o| vec![o]),
            ..Default::default()
        },
        topology_policies: vec![legacy_policy(settings.policy, settings.scope).into()],
        zones,
        attributes,
    })
}

/// `node-<id>`, the canonical NUMA zone name (noderesourcetopology-api `numanode.IDToName`).
pub fn zone_name(id: u32) -> String {
    format!("node-{id}")
}

fn zone(topo: &Topology, n: &NumaNode, f: &ZoneFree, settings: &NrtSettings) -> Zone {
    let mut resources = Vec::new();

    // What the node has now: a CPU hot-unplugged or offlined since start is neither capacity
    // nor allocatable (NFD reads the kubelet's allocatable CPU ids, which are online CPUs), and
    // comes back with the CPU. A CPU that was not online at start is not placed on, so it is
    // not published either.
    let online = n.cpus.difference(&f.offline_cpus);
    let capacity = online.len() as u64;
    let allocatable = capacity - online.intersection_len(&settings.reserved_cpus) as u64;
    resources.push(counted("cpu", capacity, allocatable, f.cpus));
    let memory = if f.memory_offline { 0 } else { n.memory_bytes };
    resources.push(amount("memory", memory, memory, f.memory_bytes));

    let mut hugepages: Vec<_> = n.hugepages.iter().filter(|h| h.total > 0).collect();
    hugepages.sort_by_key(|h| h.size_kb);
    for h in hugepages {
        let page = h.size_kb.saturating_mul(1024);
        let free_pages = f
            .hugepages_free
            .iter()
            .find(|(size, _)| *size == h.size_kb)
            .map_or(h.free, |(_, pages)| *pages);
        let total = h.total.saturating_mul(page);
        resources.push(amount(
            &format!("hugepages-{}", quantity::bytes(page)),
            total,
            total,
            free_pages.saturating_mul(page),
        ));
    }

    if let Some(name) = &settings.resources.gpu {
        let here: Vec<&str> = topo
            .gpus
            .iter()
            .filter(|g| g.numa_node == Some(n.id))
            .map(|g| g.pci_bus_id.as_str())
            .collect();
        if !here.is_empty() {
            let free = f.gpus.iter().filter(|b| here.contains(&b.as_str())).count();
            let cap = here.len() as u64;
            resources.push(counted(name, cap, cap, free as u64));
        }
    }
    if let Some(name) = &settings.resources.rdma_nic {
        let here: Vec<&str> = topo
            .nics
            .iter()
            .filter(|x| x.rdma_device.is_some() && x.numa_node == Some(n.id))
            .map(|x| x.name.as_str())
            .collect();
        if !here.is_empty() {
            let free = f.nics.iter().filter(|x| here.contains(&x.as_str())).count();
            let cap = here.len() as u64;
            resources.push(counted(name, cap, cap, free as u64));
        }
    }

    Zone {
        name: zone_name(n.id),
        zone_type: ZONE_TYPE_NODE.into(),
        parent: String::new(),
        costs: topo
            .numa_nodes
            .iter()
            .map(|m| CostInfo {
                name: zone_name(m.id),
                value: i64::from(topo.distance(n.id, m.id)),
            })
            .collect(),
        attributes: Vec::new(),
        resources,
    }
}

/// A counted resource; `available` never exceeds `allocatable`.
fn counted(name: &str, capacity: u64, allocatable: u64, available: u64) -> ResourceInfo {
    ResourceInfo {
        name: name.into(),
        capacity: quantity::count(capacity),
        allocatable: quantity::count(allocatable),
        available: quantity::count(available.min(allocatable)),
    }
}

/// A resource in bytes; `available` never exceeds `allocatable`.
fn amount(name: &str, capacity: u64, allocatable: u64, available: u64) -> ResourceInfo {
    ResourceInfo {
        name: name.into(),
        capacity: quantity::bytes(capacity),
        allocatable: quantity::bytes(allocatable),
        available: quantity::bytes(available.min(allocatable)),
    }
}

/// The deprecated `topologyPolicies` value NFD derives from policy and scope
/// (`topologypolicy.DetectTopologyPolicy`).
pub fn legacy_policy(policy: Policy, scope: Scope) -> &'static str {
    match (policy, scope) {
        (Policy::None, _) => "None",
        (Policy::BestEffort, Scope::Container) => "BestEffortContainerLevel",
        (Policy::BestEffort, Scope::Pod) => "BestEffortPodLevel",
        (Policy::Restricted, Scope::Container) => "RestrictedContainerLevel",
        (Policy::Restricted, Scope::Pod) => "RestrictedPodLevel",
        (Policy::SingleNumaNode, Scope::Container) => "SingleNUMANodeContainerLevel",
        (Policy::SingleNumaNode, Scope::Pod) => "SingleNUMANodePodLevel",
    }
}

/// RFC 1123 subdomain, as Kubernetes object names must be.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// `DOMAIN/NAME` with a DNS-subdomain domain and a qualified-name part (at most 63 characters,
/// alphanumeric at both ends, `-`, `_`, `.` inside), as extended resource names are.
pub fn is_extended_resource_name(s: &str) -> bool {
    let Some((domain, name)) = s.split_once('/') else {
        return false;
    };
    is_dns_subdomain(domain)
        && !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
#[path = "builder_tests.rs"]
mod tests;
