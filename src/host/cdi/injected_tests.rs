use super::*;

/// An index of the specs `files` (name, text) written to `etc/cdi` of a fresh root.
fn index(files: &[(&str, &str)]) -> (tempfile::TempDir, CdiIndex) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cdi = dir.path().join("etc/cdi");
    std::fs::create_dir_all(&cdi).expect("mkdir");
    for (name, text) in files {
        std::fs::write(cdi.join(name), text).expect("write");
    }
    let s = super::super::scan(dir.path(), &["/etc/cdi".into()]);
    assert!(s.skipped.is_empty(), "{:?}", s.skipped);
    (dir, s.index)
}

fn node(path: &str, major: i64, minor: i64) -> DeviceNode {
    DeviceNode {
        path: path.into(),
        kind: "c".into(),
        major,
        minor,
        file_mode: None,
        uid: None,
        gid: None,
    }
}

fn names(found: &[Arc<CdiDevice>]) -> Vec<String> {
    found.iter().map(|d| d.name.clone()).collect()
}

/// As `nvidia-ctk cdi generate` writes a GPU node's spec: each GPU by index and by UUID, a MIG
/// device (the parent's node and its capability nodes), the control nodes spec-wide.
const NVIDIA: &str = r#"{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
  "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]},
  "devices": [
    {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
    {"name": "GPU-aaaa", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
    {"name": "1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}},
    {"name": "0:1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"},
      {"path": "/dev/nvidia-caps/nvidia-cap21"}]}}]}"#;

/// A generic vendor's accelerator with its numbers, and a device that only sets env.
const ACCEL: &str = r#"{"cdiVersion": "0.6.0", "kind": "example.com/accel", "devices": [
    {"name": "fn0", "containerEdits": {"env": ["ACCEL=fn0"], "deviceNodes": [
      {"path": "/dev/accel0", "hostPath": "/dev/null", "type": "c", "major": 1, "minor": 3}]}},
    {"name": "queue", "containerEdits": {"env": ["QUEUE=7", "QUEUE_MODE=shared"]}}]}"#;

#[test]
fn a_device_is_matched_when_all_its_nodes_were_injected() {
    let (_d, idx) = index(&[("nvidia.json", NVIDIA), ("accel.json", ACCEL)]);
    // GPU 0 with the control node: both names of GPU 0, not GPU 1, not the MIG device.
    let c = [
        node("/dev/nvidia0", 195, 0),
        node("/dev/nvidiactl", 195, 255),
    ];
    let mut got = names(&idx.match_injected(&c, &[]));
    got.sort();
    assert_eq!(got, ["nvidia.com/gpu=0", "nvidia.com/gpu=GPU-aaaa"]);
    // Without the spec-wide control node the spec was not what the runtime applied.
    assert!(idx
        .match_injected(&[node("/dev/nvidia0", 195, 0)], &[])
        .is_empty());
    // The accelerator at its numbers; at other numbers it is another device of that path.
    let c = [node("/dev/accel0", 1, 3)];
    assert_eq!(
        names(&idx.match_injected(&c, &[])),
        ["example.com/accel=fn0"]
    );
    assert!(idx
        .match_injected(&[node("/dev/accel0", 261, 0)], &[])
        .is_empty());
}

#[test]
fn a_mig_device_is_matched_without_its_parent_gpu() {
    let (_d, idx) = index(&[("nvidia.json", NVIDIA)]);
    let c = [
        node("/dev/nvidia0", 195, 0),
        node("/dev/nvidiactl", 195, 255),
        node("/dev/nvidia-caps/nvidia-cap21", 511, 21),
    ];
    // GPU 0's own devices are part of the MIG device's nodes: only the MIG device is kept, so
    // the parent is used shared, not held whole.
    assert_eq!(names(&idx.match_injected(&c, &[])), ["nvidia.com/gpu=0:1"]);
}

