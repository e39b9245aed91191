//! A CDI device of a generic vendor (`example.com/accel`) naming a device node of one of the
//! guest's emulated PCI functions, resolved by nri-align through the guest's real sysfs.
//!
//! The function: an e1000e NIC stand-in (one per NUMA node, behind that node's PCIe switch).
//! Its driver registers a PTP hardware clock, `/dev/ptpN`, whose `/sys/dev/char/MAJ:MIN/device`
//! link is the PCI function itself, as a DRM card's or an `/dev/accel/accelN` node's is. The
//! guest's RDMA NICs have no RDMA device here and the GPU stand-ins are the NVIDIA GPUs of the
//! topology, so a node of the NIC function is what nri-align must treat as a generic device:
//! `/sys/dev/char/MAJ:MIN/device` -> the function -> its NUMA node.
//!
//! The container asks for the device the way device plugins and containerd before 2.3 do, by
//! a `cdi.k8s.io/` annotation; the runtime (CDI enabled, `runtime_options`) injects it, and
//! nri-align reads the name from the same annotation.

use std::path::{Path, PathBuf};
use std::time::Duration;

use test_support::e2e::{ContainerSpec, UpOptions};

use crate::guest::{guest, Guest};
use crate::kubepods::Qos;

/// nri-align's `cdi_spec_dirs` in the guest (`guest::PLUGIN_CONFIG`, made by hack/vm/guest-run).
pub const CDI_DIR: &str = "/run/nri-align/cdi";
/// The spec file, in nri-align's dir and in the runtime's.
const SPEC_FILE: &str = "example.com-accel.json";

/// The guest's runtime resolves CDI devices from its instance's `cdi/` dir (containerd's
/// `enable_cdi`; CRI-O always does). No other test names a CDI device, so this changes
/// nothing for them. containerd also writes the containers' hugepage limits (no other test
/// asks for any).
pub fn runtime_options() -> UpOptions {
    UpOptions {
        cdi: true,
        // The huge pages test (t12) needs the containers' hugepage limits passed to NRI.
        hugetlb: true,
        ..UpOptions::default()
    }
}

/// A PCI function with a character device the kernel links to it, as the guest's sysfs shows
/// it (read here, never from nri-align).
#[derive(Debug)]
struct Function {
    /// `0000:24:00.0`.
    bus: String,
    /// Its `numa_node`.
    node: u32,
    /// The device node, `/dev/ptpN`.
    dev: String,
    /// `MAJ:MIN` of that node.
    numbers: String,
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The PCI functions behind the guest's PTP clocks, by `/sys/class/ptp`; each cross-checked
/// with the link nri-align follows, `/sys/dev/char/MAJ:MIN/device`.
fn ptp_functions() -> Vec<Function> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/sys/class/ptp") else {
        return out;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(numbers) = read(&e.path().join("dev")) else {
            continue;
        };
        let Ok(function) = std::fs::canonicalize(e.path().join("device")) else {
            continue;
        };
        let by_numbers = std::fs::canonicalize(format!("/sys/dev/char/{numbers}/device"));
        assert_eq!(
            by_numbers.as_ref().ok(),
            Some(&function),
            "/sys/dev/char/{numbers}/device does not lead to {name}'s function"
        );
        let bus = function
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let node = read(&function.join("numa_node")).and_then(|n| n.parse().ok());
        let (Some(node), true) = (node, function.join("vendor").exists()) else {
            continue;
        };
        out.push(Function {
            bus,
            node,
            dev: format!("/dev/{name}"),
            numbers,
        });
    }
    out.sort_by_key(|f| f.node);
    out
}

/// Removes the spec files on drop, so the later tests find the guest without them.
struct Specs(Vec<PathBuf>);

