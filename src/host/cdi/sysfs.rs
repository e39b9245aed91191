//! Which host device a CDI device node stands for, read from sysfs under the host root.
//!
//! The kernel links most character devices to the device they belong to:
//! `/sys/dev/char/MAJ:MIN/device` points at the PCI function of a DRM card or render node, an
//! `/dev/accel/accelN` node, a `/dev/vfio/devices/vfioN` cdev. The rest are read by name:
//! NVIDIA's `/dev/nvidiaN` by the GPU's minor number (the NVIDIA driver's nodes have no sysfs
//! entry), `/dev/infiniband/uverbsN` through `/sys/class/infiniband_verbs/uverbsN/device`, and
//! the legacy `/dev/vfio/<group>` through `/sys/kernel/iommu_groups/<group>/devices`.
//! Nodes every container of a kind gets (`nvidiactl`, `nvidia-uvm`, `/dev/vfio/vfio`,
//! `/dev/iommu`...) are no device of their own.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use k8s_devices::cdi_spec::DeviceNode;

use super::{CdiTarget, PciFunction};

/// Shared control nodes: given to every container of a kind, never an allocation (AMD's
/// `/dev/kfd` is the compute interface every ROCm container gets beside its render node).
const CONTROL_NODES: [&str; 8] = [
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
    "/dev/vfio/vfio",
    "/dev/iommu",
    "/dev/infiniband/rdma_cm",
    "/dev/kfd",
];

/// What one device node of a spec stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeMap {
    /// A shared control node.
    Control,
    /// Host devices (a VFIO group may hold several functions).
    Targets(Vec<CdiTarget>),
    /// Nothing sysfs links it to (a node of a virtual device, or one the host lacks).
    Unmapped(String),
}

/// Whether `s` is a PCI address in sysfs form (`0000:3b:00.0`).
pub fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// Whether a host path may name a device node: under `/dev/`, no `..` and no empty parts.
pub fn is_dev_path(p: &str) -> bool {
    p.strip_prefix("/dev/").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .split('/')
                .all(|c| !c.is_empty() && c != ".." && c != ".")
    })
}

/// Whether `path` is a shared control node (or one under a control directory): given to
/// every container of its kind, never an allocation.
pub fn is_control_path(path: &str) -> bool {
    CONTROL_NODES.iter().any(|c| {
        path.strip_prefix(c)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }) || path.starts_with("/dev/nvidia-caps-imex-channels/")
}

/// Maps `node` (its host path) to what it stands for on the host under `root`.
pub fn map_node(root: &Path, node: &DeviceNode) -> NodeMap {
    let path = node.host();
    if is_control_path(path) {
        return NodeMap::Control;
    }
    if path.starts_with("/dev/nvidia-caps/") {
        return NodeMap::Targets(vec![CdiTarget::MigCapability]);
    }
    if let Some(minor) = crate::host::devices::nvidia_minor(path) {
        return NodeMap::Targets(vec![CdiTarget::NvidiaGpu { minor }]);
    }
    if let Some(name) = crate::host::devices::uverbs_name(path) {
        let link = root.join(format!("sys/class/infiniband_verbs/{name}/device"));
        return NodeMap::Targets(vec![CdiTarget::Uverbs {
            name: name.to_string(),
            pci: pci_behind(root, &link),
        }]);
    }
    if let Some(group) = path
        .strip_prefix("/dev/vfio/")
        .filter(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
    {
        return vfio_group(root, group);
    }
    if let Some(cdev) = path.strip_prefix("/dev/vfio/devices/") {
        let link = root.join(format!("sys/class/vfio-dev/{cdev}/device"));
        if !cdev.contains('/') {
            if let Some(f) = pci_behind(root, &link) {
                return NodeMap::Targets(vec![CdiTarget::Pci(f)]);
            }
        }
    }
    by_numbers(root, node)
}

/// The functions of IOMMU group `group`.
fn vfio_group(root: &Path, group: &str) -> NodeMap {
    let dir = root.join(format!("sys/kernel/iommu_groups/{group}/devices"));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return NodeMap::Unmapped(format!("no IOMMU group {group}"));
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| is_bdf(n))
        .collect();
    names.sort();
    let targets: Vec<CdiTarget> = names
        .iter()
        .take(64)
        .map(|bus| CdiTarget::Pci(pci_function(root, bus)))
        .collect();
    if targets.is_empty() {
        return NodeMap::Unmapped(format!("IOMMU group {group} has no PCI function"));
    }
    NodeMap::Targets(targets)
}

/// Through `/sys/dev/{char,block}/MAJ:MIN/device`, with the numbers the spec gives or, where
/// it leaves them to the runtime, those of the node on the host.
fn by_numbers(root: &Path, node: &DeviceNode) -> NodeMap {
    let numbers = if node.major > 0 {
        let block = node.kind == "b";
        Some((block, node.major, node.minor))
    } else {
        host_numbers(root, node)
    };
    let Some((block, major, minor)) = numbers else {
        return NodeMap::Unmapped("no such device node on the host".into());
    };
    let dir = if block { "block" } else { "char" };
    let link = root.join(format!("sys/dev/{dir}/{major}:{minor}/device"));
    match pci_behind(root, &link) {
        Some(f) => NodeMap::Targets(vec![CdiTarget::Pci(f)]),
        None => NodeMap::Unmapped(format!("{dir} {major}:{minor} links to no PCI function")),
    }
}

/// Whether the host node of `node` (its host path under `root`) is a block device, and its
/// major and minor number: what a runtime fills in where the spec leaves them out (the
/// reference library stats the host path the same way). `None` when it is no device node.
pub fn host_numbers(root: &Path, node: &DeviceNode) -> Option<(bool, i64, i64)> {
    // Links followed as the host follows them, never out of its `/dev`.
    let rel = node.host().strip_prefix("/dev/")?;
    let full = crate::host::devpath::resolve(&root.join("dev"), rel)?;
    let md = std::fs::symlink_metadata(full).ok()?;
    let ft = md.file_type();
    let (major, minor) = (
        i64::from(nix::sys::stat::major(md.rdev()) as u32),
        i64::from(nix::sys::stat::minor(md.rdev()) as u32),
    );
    (ft.is_char_device() || ft.is_block_device()).then_some((ft.is_block_device(), major, minor))
}

/// The PCI function a sysfs `device` link resolves to: the last PCI address in its path (a
/// DRM node's `device` is the function itself; a vfio cdev's too).
fn pci_behind(root: &Path, link: &Path) -> Option<PciFunction> {
    let real = std::fs::canonicalize(link).ok()?;
    let bus = real
        .components()
        .rev()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .find(|c| is_bdf(c))?;
    Some(pci_function(root, &bus))
}

/// PCI function `bus` with its NUMA node (sysfs `numa_node`, -1 for none) and its PCIe path
/// (root complex, then the bridges down to the function).
pub fn pci_function(root: &Path, bus: &str) -> PciFunction {
    let dev: PathBuf = root.join(format!("sys/bus/pci/devices/{bus}"));
    // A regular file only: a FIFO in place of the attribute is not waited on.
    let numa_node = crate::untrusted::read_regular(&dev.join("numa_node"), 64)
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|n| u32::try_from(n).ok());
    let pcie_path = std::fs::canonicalize(&dev)
        .ok()
        .map(|real| {
            real.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .skip_while(|c| !c.starts_with("pci"))
                .filter(|c| c.starts_with("pci") || is_bdf(c))
                .take(32)
                .collect()
        })
        .unwrap_or_default();
    PciFunction {
        bus_id: bus.to_ascii_lowercase(),
        numa_node,
        pcie_path,
    }
}
