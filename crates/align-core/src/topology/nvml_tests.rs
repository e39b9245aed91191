use super::*;

#[test]
fn bus_ids_normalise_to_sysfs_form() {
    assert_eq!(
        sysfs_bus_id("00000000:1B:00.0").as_deref(),
        Some("0000:1b:00.0")
    );
    assert_eq!(
        sysfs_bus_id("0000:c3:00.1").as_deref(),
        Some("0000:c3:00.1")
    );
    assert_eq!(sysfs_bus_id("1B:00.0").as_deref(), Some("0000:1b:00.0"));
    assert_eq!(sysfs_bus_id("nonsense"), None);
}

#[test]
fn mig_profiles_come_from_nvml_names() {
    assert_eq!(
        mig_profile("NVIDIA A100-SXM4-40GB MIG 1g.5gb").as_deref(),
        Some("1g.5gb")
    );
    assert_eq!(
        mig_profile("NVIDIA H100 80GB HBM3 MIG 3g.40gb").as_deref(),
        Some("3g.40gb")
    );
    assert_eq!(mig_profile("NVIDIA H100 80GB HBM3"), None);
    assert_eq!(mig_profile("X MIG "), None);
}

#[test]
fn absent_system_nvml_is_a_status() {
    // This machine has no NVIDIA driver; a topology without GPUs stays as it was.
    if Path::new("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").exists() {
        return;
    }
    let mut topo = Topology::default();
    let status = enrich(&mut topo, None);
    assert!(
        matches!(status, Ok(NvmlStatus::Absent { .. })),
        "{status:?}"
    );
    assert_eq!(topo, Topology::default());
}

#[test]
fn missing_explicit_library_is_an_error() {
    let mut topo = Topology::default();
    let err = enrich(&mut topo, Some(Path::new("/nonexistent/libnvidia-ml.so.1")));
    assert!(matches!(err, Err(NvmlError::Load { .. })), "{err:?}");
}
