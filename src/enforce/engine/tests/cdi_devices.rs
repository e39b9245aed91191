//! CDI devices through the real engine, from spec files scanned as the daemon scans them: the
//! runtime injects a CDI device as its spec says, so nri-align aligns to it and never adds,
//! removes or rewrites its device nodes or GPU env; and a spec device made of shared control
//! nodes is matched back to no container.

use super::kubernetes::{kctr, kpod, real, BUS};
use super::*;
use crate::enforce::inputs::resolve_cdi;
use crate::enforce::inputs::tests::node;

/// The index of the spec `text`, written under `etc/cdi` of a fresh root.
fn index(text: &str) -> (tempfile::TempDir, crate::host::cdi::CdiIndex) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cdi = dir.path().join("etc/cdi");
    std::fs::create_dir_all(&cdi).expect("mkdir");
    std::fs::write(cdi.join("spec.json"), text).expect("write");
    let s = crate::host::cdi::scan(dir.path(), &["/etc/cdi".into()]);
    assert!(s.skipped.is_empty(), "{:?}", s.skipped);
    (dir, s.index)
}

#[test]
fn a_cdi_gpu_is_aligned_to_without_a_node_or_env_of_nri_aligns() {
    // A vendor's spec that puts GPU 1's host node at a path of its own.
    let (_d, idx) = index(
        r#"{"cdiVersion": "0.6.0", "kind": "example.com/gpu", "devices": [
            {"name": "g1", "containerEdits": {"deviceNodes": [
              {"path": "/dev/gpu1", "hostPath": "/dev/nvidia1", "type": "c",
               "major": 195, "minor": 1}]}}]}"#,
    );
    let mut e = real(Config::default(), "");
    let p = kpod("ml", "cdi", &[]);
    let mut c = kctr(&p, "c1", "app", 2000, Some(2000));
    c.annotations = [(
        "cdi.k8s.io/vendor".to_string(),
        "example.com/gpu=g1".to_string(),
    )]
    .into();
    // What the runtime injected from the spec before NRI was asked.
    c.devices = vec![node("/dev/gpu1", 195, 1)];
    c.cdi_resolved = resolve_cdi(&idx, &c, &[]);
    let out = e
        .create_container(&p, &c)
        .expect("placed")
        .expect("not exempt");
    let adj = &out.adjustment;
    assert!(adj.add_devices.is_empty(), "{:?}", adj.add_devices);
    assert!(adj.remove_devices.is_empty(), "{:?}", adj.remove_devices);
    assert!(
        !adj.env.contains_key("NVIDIA_VISIBLE_DEVICES")
            && !adj.env.contains_key("CUDA_VISIBLE_DEVICES"),
        "{:?}",
        adj.env
    );
    // Aligned to it all the same: held, CPUs and memory on its node.
    assert_eq!(e.records().containers["c1"].assignment.gpus, vec![BUS[1]]);
    assert_eq!(adj.cpuset_mems.to_string(), "1");
}

#[test]
fn a_spec_of_control_nodes_never_takes_a_device_plugin_gpu_away() {
    // Matched back by the control node every GPU container has, before it answered a
    // container given GPU 0 "+/dev/nvidia1, -/dev/nvidia0".
    let (_d, idx) = index(
        r#"{"cdiVersion": "0.6.0", "kind": "example.com/evil", "devices": [
            {"name": "ctl", "containerEdits": {"deviceNodes": [
              {"path": "/dev/nvidiactl", "hostPath": "/dev/nvidia1", "type": "c",
               "major": 195, "minor": 255}]}}]}"#,
    );
    let mut e = real(Config::default(), "");
    let p = kpod("ml", "plugin", &[]);
    let mut c = kctr(&p, "c1", "app", 1000, Some(1000));
    c.devices = vec![
        node("/dev/nvidia0", 195, 0),
        node("/dev/nvidiactl", 195, 255),
    ];
    c.cdi_resolved = resolve_cdi(&idx, &c, &[]);
    assert!(c.cdi_resolved.is_empty(), "{:?}", c.cdi_resolved);
    let out = e
        .create_container(&p, &c)
        .expect("placed")
        .expect("not exempt");
    let adj = &out.adjustment;
    assert!(
        adj.add_devices.iter().all(|d| d.path != "/dev/nvidia1"),
        "{:?}",
        adj.add_devices
    );
    assert!(adj.remove_devices.is_empty(), "{:?}", adj.remove_devices);
    assert_eq!(e.records().containers["c1"].assignment.gpus, vec![BUS[0]]);
}
