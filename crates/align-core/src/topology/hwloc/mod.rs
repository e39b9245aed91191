//! Import of hwloc v2 XML captures (`lstopo --of xml`): packages, dies, cores, PUs, L3 groups,
//! NUMA nodes (memory-only ones included), the NUMA latency matrix, PCI devices with their
//! locality, GPUs, NICs and RDMA devices, and NVLink bandwidth matrices. Lets users load a
//! capture of their own machine wherever a host root would do.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use roxmltree::Node;

use super::idset::{CpuSet, MAX_ID};
use super::model::{Cpu, HugePages, NumaNode, Topology};
use crate::untrusted::MAX_HWLOC_BYTES;
pub use bounds::{MAX_DEPTH, MAX_GPUS, MAX_NUMA_NODES, MAX_PCI_OBJECTS, MAX_PUS};

/// Why an hwloc XML file could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum HwlocError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Not well-formed XML (roxmltree's message repeats tag names: cut like other outside text).
    #[error("not valid XML: {}", crate::untrusted::message(&.0.to_string()))]
    Xml(#[from] roxmltree::Error),
    /// Well-formed, but not an hwloc topology.
    #[error("not an hwloc v2 topology: {0}")]
    NotHwloc(String),
    /// More than any machine's capture: a file over [`MAX_HWLOC_BYTES`], elements nested
    /// deeper than [`MAX_DEPTH`], or more CPUs, NUMA nodes, PCI objects or GPUs than the
    /// bounds in [`bounds`] allow.
    #[error("not a plausible hwloc capture: {0}")]
    TooLarge(String),
}

/// Most XML nodes parsed (a 1,000-CPU machine with its I/O tree has under 100,000).
const MAX_NODES: u32 = 4_000_000;

/// Imports the capture in `path`.
pub fn import_file(path: &Path) -> Result<Topology, HwlocError> {
    let text = crate::untrusted::read_to_string(path, MAX_HWLOC_BYTES).map_err(|e| match e {
        crate::untrusted::ReadError::Io(source) => HwlocError::Io {
            path: path.to_path_buf(),
            source,
        },
        too_large => HwlocError::TooLarge(too_large.to_string()),
    })?;
    import_str(&text, &path.display().to_string())
}

/// Imports an hwloc XML document; `source` names it in the result.
pub fn import_str(xml: &str, source: &str) -> Result<Topology, HwlocError> {
    // lstopo writes a DOCTYPE line; roxmltree refuses DTDs unless told to accept them.
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        nodes_limit: MAX_NODES,
        ..roxmltree::ParsingOptions::default()
    };
    let doc = roxmltree::Document::parse_with_options(xml, options)?;
    let root = doc.root_element();
    if root.tag_name().name() != "topology" {
        return Err(HwlocError::NotHwloc(format!(
            "root element is <{}>",
            crate::untrusted::excerpt(root.tag_name().name())
        )));
    }
    bounds::check(root)?;
    let version3 = root
        .attribute("version")
        .is_some_and(|v| v.starts_with('3'));
    let Some(machine) = root.children().find(|n| n.has_tag_name("object")) else {
        return Err(HwlocError::NotHwloc("no top-level object".into()));
    };
    let mut walk = Walk {
        version3,
        ..Walk::default()
    };
    walk.visit(machine, &Ctx::default());
    if walk.pus.is_empty() {
        return Err(HwlocError::NotHwloc("no PU objects".into()));
    }
    let mut topo = walk.build(source, machine);
    bounds::check_gpus(topo.gpus.len())?;
    topo.gpu_links = matrices::nvlink(root, &walk, &topo);
    Ok(topo)
}

/// What is known about the objects above the current one.
#[derive(Default, Clone)]
struct Ctx {
    package: Option<u32>,
    die: Option<u32>,
    /// Node id (document position) of the enclosing Core and L3 objects.
    core: Option<usize>,
    l3: Option<usize>,
    /// The nearest NUMA node attached at or above here, for the CPUs below.
    numa: Option<u32>,
    /// cpuset of the nearest non-I/O ancestor (PCI locality).
    locality: Option<String>,
    /// PCI bridges with a bus id above (nearest last) and the host bridge's root complex name.
    bridges: Vec<String>,
    root_complex: Option<String>,
    /// Bus id of the PCI object directly above (OS devices belong to it).
    pci: Option<String>,
}

#[derive(Default)]
struct PuInfo {
    package: u32,
    die: u32,
    core_key: Option<usize>,
    l3_key: Option<usize>,
    numa: Option<u32>,
}

