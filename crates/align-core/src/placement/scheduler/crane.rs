//! Crane's placement annotations: the zones its scheduler picked
//! (`topology.crane.io/topology-result`) and the pod's own settings beside them.
//!
//! Keys and values from gocrane/api `topology/v1alpha1/well_known_annotations.go`; the zone
//! list models `Zone`/`ZoneList`/`ZoneType` of `topology/v1alpha1/types.go` field for field
//! (fields read: `name`, `type`; the others are checked for type only by being ignored, as
//! Go's decoder does). Crane's scheduler picks zones of type `Node` named `node<N>` (its agent
//! reads the NUMA id from the name); the node picks the CPUs in them.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{invalid, json, node_id, value, CranePolicy, Scheduler, SchedulerChoice, MAX_ENTRIES};
use crate::placement::error::PlacementError;

/// `AnnotationPodTopologyResultKey`.
pub const TOPOLOGY_RESULT: &str = "topology.crane.io/topology-result";
/// `AnnotationPodTopologyAwarenessKey`.
pub const TOPOLOGY_AWARENESS: &str = "topology.crane.io/topology-awareness";
/// `AnnotationPodCPUPolicyKey`.
pub const CPU_POLICY: &str = "topology.crane.io/cpu-policy";
/// `AnnotationPodExcludeReservedCPUs`.
pub const EXCLUDE_RESERVED: &str = "topology.crane.io/exclude-reserved-cpus";

/// `Zone` of `types.go` (the fields placement reads).
#[derive(Debug, Deserialize)]
struct Zone {
    /// `Name string json:"name"`.
    name: String,
    /// `Type ZoneType json:"type"`: `Node`, `Socket` or `Core`.
    #[serde(rename = "type")]
    kind: String,
}

/// The policy's annotation value.
pub(super) fn policy_name(p: CranePolicy) -> &'static str {
    match p {
        CranePolicy::None => "none",
        CranePolicy::Exclusive => "exclusive",
        CranePolicy::Numa => "numa",
        CranePolicy::Immovable => "immovable",
    }
}

/// `"true"` or `"false"` of annotation `key`; crane compares with `"true"` and treats anything
/// else as false, which would hide a typo: anything else is refused.
fn boolean(key: &str, v: &str) -> Result<bool, PlacementError> {
    match v.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(key, v, "expected true or false")),
    }
}

/// Crane's choice from `annotations`: `None` when none of its keys is there, or when the pod
/// turned topology awareness off and set no CPU policy.
pub(super) fn read(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<SchedulerChoice>, PlacementError> {
    let aware = value(annotations, TOPOLOGY_AWARENESS)?
        .map(|v| boolean(TOPOLOGY_AWARENESS, v))
        .transpose()?;
    // Validated for its typos; nri-align never gives reserved CPUs to a pod's containers, so
    // `true` is what every container gets already.
    value(annotations, EXCLUDE_RESERVED)?
        .map(|v| boolean(EXCLUDE_RESERVED, v))
        .transpose()?;
    let policy = value(annotations, CPU_POLICY)?
        .map(|v| match v.trim() {
            "none" => Ok(CranePolicy::None),
            "exclusive" => Ok(CranePolicy::Exclusive),
            "numa" => Ok(CranePolicy::Numa),
            "immovable" => Ok(CranePolicy::Immovable),
            _ => Err(invalid(
                CPU_POLICY,
                v,
                "expected one of: none exclusive numa immovable",
            )),
        })
        .transpose()?;
    let result = value(annotations, TOPOLOGY_RESULT)?;
    if result.is_none() && policy.is_none() {
        return Ok(None);
    }
    let mut choice = SchedulerChoice::new(Scheduler::Crane);
    choice.cpu_policy = policy;
    // A pod that turned awareness off asked the scheduler not to pick zones: a result left on
    // it (a copied manifest) binds nothing.
    if let (Some(v), false) = (result, aware == Some(false)) {
        read_zones(v, &mut choice)?;
    }
    Ok(Some(choice))
}

fn read_zones(v: &str, choice: &mut SchedulerChoice) -> Result<(), PlacementError> {
    let key = TOPOLOGY_RESULT;
    let zones: Vec<Zone> = json(key, v)?;
    if zones.len() > MAX_ENTRIES {
        return Err(invalid(
            key,
            v,
            format!("{} zones; at most {MAX_ENTRIES}", zones.len()),
        ));
    }
    for z in &zones {
        match z.kind.as_str() {
            "Node" => {}
            // Sockets and cores carry no NUMA choice of their own.
            "Socket" | "Core" => continue,
            other => {
                return Err(invalid(
                    key,
                    v,
                    format!(
                        "zone type {:?} is not one of Node Socket Core",
                        crate::untrusted::excerpt(other)
                    ),
                ))
            }
        }
        let n = z
            .name
            .strip_prefix("node")
            .filter(|d| !d.is_empty() && d.len() <= 4 && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse::<i64>().ok())
            .ok_or_else(|| {
                invalid(
                    key,
                    v,
                    format!(
                        "zone {:?} of type Node is not named node<N>",
                        crate::untrusted::excerpt(&z.name)
                    ),
                )
            })?;
        let id = node_id(key, v, n)?;
        if !choice.nodes.insert(id) {
            return Err(invalid(key, v, format!("zone node{id} is listed twice")));
        }
    }
    Ok(())
}
