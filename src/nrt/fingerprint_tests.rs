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
