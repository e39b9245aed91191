//! The `nrt:` section of the configuration: whether and how nri-align publishes the node's
//! NodeResourceTopology object (docs/nrt.md).
//!
//! ```yaml
//! nrt:
//!   publish: true                  # when API access is there (--kubeconfig or in a pod)
//!   node_name: null                # default: --node-name, else NODE_NAME, else the hostname
//!   gpu_resource: nvidia.com/gpu   # the GPU device plugin's resource name; null: GPUs left out
//!   rdma_nic_resource: null        # e.g. intel.com/sriov_rdma; null: NICs left out
//!   resync_seconds: 60             # how often the server's copy is checked and repaired
//!   take_over_foreign: false       # replace an object of the node's name nri-align did not make
//! ```

use serde::{Deserialize, Deserializer};

use crate::nrt::builder::{
    is_dns_subdomain, is_extended_resource_name, NrtSettings, ResourceNames,
};

/// Default of `resync_seconds`.
pub const DEFAULT_RESYNC_SECONDS: u64 = 60;
/// Longest `resync_seconds` accepted (a day): longer would leave hand edits for too long.
pub const MAX_RESYNC_SECONDS: u64 = 86_400;

/// The effective `nrt:` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NrtConfig {
    /// Publish when nri-align has API access; `false` never publishes.
    pub publish: bool,
    /// The Kubernetes node name to publish under; `None`: `--node-name`, `NODE_NAME`, hostname.
    pub node_name: Option<String>,
    /// Device resource names; `None` leaves that device out of the object.
    pub resources: ResourceNames,
    /// Seconds between re-reads of the server's object (repairs hand edits and deletions).
    pub resync_seconds: u64,
    /// Replace an object of the node's name that lacks nri-align's label (another producer's,
    /// or left behind) instead of leaving it alone and saying so (`src/nrt/ownership.rs`).
    pub take_over_foreign: bool,
}

impl Default for NrtConfig {
    fn default() -> Self {
        NrtConfig {
            publish: true,
            node_name: None,
            resources: ResourceNames::default(),
            resync_seconds: DEFAULT_RESYNC_SECONDS,
            take_over_foreign: false,
        }
    }
}

impl super::Config {
    /// What the object published for node `node_name` says besides the resources: the node
    /// default policy and scope, the reserved CPUs, the resource names; and whether a foreign
    /// object is taken over.
    pub fn nrt_settings(&self, node_name: &str) -> NrtSettings {
        NrtSettings {
            node_name: node_name.to_string(),
            policy: self.placement.policy,
            scope: self.placement.scope,
            reserved_cpus: self.placement.reserved_cpus.clone(),
            resources: self.nrt.resources.clone(),
            owner: None,
            take_over_foreign: self.nrt.take_over_foreign,
        }
    }
}

/// The section as written. A resource name key that is absent keeps its default; one that is
/// `null` turns that device off, hence the double options.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawNrt {
    publish: Option<bool>,
    node_name: Option<String>,
    #[serde(deserialize_with = "present")]
    gpu_resource: Option<Option<String>>,
    #[serde(deserialize_with = "present")]
    rdma_nic_resource: Option<Option<String>>,
    resync_seconds: Option<u64>,
    take_over_foreign: Option<bool>,
}

/// A key that is there, even as `null`, is `Some`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

impl RawNrt {
    /// Checks and fills in defaults; the error says which key is wrong and what would do.
    pub(super) fn resolve(self) -> Result<NrtConfig, String> {
        let defaults = NrtConfig::default();
        let node_name = match self.node_name.map(|n| n.trim().to_string()) {
            Some(n) if n.is_empty() => None,
            Some(n) if !is_dns_subdomain(&n) => {
                return Err(format!(
                    "nrt.node_name {} is not a Kubernetes node name (lowercase letters, \
                     digits, '-' and '.', at most 253 characters)",
                    crate::untrusted::quoted(&n)
                ))
            }
            other => other,
        };
        let resource =
            |key: &str, given: Option<Option<String>>, default: Option<String>| match given {
                None => Ok(default),
                Some(None) => Ok(None),
                Some(Some(name)) if is_extended_resource_name(name.trim()) => {
                    Ok(Some(name.trim().to_string()))
                }
                Some(Some(name)) => Err(format!(
                    "nrt.{key} {} is not an extended resource name: give it as the device \
                     plugin registers it, DOMAIN/NAME (e.g. nvidia.com/gpu), or null to leave \
                     the devices out",
                    crate::untrusted::quoted(&name)
                )),
            };
        let resources = ResourceNames {
            gpu: resource("gpu_resource", self.gpu_resource, defaults.resources.gpu)?,
            rdma_nic: resource(
                "rdma_nic_resource",
                self.rdma_nic_resource,
                defaults.resources.rdma_nic,
            )?,
        };
        let resync_seconds = self.resync_seconds.unwrap_or(defaults.resync_seconds);
        if !(1..=MAX_RESYNC_SECONDS).contains(&resync_seconds) {
            return Err(format!(
                "nrt.resync_seconds {resync_seconds} is out of range 1..={MAX_RESYNC_SECONDS}"
            ));
        }
        Ok(NrtConfig {
            publish: self.publish.unwrap_or(defaults.publish),
            node_name,
            resources,
            resync_seconds,
            take_over_foreign: self.take_over_foreign.unwrap_or(defaults.take_over_foreign),
        })
    }
}

#[cfg(test)]
#[path = "nrt_tests.rs"]
mod tests;