struct PciInfo {
    bus_id: String,
    vendor: u16,
    device: u16,
    class: u32,
    bridge: bool,
    bridges: Vec<String>,
    root_complex: String,
    locality: Option<String>,
}

struct OsDev {
    gp_index: String,
    name: String,
    kind: OsKind,
    pci: String,
    uuid: Option<String>,
    model: Option<String>,
}

#[derive(PartialEq, Clone, Copy)]
enum OsKind {
    Gpu,
    Network,
    OpenFabrics,
    Other,
}

#[derive(Default)]
struct Walk {
    version3: bool,
    pus: BTreeMap<u32, PuInfo>,
    nodes: Vec<(u32, u64, Vec<HugePages>, Option<String>)>,
    pci: Vec<PciInfo>,
    osdevs: Vec<OsDev>,
    /// gp_index of PCI objects -> bus id (NVSwitch peers in NVLink matrices).
    pci_gp: HashMap<String, String>,
}

impl Walk {
    fn visit(&mut self, node: Node, ctx: &Ctx) {
        let kind = node.attribute("type").unwrap_or("");
        let os_index = node
            .attribute("os_index")
            .and_then(|s| s.parse::<u32>().ok());
        let mut here = ctx.clone();
        match kind {
            "Package" => here.package = os_index,
            "Die" => here.die = os_index,
            "Core" => {
                here.core = Some(node.id().get_usize());
            }
            "L3Cache" => here.l3 = Some(node.id().get_usize()),
            "PU" => {
                if let Some(id) = os_index {
                    self.pus.insert(
                        id,
                        PuInfo {
                            package: ctx.package.unwrap_or(0),
                            die: ctx.die.unwrap_or(0),
                            core_key: ctx.core,
                            l3_key: ctx.l3,
                            numa: ctx.numa,
                        },
                    );
                }
            }
            "NUMANode" => {
                self.numa_node(node, os_index);
                return;
            }
            "Bridge" | "PCIDev" => self.pci_object(node, kind, &mut here),
            "OSDev" => {
                self.os_device(node, ctx);
                return;
            }
            _ => {}
        }
        if !matches!(kind, "Bridge" | "PCIDev" | "OSDev" | "Misc") {
            here.locality = node.attribute("cpuset").map(str::to_string);
            here.pci = None;
        }
        // Memory children (NUMA nodes, possibly under MemCache) apply to every CPU below.
        let objects: Vec<Node> = node
            .children()
            .filter(|c| c.has_tag_name("object"))
            .collect();
        // Plain DRAM (no subtype) is the CPUs' node; HBM, GPU memory or CXL attached next to it
        // are memory-only.
        let numa_children: Vec<(u32, bool)> =
            objects.iter().filter_map(|c| first_numa(*c)).collect();
        if let Some((numa, _)) = numa_children
            .iter()
            .find(|(_, special)| !special)
            .or(numa_children.first())
        {
            here.numa = Some(*numa);
        }
        for child in objects {
            self.visit(child, &here);
        }
    }

    fn numa_node(&mut self, node: Node, os_index: Option<u32>) {
        let Some(id) = os_index else { return };
        let memory = node
            .attribute("local_memory")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        // hwloc records configured pages only; the free count is unknown, so report it as free.
        let hugepages = node
            .children()
            .filter(|c| c.has_tag_name("page_type"))
            .filter_map(|c| {
                let size: u64 = c.attribute("size")?.parse().ok()?;
                let count: u64 = c.attribute("count")?.parse().ok()?;
                (size > 4096).then_some(HugePages {
                    size_kb: size / 1024,
                    total: count,
                    free: count,
                })
            })
            .collect();
        let subtype = node.attribute("subtype").map(str::to_string);
        self.nodes.push((id, memory, hugepages, subtype));
    }

