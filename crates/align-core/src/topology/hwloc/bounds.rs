//! Bounds an hwloc capture must keep before it is imported: how deep its elements nest (the
//! import walks recurse once per level) and how many CPUs, NUMA nodes, PCI objects and GPUs it
//! has (the model keeps per-CPU bitmaps, NUMA distance and GPU link matrices, so a few
//! megabytes of hostile XML could otherwise ask for gigabytes). Every bound is far above any
//! real machine; crossing one is a clear error, never a crash or a silent cut.

use roxmltree::Node;

use super::HwlocError;
use crate::untrusted::excerpt;

/// Deepest element nesting imported. lstopo's deepest captures (Machine, Package, Die, Group,
/// L3, L2, L1d, L1i, Core, PU, or a host bridge with a few PCIe switch levels) stay under 30.
pub const MAX_DEPTH: usize = 256;

/// Bound on PU `os_index` (one past the largest) and on the number of PUs. Linux numbers CPUs
/// below `NR_CPUS`, which is at most 8192 (x86 `MAXSMP`); a CPU set is a bitmap up to its
/// largest id, kept once per CPU (its core's siblings).
pub const MAX_PUS: u32 = 16_384;

/// Bound on NUMANode `os_index` (one past the largest) and on the number of NUMA nodes: Linux's
/// `MAX_NUMNODES` is at most 1024, and the distance matrix is square in them.
pub const MAX_NUMA_NODES: u32 = 1024;

/// Most PCI objects (bridges and functions): 256 buses of 32 devices of 8 functions in one
/// domain; SR-IOV hosts with thousands of virtual functions stay well below.
pub const MAX_PCI_OBJECTS: usize = 65_536;

/// Most NVIDIA GPUs: placement scores GPU pairs, so link tables are square in them.
pub const MAX_GPUS: usize = 1024;

/// Checks nesting depth, id ranges and object counts without recursing (a hostile file nests
/// 10,000 deep to overflow the stack of a recursive walk).
pub(super) fn check(root: Node) -> Result<(), HwlocError> {
    let mut pus = Seen::new("PU", MAX_PUS);
    let mut numa = Seen::new("NUMANode", MAX_NUMA_NODES);
    let mut pci = 0usize;
    let mut stack = vec![(root, 0usize)];
    while let Some((node, depth)) = stack.pop() {
        if depth > MAX_DEPTH {
            return Err(HwlocError::TooLarge(format!(
                "elements nested more than {MAX_DEPTH} deep"
            )));
        }
        match node.attribute("type").unwrap_or("") {
            "PU" => pus.add(node)?,
            "NUMANode" => numa.add(node)?,
            "Bridge" | "PCIDev" => {
                pci += 1;
                if pci > MAX_PCI_OBJECTS {
                    return Err(HwlocError::TooLarge(format!(
                        "more than {MAX_PCI_OBJECTS} PCI objects"
                    )));
                }
            }
            _ => {}
        }
        stack.extend(
            node.children()
                .filter(Node::is_element)
                .map(|c| (c, depth + 1)),
        );
    }
    Ok(())
}

/// The `os_index` values of one object type seen so far.
struct Seen {
    kind: &'static str,
    bound: u32,
    count: u32,
    ids: Vec<bool>,
}

impl Seen {
    fn new(kind: &'static str, bound: u32) -> Self {
        Seen {
            kind,
            bound,
            count: 0,
            ids: vec![false; bound as usize],
        }
    }

    /// Counts `node`; refuses one too many, an `os_index` at or beyond the bound, and one seen
    /// before (two CPUs or nodes with one number: the capture is corrupt). An `os_index` that
    /// is not a number is left to the import, which skips the object as hwloc would.
    fn add(&mut self, node: Node) -> Result<(), HwlocError> {
        let (kind, bound) = (self.kind, self.bound);
        self.count += 1;
        if self.count > bound {
            return Err(HwlocError::TooLarge(format!(
                "more than {bound} {kind} objects"
            )));
        }
        let Some(text) = node.attribute("os_index") else {
            return Ok(());
        };
        let digits = text.trim();
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(());
        }
        // All digits but past u64 is a number too, and far beyond the bound.
        let value = digits.parse::<u64>().ok();
        let seen = value
            .and_then(|v| usize::try_from(v).ok())
            .and_then(|i| self.ids.get_mut(i));
        let (Some(seen), Some(value)) = (seen, value) else {
            return Err(HwlocError::TooLarge(format!(
                "{kind} os_index {} is beyond the largest supported ({})",
                excerpt(text),
                bound - 1
            )));
        };
        if std::mem::replace(seen, true) {
            return Err(HwlocError::NotHwloc(format!(
                "two {kind} objects have os_index {value}"
            )));
        }
        Ok(())
    }
}

/// Checks the GPU count once the devices are known.
pub(super) fn check_gpus(count: usize) -> Result<(), HwlocError> {
    if count > MAX_GPUS {
        return Err(HwlocError::TooLarge(format!(
            "{count} NVIDIA GPUs, more than the {MAX_GPUS} supported"
        )));
    }
    Ok(())
}
