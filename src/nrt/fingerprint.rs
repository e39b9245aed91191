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
mod tests {
    use super::*;

    #[test]
    fn matches_the_go_implementation() {
        // Expected values computed with podfingerprint v0.2.2's Fingerprint.Add/Sign (Go) on
        // the same pods.
        assert_eq!(sign(&[]), "pfp0v001ef46db3751d8e999");
        let pods = [
            PodId::new("default", "web-0"),
            PodId::new("kube-system", "coredns-5d78c9869d-k2x4q"),
            PodId::new("ml", "train-a"),
        ];
        assert_eq!(sign(&pods), "pfp0v001c13d3426a7e802d2");
    }

    #[test]
    fn order_does_not_matter_and_every_pod_counts() {
        let a = [PodId::new("a", "x"), PodId::new("b", "y")];
        let b = [PodId::new("b", "y"), PodId::new("a", "x")];
        assert_eq!(sign(&a), sign(&b));
        assert_ne!(sign(&a), sign(&a[..1]));
        // The namespace seeds the name's hash: moving a pod to another namespace changes it.
        assert_ne!(sign(&[PodId::new("a", "x")]), sign(&[PodId::new("x", "a")]));
        assert_eq!(sign(&a).len(), 8 + 16);
    }
}