    fn pci_object(&mut self, node: Node, kind: &str, here: &mut Ctx) {
        let Some(bus_id) = node.attribute("pci_busid").map(str::to_ascii_lowercase) else {
            // A host bridge: `bridge_pci="0000:[2b-3b]"` names root complex pci0000:2b.
            if let Some(range) = node.attribute("bridge_pci") {
                let (dom, rest) = range.split_once(':').unwrap_or(("0000", range));
                let bus = rest.trim_start_matches('[').get(..2).unwrap_or("00");
                here.root_complex = Some(format!("pci{}:{}", dom, bus).to_ascii_lowercase());
            }
            return;
        };
        let (class, vendor, device) = parse_pci_type(node.attribute("pci_type").unwrap_or(""));
        if let Some(gp) = node.attribute("gp_index") {
            self.pci_gp.insert(gp.to_string(), bus_id.clone());
        }
        let root_complex = here
            .root_complex
            .clone()
            .unwrap_or_else(|| format!("pci{}", super::sysfs::root_bus(&bus_id)));
        self.pci.push(PciInfo {
            bus_id: bus_id.clone(),
            vendor,
            device,
            class,
            bridge: kind == "Bridge",
            bridges: here.bridges.iter().rev().cloned().collect(),
            root_complex: root_complex.clone(),
            locality: here.locality.clone(),
        });
        here.root_complex = Some(root_complex);
        here.pci = Some(bus_id.clone());
        if kind == "Bridge" {
            here.bridges.push(bus_id);
        }
    }

    fn os_device(&mut self, node: Node, ctx: &Ctx) {
        // Only OS devices of a PCI function matter (block devices, DMA engines... are skipped).
        let Some(pci) = ctx.pci.clone() else {
            return;
        };
        let name = node.attribute("name").unwrap_or("").to_string();
        let ty: u32 = node
            .attribute("osdev_type")
            .and_then(|s| s.parse().ok())
            .unwrap_or(u32::MAX);
        let kind = if self.version3 {
            match ty {
                t if t & 32 != 0 => OsKind::OpenFabrics,
                t if t & 16 != 0 => OsKind::Network,
                t if t & 4 != 0 => OsKind::Gpu,
                _ => OsKind::Other,
            }
        } else {
            match ty {
                1 | 5 => OsKind::Gpu,
                2 => OsKind::Network,
                3 => OsKind::OpenFabrics,
                _ => OsKind::Other,
            }
        };
        let info = |key: &str| {
            node.children()
                .filter(|c| c.has_tag_name("info"))
                .find(|c| c.attribute("name") == Some(key))
                .and_then(|c| c.attribute("value"))
                .map(str::to_string)
        };
        self.osdevs.push(OsDev {
            gp_index: node.attribute("gp_index").unwrap_or("").to_string(),
            name,
            kind,
            pci,
            uuid: info("NVIDIAUUID"),
            model: info("GPUModel"),
        });
    }

    /// The PUs as CPUs, with their core (its OS index), L3 group and thread siblings.
    fn cpus(&self, machine: Node) -> Vec<Cpu> {
        // Core and L3 groups, keyed by the enclosing object.
        let mut by_core: HashMap<usize, CpuSet> = HashMap::new();
        let mut l3_first: HashMap<usize, u32> = HashMap::new();
        for (id, pu) in &self.pus {
            if let Some(k) = pu.core_key {
                by_core.entry(k).or_default().insert(*id);
            }
            if let Some(k) = pu.l3_key {
                l3_first.entry(k).or_insert(*id);
            }
        }
        let core_os: HashMap<usize, u32> = machine
            .descendants()
            .filter(|n| n.attribute("type") == Some("Core"))
            .filter_map(|n| Some((n.id().get_usize(), n.attribute("os_index")?.parse().ok()?)))
            .collect();
        let default_node = self.nodes.first().map(|n| n.0).unwrap_or(0);
        self.pus
            .iter()
            .map(|(id, pu)| Cpu {
                id: *id,
                package: pu.package,
                die: pu.die,
                core: pu
                    .core_key
                    .and_then(|k| core_os.get(&k).copied())
                    .unwrap_or(*id),
                numa_node: pu.numa.unwrap_or(default_node),
                l3_group: pu.l3_key.and_then(|k| l3_first.get(&k).copied()),
                thread_siblings: pu
                    .core_key
                    .and_then(|k| by_core.get(&k).cloned())
                    .unwrap_or_else(|| [*id].into_iter().collect()),
            })
            .collect()
    }

