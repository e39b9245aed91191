//! NodeResourceTopology `topology.node.k8s.io/v1alpha2`, field for field as
//! k8stopologyawareschedwg/noderesourcetopology-api `pkg/apis/topology/v1alpha2/types.go`
//! declares it (JSON names, `omitempty` fields skipped when empty), and its REST coordinates
//! (cluster-scoped, plural `noderesourcetopologies`) so the client needs no discovery.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// API group of the resource.
pub const GROUP: &str = "topology.node.k8s.io";
/// API version served and stored by the upstream CRD.
pub const VERSION: &str = "v1alpha2";
/// `apiVersion` of the objects.
pub const API_VERSION: &str = "topology.node.k8s.io/v1alpha2";
/// Kind.
pub const KIND: &str = "NodeResourceTopology";
/// Plural (the REST resource name).
pub const PLURAL: &str = "noderesourcetopologies";
/// Zone type of a NUMA node (`helper.ZoneTypeNUMANode`).
pub const ZONE_TYPE_NODE: &str = "Node";

/// One node's resources and their topology.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeResourceTopology {
    /// `topology.node.k8s.io/v1alpha2`.
    pub api_version: String,
    /// `NodeResourceTopology`.
    pub kind: String,
    /// Standard object metadata; the name is the node's name.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Deprecated (to be removed in v1beta1) in favour of `attributes`; still read by
    /// scheduler-plugins when the attributes do not say otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_policies: Vec<String>,
    /// The zones (NUMA nodes). Required by the schema, even when empty.
    #[serde(default)]
    pub zones: Vec<Zone>,
    /// Node-wide attributes (topology manager policy, scope, pod fingerprint).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<AttributeInfo>,
}

/// A resource topology zone: socket, NUMA node, die or core.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Zone {
    /// `node-<id>` for NUMA nodes.
    pub name: String,
    /// `Node` for NUMA nodes.
    #[serde(rename = "type")]
    pub zone_type: String,
    /// Enclosing zone, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parent: String,
    /// Cost (distance) to every zone, this one included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub costs: Vec<CostInfo>,
    /// Per-zone attributes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<AttributeInfo>,
    /// Resources of the zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceInfo>,
}

/// One resource of a zone. The three amounts are Kubernetes quantities (strings such as `4`,
/// `512Mi`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceInfo {
    /// Resource name as in a pod's requests (`cpu`, `memory`, `hugepages-2Mi`, `nvidia.com/gpu`).
    pub name: String,
    /// Total amount the zone has (node status capacity).
    #[serde(deserialize_with = "super::quantity::de_int_or_string")]
    pub capacity: String,
    /// Amount usable by pods (node status allocatable): capacity minus what is reserved.
    #[serde(deserialize_with = "super::quantity::de_int_or_string")]
    pub allocatable: String,
    /// Allocatable minus what running containers hold: what a new pod could get.
    #[serde(deserialize_with = "super::quantity::de_int_or_string")]
    pub available: String,
}

/// Cost (distance) from the enclosing zone to the zone named here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostInfo {
    /// Target zone (`node-<id>`).
    pub name: String,
    /// The distance (the NUMA distance matrix entry; 10 is local).
    pub value: i64,
}

/// A name/value attribute.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttributeInfo {
    /// Name.
    pub name: String,
    /// Value.
    pub value: String,
}

impl AttributeInfo {
    /// An attribute.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: value.into(),
        }
    }
}

impl NodeResourceTopology {
    /// The value of the first attribute named `name` (the order scheduler-plugins reads them).
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.value.as_str())
    }

    /// The zone named `name`.
    pub fn zone(&self, name: &str) -> Option<&Zone> {
        self.zones.iter().find(|z| z.name == name)
    }

    /// Whether the parts nri-align owns (labels it sets, owner references, policies, zones,
    /// attributes) equal `desired`'s. Server-set metadata (resourceVersion, uid, timestamps,
    /// managedFields) and labels or annotations others added are not compared.
    pub fn content_matches(&self, desired: &NodeResourceTopology) -> bool {
        let labels_ok = desired.metadata.labels.iter().flatten().all(|(k, v)| {
            self.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(k))
                .is_some_and(|have| have == v)
        });
        let owners_ok = desired.metadata.owner_references.is_none()
            || self.metadata.owner_references == desired.metadata.owner_references;
        labels_ok
            && owners_ok
            && self.topology_policies == desired.topology_policies
            && self.zones == desired.zones
            && self.attributes == desired.attributes
    }
}

impl Zone {
    /// The resource named `name`.
    pub fn resource(&self, name: &str) -> Option<&ResourceInfo> {
        self.resources.iter().find(|r| r.name == name)
    }
}

impl kube::Resource for NodeResourceTopology {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        API_VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
#[path = "object_tests.rs"]
mod tests;
