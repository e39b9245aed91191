use super::*;

#[test]
fn resource_patterns() {
    assert!(resource_matches("nvidia.com/gpu", "nvidia.com/gpu"));
    assert!(!resource_matches("nvidia.com/gpu", "nvidia.com/gpu.shared"));
    assert!(resource_matches(
        "nvidia.com/mig-*",
        "nvidia.com/mig-1g.10gb"
    ));
    assert!(resource_matches("rdma/*", "rdma/hca_shared_devices_a"));
    assert!(!resource_matches("rdma/*", "nvidia.com/gpu"));
    let any = |n: &str| DEFAULT_RESOURCES.iter().any(|p| resource_matches(p, n));
    assert!(any("nvidia.com/gpu.shared"));
    assert!(any("nvidia.com/mig-3g.40gb"));
    assert!(!any("cpu"));
    assert!(!any("example.com/foo"));
}