    /// The NUMA nodes (one holding every CPU where the capture has none), with distances.
    fn nodes(&self, machine: Node, cpus: &[Cpu]) -> Vec<NumaNode> {
        let mut nodes: Vec<NumaNode> = self
            .nodes
            .iter()
            .map(|(id, memory, hugepages, subtype)| {
                let node_cpus: CpuSet = cpus
                    .iter()
                    .filter(|c| c.numa_node == *id)
                    .map(|c| c.id)
                    .collect();
                let memory_kind = node_cpus
                    .is_empty()
                    .then(|| memory_kind(subtype.as_deref()));
                NumaNode {
                    id: *id,
                    cpus: node_cpus,
                    memory_bytes: *memory,
                    hugepages: hugepages.clone(),
                    distances: Vec::new(),
                    memory_kind,
                }
            })
            .collect();
        if nodes.is_empty() {
            nodes.push(NumaNode {
                id: 0,
                cpus: cpus.iter().map(|c| c.id).collect(),
                memory_bytes: 0,
                hugepages: Vec::new(),
                distances: Vec::new(),
                memory_kind: None,
            });
        }
        nodes.sort_by_key(|n| n.id);
        let numa_distances = matrices::numa_distances(machine.parent_element(), &nodes);
        for (i, n) in nodes.iter_mut().enumerate() {
            n.distances = numa_distances.get(i).cloned().unwrap_or_default();
        }
        let ids: Vec<u32> = nodes.iter().map(|n| n.id).collect();
        for (i, n) in nodes.iter_mut().enumerate() {
            if n.distances.len() != ids.len() {
                n.distances = (0..ids.len())
                    .map(|j| if i == j { 10 } else { 20 })
                    .collect();
            }
        }
        nodes
    }

    fn build(&self, source: &str, machine: Node) -> Topology {
        let cpus = self.cpus(machine);
        let nodes = self.nodes(machine, &cpus);
        let complete = machine
            .attribute("complete_cpuset")
            .and_then(parse_hwloc_bitmap)
            .unwrap_or_default();
        let online: CpuSet = cpus.iter().map(|c| c.id).collect();
        let mut topo = Topology {
            source: source.to_string(),
            cpus,
            offline_cpus: complete.difference(&online),
            isolated_cpus: CpuSet::new(),
            numa_nodes: nodes,
            ..Topology::default()
        };
        self.devices(&mut topo);
        topo
    }
}

/// The NUMA node of a memory child (looking through MemCache), and whether it is special
/// memory (it has a subtype: HBM, GPUMemory, ...).
fn first_numa(node: Node) -> Option<(u32, bool)> {
    match node.attribute("type")? {
        "NUMANode" => Some((
            node.attribute("os_index")?.parse().ok()?,
            node.attribute("subtype").is_some(),
        )),
        "MemCache" => node
            .children()
            .filter(|c| c.has_tag_name("object"))
            .find_map(first_numa),
        _ => None,
    }
}

fn memory_kind(subtype: Option<&str>) -> String {
    let s = subtype.unwrap_or("").to_ascii_lowercase();
    if s.contains("hbm") || s.contains("mcdram") {
        "hbm".into()
    } else if s.contains("cxl") {
        "cxl".into()
    } else if s.contains("gpu") {
        "gpu".into()
    } else {
        "unknown".into()
    }
}

/// `pci_type="0302 [10de:15f9] [10de:116b] a1 00"`: class (base+sub), vendor, device.
fn parse_pci_type(s: &str) -> (u32, u16, u16) {
    let mut parts = s.split_whitespace();
    let class = parts
        .next()
        .and_then(|c| u32::from_str_radix(c, 16).ok())
        .unwrap_or(0)
        << 8;
    let ids = parts
        .next()
        .map(|p| p.trim_matches(|c| c == '[' || c == ']'))
        .and_then(|p| p.split_once(':'))
        .and_then(|(v, d)| {
            Some((
                u16::from_str_radix(v, 16).ok()?,
                u16::from_str_radix(d, 16).ok()?,
            ))
        })
        .unwrap_or((0, 0));
    (class, ids.0, ids.1)
}

/// hwloc's bitmap text: comma-separated 32-bit hex words, most significant first, empty words
/// meaning zero (`0x00000303,,0x1`); a leading `0xf...f` means "all above", which is dropped.
pub fn parse_hwloc_bitmap(s: &str) -> Option<CpuSet> {
    let mut set = CpuSet::new();
    for (i, word) in s.trim().split(',').rev().enumerate() {
        let w = word.trim().trim_start_matches("0x");
        if w.is_empty() || w == "f...f" {
            continue;
        }
        let v = u32::from_str_radix(w, 16).ok()?;
        for bit in 0..32 {
            if v & (1 << bit) != 0 {
                // Beyond MAX_ID is not a CPU any machine has: refuse, never allocate for it.
                let id = u32::try_from(i * 32 + bit).ok().filter(|id| *id < MAX_ID)?;
                set.insert(id);
            }
        }
    }
    Some(set)
}

pub mod bounds;
mod devices;
mod matrices;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod bounds_tests;