impl Drop for Specs {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The generic vendor's spec: one device per function, `fn-node<N>`, whose only device node
/// is the function's clock, seen in the container as `/dev/accel0`. No type or numbers: the
/// runtime and nri-align both take them from the node on the host.
fn spec(functions: &[&Function]) -> String {
    let devices: Vec<serde_json::Value> = functions
        .iter()
        .map(|f| {
            serde_json::json!({
                "name": format!("fn-node{}", f.node),
                "containerEdits": {
                    "env": [format!("ACCEL=fn-node{}", f.node)],
                    "deviceNodes": [{"path": "/dev/accel0", "hostPath": f.dev}],
                },
            })
        })
        .collect();
    serde_json::json!({
        "cdiVersion": "0.6.0",
        "kind": "example.com/accel",
        "devices": devices,
    })
    .to_string()
}

/// Writes the spec where nri-align reads it and where the runtime does (two copies of one
/// text: the runtime's CDI dir is its instance's, fixed by hack/containerd-up and
/// hack/crio-up; on a real node both read one directory).
fn write_specs(g: &Guest, text: &str) -> Specs {
    let mut written = Vec::new();
    for dir in [PathBuf::from(CDI_DIR), g.ctrd.dir().join("cdi")] {
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let path = dir.join(SPEC_FILE);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        written.push(path);
    }
    Specs(written)
}

#[test]
fn t9_a_cdi_device_naming_an_emulated_pci_function_aligns_cpus_and_memory_to_its_node() {
    let Some(g) = guest("t9") else { return };
    let f = &g.facts;
    let all = ptp_functions();
    // Two functions on two different nodes, neither node 0 (where a container with no device
    // could land anyway): the lowest and the highest such node.
    let off_zero: Vec<&Function> = all
        .iter()
        .filter(|x| x.node != 0 && f.node_cpus.contains_key(&x.node))
        .collect();
    let (Some(first), Some(last)) = (off_zero.first(), off_zero.last()) else {
        panic!("no PTP clock of a PCI function on a non-zero node with CPUs: {all:?}");
    };
    assert_ne!(first.node, last.node, "functions on one node only: {all:?}");
    let chosen = [*last, *first];
    let _specs = write_specs(g, &spec(&chosen));
    // nri-align's watcher takes a spec within a second on an idle host; TCG is far slower.
    std::thread::sleep(Duration::from_secs(5));

    for func in chosen {
        let node = func.node;
        let device = format!("example.com/accel=fn-node{node}");
        let name = format!("accel-node{node}");
        let pod = g.pod(&name, Qos::Guaranteed, &[("policy", "single-numa-node")]);
        let spec = ContainerSpec::new("app")
            .cpu_millis(1000, Some(1000))
            .memory(64 << 20)
            .annotation("cdi.k8s.io/vm-accel", &device);
        let id = g.run(&pod, &spec);
        let s = g.seen(&id);
        eprintln!(
            "{name}: {device} is {} ({}, {}) on node {node}: {s}",
            func.dev, func.numbers, func.bus
        );
        // The runtime applied the spec: its env and its device node.
        assert_eq!(
            s.env.get("ACCEL"),
            Some(&format!("fn-node{node}")),
            "{name}: the runtime did not apply the spec\n  seen: {s}"
        );
        assert!(
            s.spec_devices.iter().any(|d| d == "/dev/accel0"),
            "{name}: /dev/accel0 is not among the container's devices\n  seen: {s}"
        );
        // nri-align resolved it through sysfs to the function, a generic device on its node,
        // and to nothing else: the other function's device, at the same container path, is
        // not this container's.
        let want = format!("{device}@{}/node{node}", func.bus);
        let pod_field = format!("pod=default/{name} ");
        let line = || {
            g.plugin
                .output()
                .lines()
                .rev()
                .find(|l| l.contains("generic devices read") && l.contains(&pod_field))
                .map(str::to_string)
        };
        assert!(
            Guest::wait(30, || line().is_some()),
            "nri-align logged no generic device for {name}:\n{}",
            g.plugin_tail(30)
        );
        let line = line().unwrap_or_default();
        let devices = line
            .split_once(" devices=")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or_default();
        assert_eq!(devices, want, "{name}: {line}");
        crate::assert_on_node(&name, &s, node, f);
    }
    let (ok, out) = g.verify();
    assert!(ok, "nri-align verify reports drift:\n{out}");
}
