//! The `topology` command on the sysfs fixture trees and on a capture of this host: the JSON
//! contract of `nri-align topology --json`, the readable report, and `--hwloc-xml`. The readers
//! themselves are align-core's tests (`crates/align-core/tests/topology/`).

use std::path::{Path, PathBuf};
use std::process::Command;

use nri_align::topology::read_host;
use serde_json::Value;
use test_support::lstopo;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

/// The `--json` contract, through the real binary.
#[test]
fn json_contract() {
    let out = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args(["topology", "--json", "--host-root"])
        .arg(fixture("memonly-bridge"))
        .output()
        .expect("run nri-align");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let cpus = v["cpus"].as_array().expect("cpus[]");
    assert_eq!(cpus.len(), 8);
    for c in cpus {
        for key in ["id", "package", "core", "numa_node"] {
            assert!(c[key].is_u64(), "cpus[].{key}: {c}");
        }
    }
    let nodes = v["numa_nodes"].as_array().expect("numa_nodes[]");
    assert_eq!(nodes.len(), 4);
    for n in nodes {
        assert!(n["id"].is_u64() && n["memory_bytes"].is_u64(), "{n}");
        assert!(n["cpus"]
            .as_array()
            .expect("cpus list")
            .iter()
            .all(Value::is_u64));
        assert_eq!(n["distances"].as_array().map(Vec::len), Some(4));
    }
    assert_eq!(nodes[1]["cpus"], serde_json::json!([4, 5, 6, 7]));
    assert_eq!(nodes[2]["cpus"], serde_json::json!([]));
    let gpu = &v["gpus"][0];
    assert_eq!(gpu["index"], 0);
    assert_eq!(gpu["pci_bus_id"], "0000:3b:00.0");
    assert_eq!(gpu["numa_node"], 1);
    assert_eq!(gpu["uuid"], "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
    assert_eq!(gpu["minor"], 3);
    let nics = v["nics"].as_array().expect("nics[]");
    assert!(nics
        .iter()
        .all(|n| n["name"].is_string() && n["pci_bus_id"].is_string()));
    assert!(nics.iter().all(|n| n["numa_node"].is_u64()));

    // Unknown NUMA nodes are null, not absent.
    let out = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args(["topology", "--json", "--host-root"])
        .arg(fixture("sparse-offline"))
        .output()
        .expect("run nri-align");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(v["nics"][0]["numa_node"].is_null());
    assert_eq!(v["gpus"], serde_json::json!([]));
}

#[test]
fn readable_report() {
    let out = Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args(["topology", "--host-root"])
        .arg(fixture("memonly-bridge"))
        .output()
        .expect("run nri-align");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf8");
    assert!(
        text.contains("node 2") && text.contains("memory-only"),
        "{text}"
    );
    // The header also starts with GPU0; the row is the second such line.
    let gpu_row = text
        .lines()
        .filter(|l| l.trim_start().starts_with("GPU0 "))
        .nth(1)
        .expect("GPU0 row");
    // GPU0 against NIC0 (eno1, other node) and NIC1 (same switch).
    let cells: Vec<&str> = gpu_row.split_whitespace().collect();
    assert_eq!(&cells[1..4], &["X", "SYS", "PIX"], "{gpu_row}");
    assert!(
        text.contains("0000:3b:00.0 <- 0000:3a:00.0 <- 0000:39:00.0 <- 0000:38:01.0 <- pci0000:38")
    );
}

/// `nri-align topology --hwloc-xml` on a fresh capture of this host shows the CPUs and NUMA
/// nodes the sysfs reader finds here.
#[test]
fn cli_imports_a_capture_of_this_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let xml = dir.path().join("host.xml");
    std::fs::write(&xml, lstopo::lstopo_xml(Path::new("/"))).expect("write capture");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nri-align"))
        .args(["topology", "--json", "--hwloc-xml"])
        .arg(&xml)
        .output()
        .expect("run nri-align");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let imported: nri_align::topology::Topology =
        serde_json::from_slice(&out.stdout).expect("JSON is the model");
    let read = read_host(Path::new("/")).expect("read this host");
    lstopo::compare(
        Path::new("/"),
        &lstopo::view_from_topology(&read),
        &lstopo::view_from_topology(&imported),
    );
    assert_eq!(imported.source, xml.display().to_string());
}
