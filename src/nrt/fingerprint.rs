//! The pod-set fingerprint, version `v001` of k8stopologyawareschedwg/podfingerprint
//! (`podfingerprint.go`), which scheduler-plugins' NodeResourceTopology cache compares with the
//! pods it sees on a node before it trusts a new object for a node it marked dirty
//! (`cache/store.go` `checkPodFingerprintForNode`). Without it such a node is never resynced.
//!
//! The algorithm: each pod hashes to `xxh64(name, seed = xxh64(namespace, seed 0))`; the
//! hashes are sorted, written as little-endian u64s and hashed once more with seed 0; the
//! fingerprint is `pfp0` + `v001` + the 16 hex digits of that hash (big-endian).

use twox_hash::XxHash64;

/// Attribute carrying the fingerprint (`podfingerprint.Attribute`).
pub const ATTRIBUTE: &str = "nodeTopologyPodsFingerprint";
/// Attribute saying which pods were counted (`podfingerprint.AttributeMethod`).
pub const ATTRIBUTE_METHOD: &str = "nodeTopologyPodsFingerprintMethod";
/// Every pod on the node (`podfingerprint.MethodAll`).
pub const METHOD_ALL: &str = "all";
const PREFIX: &str = "pfp0";
const VERSION: &str = "v001";

/// A pod, identified as the fingerprint identifies it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodId {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl PodId {
    /// A pod id.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        PodId {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// The fingerprint of a set of pods (order does not matter).
pub fn sign(pods: &[PodId]) -> String {
    let mut hashes: Vec<u64> = pods
        .iter()
        .map(|p| {
            let seed = XxHash64::oneshot(0, p.namespace.as_bytes());
            XxHash64::oneshot(seed, p.name.as_bytes())
        })
        .collect();
    hashes.sort_unstable();
    let bytes: Vec<u8> = hashes.iter().flat_map(|h| h.to_le_bytes()).collect();
    let sum = XxHash64::oneshot(0, &bytes);
    format!("{PREFIX}{VERSION}{sum:016x}")
}

#[cfg(test)]
#[path = "fingerprint_tests.rs"]
mod tests;
