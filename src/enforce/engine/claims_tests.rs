use super::*;
use crate::placement::Assignment;

fn rec(names: &[&str], gpus: &[&str], shared: &[&str]) -> Record {
    Record {
        assignment: Assignment {
            gpus: gpus.iter().map(|g| g.to_string()).collect(),
            shared_gpus: shared.iter().map(|g| g.to_string()).collect(),
            ..Assignment::default()
        },
        cdi_names: names.iter().map(|n| n.to_string()).collect(),
        ..Record::default()
    }
}

#[test]
fn a_device_is_the_same_claims_only_through_a_name_both_containers_have() {
    let claim = vec!["k8s.gpu.nvidia.com/claim=u1-gpu-1".to_string()];
    let bus = "0000:3b:00.0";
    assert!(uses_through(&rec(&[&claim[0]], &[bus], &[]), &claim, bus));
    assert!(uses_through(&rec(&[&claim[0]], &[], &[bus]), &claim, bus));
    // Another claim on the same GPU, or the same claim without that GPU: not shared.
    assert!(!uses_through(
        &rec(&["k8s.gpu.nvidia.com/claim=u2-gpu-1"], &[bus], &[]),
        &claim,
        bus
    ));
    assert!(!uses_through(
        &rec(&[&claim[0]], &["0000:1b:00.0"], &[]),
        &claim,
        bus
    ));
    // A device plugin's GPU (no CDI name recorded) is never shared this way.
    assert!(!uses_through(&rec(&[], &[bus], &[]), &claim, bus));
}
