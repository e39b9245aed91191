//! Compares nri-align's reading of a sysfs/procfs tree with what hwloc's `lstopo` reads from the
//! same tree (`HWLOC_FSROOT`): PUs, cores, packages, NUMA nodes with their CPUs and memory, L3
//! groups. Shared by every test that has a tree to check (fixtures, this host, emulated hosts):
//! `test_support::lstopo::assert_agrees(root)`.
//!
//! The lstopo side is parsed here directly from the XML, independently of the library's hwloc
//! importer, so a bug in one cannot hide the same bug in the other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use align_core::topology::{read_host, Topology};

/// What both sides must agree on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct View {
    /// Online PUs.
    pub pus: BTreeSet<u32>,
    /// Package os index -> its PUs.
    pub packages: BTreeMap<u32, BTreeSet<u32>>,
    /// (package, core os index) -> PUs of that core.
    pub cores: BTreeMap<(u32, u32), BTreeSet<u32>>,
    /// NUMA node id -> its CPUs (empty for memory-only nodes).
    pub numa_cpus: BTreeMap<u32, BTreeSet<u32>>,
    /// NUMA node id -> memory in bytes.
    pub numa_memory: BTreeMap<u32, u64>,
    /// PU sets sharing an L3 cache.
    pub l3: BTreeSet<Vec<u32>>,
}

/// Runs lstopo on `root` (`/` means this host) and returns its XML. Panics with a hint when
/// hwloc is not installed: CI installs it from hack/setup, so a missing lstopo is a setup
/// error, never a reason to skip.
pub fn lstopo_xml(root: &Path) -> String {
    let mut cmd = Command::new("lstopo-no-graphics");
    // --disallowed: the reader sees every online CPU and node, whatever cgroup the test runs in.
    cmd.args(["--disallowed", "--of", "xml", "-"]);
    // The x86 backend would run CPUID on *this* machine and graft its caches onto the tree.
    cmd.env("HWLOC_COMPONENTS", "-x86");
    // hwloc hides NUMA nodes made of NVIDIA GPU memory (`numa_status`) unless told otherwise;
    // the kernel, and so nri-align, lists them.
    cmd.env("HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES", "1");
    if root != Path::new("/") {
        cmd.env("HWLOC_FSROOT", root);
    }
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("cannot run lstopo-no-graphics ({e}); run hack/setup to install hwloc")
    });
    assert!(
        out.status.success(),
        "lstopo failed on {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("lstopo XML is UTF-8")
}

/// hwloc bitmap text (`0x00000303,,0x1`): 32-bit words, most significant first.
fn bitmap(s: &str) -> BTreeSet<u32> {
    let mut set = BTreeSet::new();
    for (i, word) in s.split(',').rev().enumerate() {
        let w = word.trim_start_matches("0x");
        if w.is_empty() || w.contains("...") {
            continue;
        }
        let v = u32::from_str_radix(w, 16).expect("hex word");
        for bit in 0..32 {
            if v & (1 << bit) != 0 {
                set.insert(i as u32 * 32 + bit);
            }
        }
    }
    set
}

/// The view lstopo's XML gives.
pub fn view_from_lstopo(xml: &str) -> View {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(xml, opts).expect("lstopo XML parses");
    let mut v = View::default();
    let os = |n: roxmltree::Node| -> u32 {
        n.attribute("os_index")
            .and_then(|s| s.parse().ok())
            .expect("os_index")
    };
    let pus_below = |n: roxmltree::Node| -> BTreeSet<u32> {
        n.descendants()
            .filter(|d| d.attribute("type") == Some("PU"))
            .map(os)
            .collect()
    };
    for n in doc.descendants().filter(|n| n.has_tag_name("object")) {
        match n.attribute("type") {
            Some("PU") => {
                v.pus.insert(os(n));
            }
            Some("Package") => {
                v.packages.insert(os(n), pus_below(n));
            }
            Some("Core") => {
                let pkg = n
                    .ancestors()
                    .find(|a| a.attribute("type") == Some("Package"))
                    .map(os)
                    .unwrap_or(0);
                v.cores.insert((pkg, os(n)), pus_below(n));
            }
            Some("NUMANode") => {
                let id = os(n);
                v.numa_cpus
                    .insert(id, bitmap(n.attribute("cpuset").unwrap_or("0x0")));
                let mem = n
                    .attribute("local_memory")
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                v.numa_memory.insert(id, mem);
            }
            Some("L3Cache") => {
                v.l3.insert(pus_below(n).into_iter().collect());
            }
            _ => {}
        }
    }
    v
}

/// The same view from nri-align's model.
pub fn view_from_topology(t: &Topology) -> View {
    let mut v = View::default();
    let mut l3: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for c in &t.cpus {
        v.pus.insert(c.id);
        v.packages.entry(c.package).or_default().insert(c.id);
        v.cores.entry((c.package, c.core)).or_default().insert(c.id);
        if let Some(g) = c.l3_group {
            l3.entry(g).or_default().push(c.id);
        }
    }
    v.l3 = l3.into_values().collect();
    for n in &t.numa_nodes {
        v.numa_cpus.insert(n.id, n.cpus.iter().collect());
        v.numa_memory.insert(n.id, n.memory_bytes);
    }
    v
}

/// Asserts that nri-align and lstopo read the tree under `root` the same way.
pub fn assert_agrees(root: &Path) {
    let topo = read_host(root).unwrap_or_else(|e| panic!("reading {}: {e}", root.display()));
    let ours = view_from_topology(&topo);
    let theirs = view_from_lstopo(&lstopo_xml(root));
    compare(root, &ours, &theirs);
}

/// Field-by-field comparison with readable failures. Memory-only nodes: hwloc gives them the
/// cpuset of the CPUs they are local to (or none), not CPUs of their own, so only their presence
/// and memory are compared.
pub fn compare(root: &Path, ours: &View, theirs: &View) {
    let r = root.display();
    if let Some(why) = differences(ours, theirs) {
        panic!("{r}: {why}");
    }
    assert_eq!(ours.l3, theirs.l3, "{r}: L3 groups differ");
}

/// What differs between the two views, L3 groups aside (hwloc's reference outputs come from
/// machines whose caches the reader may see differently): PUs, packages, cores, NUMA nodes with
/// their CPUs and memory. `None` when they agree.
pub fn differences(ours: &View, theirs: &View) -> Option<String> {
    fn differ<T: std::fmt::Debug + PartialEq>(what: &str, a: &T, b: &T) -> Option<String> {
        (a != b).then(|| format!("{what} differ: ours {a:?}, hwloc's {b:?}"))
    }
    differ("online PUs", &ours.pus, &theirs.pus)
        .or_else(|| differ("packages", &ours.packages, &theirs.packages))
        .or_else(|| differ("cores", &ours.cores, &theirs.cores))
        .or_else(|| {
            differ(
                "NUMA node ids",
                &ours.numa_cpus.keys().collect::<Vec<_>>(),
                &theirs.numa_cpus.keys().collect::<Vec<_>>(),
            )
        })
        .or_else(|| {
            ours.numa_cpus
                .iter()
                .filter(|(_, cpus)| !cpus.is_empty())
                .find_map(|(id, cpus)| {
                    differ(
                        &format!("CPUs of node {id}"),
                        &Some(cpus),
                        &theirs.numa_cpus.get(id),
                    )
                })
        })
        .or_else(|| differ("NUMA memory", &ours.numa_memory, &theirs.numa_memory))
}