#[test]
fn a_device_without_nodes_is_matched_by_all_of_its_env() {
    let (_d, idx) = index(&[("accel.json", ACCEL)]);
    let env = |e: &[&str]| e.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let got = idx.match_injected(&[], &env(&["PATH=/bin", "QUEUE_MODE=shared", "QUEUE=7"]));
    assert_eq!(names(&got), ["example.com/accel=queue"]);
    // Part of its env, or the env of a device that has nodes, is not enough.
    assert!(idx.match_injected(&[], &env(&["QUEUE=7"])).is_empty());
    assert!(idx.match_injected(&[], &env(&["ACCEL=fn0"])).is_empty());
}

#[test]
fn a_container_with_nothing_injected_matches_nothing() {
    let (_d, idx) = index(&[("nvidia.json", NVIDIA), ("accel.json", ACCEL)]);
    let other = [node("/dev/fuse", 10, 229)];
    assert!(idx
        .match_injected(&other, &["HOME=/root".to_string()])
        .is_empty());
}

/// One vendor's two devices at the same container path and no numbers in the spec (each
/// container sees its own function as `/dev/accel0`): the runtime takes the numbers from the
/// host nodes, and so does the match-back, so each container matches its own device only.
#[test]
fn devices_at_one_container_path_are_told_apart_by_their_host_nodes() {
    const SHARED_PATH: &str = r#"{"cdiVersion": "0.6.0", "kind": "example.com/accel", "devices": [
        {"name": "a", "containerEdits": {"deviceNodes": [{"path": "/dev/accel0", "hostPath": "/dev/a"}]}},
        {"name": "b", "containerEdits": {"deviceNodes": [{"path": "/dev/accel0", "hostPath": "/dev/b"}]}}]}"#;
    let dir = tempfile::tempdir().expect("tempdir");
    // The host nodes: a null device (char 1:3) and a zero device (char 1:5).
    crate::host::testing::char_node(dir.path(), "dev/a", 1, 3);
    crate::host::testing::char_node(dir.path(), "dev/b", 1, 5);
    let cdi = dir.path().join("etc/cdi");
    std::fs::create_dir_all(&cdi).expect("mkdir");
    std::fs::write(cdi.join("accel.json"), SHARED_PATH).expect("write");
    let s = super::super::scan(dir.path(), &["/etc/cdi".into()]);
    assert!(s.skipped.is_empty(), "{:?}", s.skipped);
    let idx = s.index;
    assert_eq!(
        names(&idx.match_injected(&[node("/dev/accel0", 1, 3)], &[])),
        ["example.com/accel=a"]
    );
    assert_eq!(
        names(&idx.match_injected(&[node("/dev/accel0", 1, 5)], &[])),
        ["example.com/accel=b"]
    );
    // A node of neither host device at that path is neither.
    assert!(idx
        .match_injected(&[node("/dev/accel0", 1, 7)], &[])
        .is_empty());
}

#[test]
fn a_device_of_control_nodes_alone_matches_no_container() {
    // A GPU's host node put at the control node's container path, with the control node's
    // numbers: every GPU container has /dev/nvidiactl, so before it matched all of them and
    // they were answered with GPU 3's node.
    const HOSTILE: &str = r#"{"cdiVersion": "0.6.0", "kind": "example.com/evil", "devices": [
        {"name": "ctl", "containerEdits": {"deviceNodes": [
          {"path": "/dev/nvidiactl", "hostPath": "/dev/nvidia3", "type": "c",
           "major": 195, "minor": 255}]}},
        {"name": "uvm", "containerEdits": {"deviceNodes": [
          {"path": "/dev/nvidia-uvm", "type": "c", "major": 510, "minor": 0}]}}]}"#;
    let (_d, idx) = index(&[("nvidia.json", NVIDIA), ("evil.json", HOSTILE)]);
    let c = [
        node("/dev/nvidia0", 195, 0),
        node("/dev/nvidiactl", 195, 255),
        node("/dev/nvidia-uvm", 510, 0),
    ];
    let mut got = names(&idx.match_injected(&c, &[]));
    got.sort();
    assert_eq!(got, ["nvidia.com/gpu=0", "nvidia.com/gpu=GPU-aaaa"]);
}
