//! An emulated host shaped like this machine: its real online CPUs, NUMA nodes and memory (runc
//! enforces cpusets and mems, so they must be real), plus fake GPUs and RDMA NICs on node 0,
//! with their device nodes created under the host root's `dev/` and an NVML fixture for the
//! fake NVML library.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{describe, err, nri_align_bin, run_cmd, HResult, HarnessError};

/// This machine's CPU and NUMA layout, read from /sys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealMachine {
    /// Online CPUs, ascending.
    pub cpus: Vec<u32>,
    /// NUMA node id -> its online CPUs (nodes with CPUs only).
    pub nodes: BTreeMap<u32, Vec<u32>>,
    /// Memory of each node in KiB.
    pub node_mem_kib: BTreeMap<u32, u64>,
    /// Threads per core (from cpu0's siblings).
    pub threads_per_core: u32,
    /// Sockets (distinct physical package ids).
    pub sockets: u32,
}

/// Parses a Linux CPU list ("0-3,8").
pub fn parse_list(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<u32>().ok()),
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The ids of a CPU or node set as nri-align records it: the state log writes Linux list
/// strings ("0-3,8"), the 0.1.0 state document wrote arrays of numbers.
pub fn recorded_ids(v: &serde_json::Value) -> Vec<u32> {
    match v {
        serde_json::Value::String(s) => parse_list(s),
        serde_json::Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_u64())
            .filter_map(|x| u32::try_from(x).ok())
            .collect(),
        _ => Vec::new(),
    }
}

/// Formats CPUs as a Linux list ("0-3,8").
pub fn format_list(ids: &[u32]) -> String {
    let mut v = ids.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        let mut end = start;
        while i + 1 < v.len() && v[i + 1] == end + 1 {
            i += 1;
            end = v[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

fn read(path: &Path) -> HResult<String> {
    fs::read_to_string(path).map_err(|e| HarnessError(format!("read {}: {e}", path.display())))
}

impl RealMachine {
    /// Reads /sys of this machine.
    pub fn read() -> HResult<Self> {
        Self::read_from(Path::new("/sys"))
    }

    /// Reads a sysfs tree at `sys` (the real one, or an emulated one to compare).
    pub fn read_from(sys: &Path) -> HResult<Self> {
        let cpus = parse_list(&read(&sys.join("devices/system/cpu/online"))?);
        let mut nodes = BTreeMap::new();
        let mut node_mem_kib = BTreeMap::new();
        for id in parse_list(&read(&sys.join("devices/system/node/online"))?) {
            let dir = sys.join(format!("devices/system/node/node{id}"));
            let list: Vec<u32> = parse_list(&read(&dir.join("cpulist"))?)
                .into_iter()
                .filter(|c| cpus.contains(c))
                .collect();
            if list.is_empty() {
                continue;
            }
            nodes.insert(id, list);
            // "Node 0 MemTotal:       15952084 kB"
            let meminfo = read(&dir.join("meminfo"))?;
            let kib = meminfo
                .lines()
                .find(|l| l.contains("MemTotal:"))
                .and_then(|l| l.split_whitespace().rev().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| HarnessError(format!("no MemTotal in {}", dir.display())))?;
            node_mem_kib.insert(id, kib);
        }
        let first = cpus.first().copied().unwrap_or(0);
        let topo = sys.join(format!("devices/system/cpu/cpu{first}/topology"));
        let threads_per_core = read(&topo.join("thread_siblings_list"))
            .map(|t| parse_list(&t).len().max(1) as u32)
            .unwrap_or(1);
        let mut packages: Vec<String> = cpus
            .iter()
            .filter_map(|c| {
                read(&sys.join(format!(
                    "devices/system/cpu/cpu{c}/topology/physical_package_id"
                )))
                .ok()
            })
            .map(|s| s.trim().to_string())
            .collect();
        packages.sort();
        packages.dedup();
        Ok(Self {
            cpus,
            nodes,
            node_mem_kib,
            threads_per_core,
            sockets: packages.len().max(1) as u32,
        })
    }

    /// The online CPUs as a list.
    pub fn cpu_list(&self) -> String {
        format_list(&self.cpus)
    }

    /// NUMA node of `cpu`.
    pub fn node_of(&self, cpu: u32) -> Option<u32> {
        self.nodes
            .iter()
            .find(|(_, cpus)| cpus.contains(&cpu))
            .map(|(n, _)| *n)
    }
}

/// One emulated GPU, as the NVML fixture describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeGpu {
    /// NVML index.
    pub index: u32,
    /// UUID (`GPU-...`).
    pub uuid: String,
    /// Minor number: the GPU is `/dev/nvidia<minor>`.
    pub minor: u32,
    /// UUIDs (`MIG-...`) of its MIG devices, in slot order (empty unless MIG is on).
    pub mig: Vec<String>,
}

/// An emulated host tree (`sys/`, `proc/`, `dev/`, `nvml.json`) shaped like this machine.
#[derive(Debug, Clone)]
pub struct EmulatedHost {
    /// The host root to give `nri-align run --host-root`.
    pub root: PathBuf,
    /// The NVML fixture (`FAKE_NVML_FIXTURE`).
    pub nvml_fixture: PathBuf,
    /// The machine it copies.
    pub machine: RealMachine,
    /// The fake GPUs, by index.
    pub gpus: Vec<FakeGpu>,
    /// The RDMA verbs devices (`uverbsN`), one per NIC.
    pub uverbs: Vec<String>,
}

/// Major/minor of the extra nodes the emulation does not list but real hosts have:
/// nvidia-uvm (dynamic major on real hosts) and rdma_cm (misc 10:58). nvidia-uvm-tools is left
/// out on purpose, so "only the control nodes that exist" can be observed.
const EXTRA_NODES: [(&str, u32, u32); 2] = [
    ("/dev/nvidia-uvm", 510, 0),
    ("/dev/infiniband/rdma_cm", 10, 58),
];

impl EmulatedHost {
    /// Emulates this machine with `gpus` GPUs and `nics` RDMA NICs (all on the first node)
    /// under `dir` (which must not hold a tree yet).
    pub fn of_this_machine(dir: &Path, gpus: usize, nics: usize) -> HResult<Self> {
        Self::of_this_machine_with_mig(dir, gpus, nics, &[])
    }

    /// [`EmulatedHost::of_this_machine`] with MIG mode on for some GPUs: `(gpu index,
    /// profiles of its MIG devices)`; the fake NVML lists them and `FakeGpu::mig` has their
    /// UUIDs.
    pub fn of_this_machine_with_mig(
        dir: &Path,
        gpus: usize,
        nics: usize,
        mig: &[(usize, &[&str])],
    ) -> HResult<Self> {
        let machine = RealMachine::read()?;
        let desc = description(&machine, gpus, nics, mig)?;
        fs::create_dir_all(dir)
            .map_err(|e| HarnessError(format!("mkdir {}: {e}", dir.display())))?;
        let desc_path = dir.join("this-machine.yaml");
        fs::write(&desc_path, &desc)
            .map_err(|e| HarnessError(format!("write {}: {e}", desc_path.display())))?;
        let root = dir.join("root");
        let out = run_cmd(
            Command::new(nri_align_bin())
                .arg("emulate")
                .arg("--host")
                .arg(&desc_path)
                .arg("--out")
                .arg(&root),
            "nri-align emulate",
        )?;
        if !out.status.success() {
            return err(format!(
                "nri-align emulate of\n{desc}\nfailed: {}",
                describe(&out)
            ));
        }
        // The emulated CPUs and nodes must be this machine's, or runc would refuse the
        // cpusets nri-align computes from them.
        let emulated = RealMachine::read_from(&root.join("sys"))?;
        if (emulated.cpus.clone(), emulated.nodes.clone())
            != (machine.cpus.clone(), machine.nodes.clone())
        {
            return err(format!(
                "cannot emulate this machine: real CPUs {:?} nodes {:?}, emulated CPUs {:?} nodes {:?} \
                 (description:\n{desc})",
                machine.cpus, machine.nodes, emulated.cpus, emulated.nodes
            ));
        }
        if machine.nodes.len() < 2 {
            say_single_node_once(machine.nodes.len());
        }
        make_dev_nodes(&root)?;
        let nvml_fixture = root.join("nvml.json");
        let fixture: Value = serde_json::from_str(&read(&nvml_fixture)?)
            .map_err(|e| HarnessError(format!("bad {}: {e}", nvml_fixture.display())))?;
        let gpus = fixture["gpus"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|g| {
                        Some(FakeGpu {
                            index: u32::try_from(g["index"].as_u64()?).ok()?,
                            uuid: g["uuid"].as_str()?.to_string(),
                            minor: u32::try_from(g["minor"].as_u64()?).ok()?,
                            mig: g["mig_devices"]
                                .as_array()
                                .map(|m| {
                                    m.iter()
                                        .filter_map(|d| Some(d["uuid"].as_str()?.to_string()))
                                        .collect()
                                })
                                .unwrap_or_default(),
                        })
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let uverbs = (0..nics).map(|i| format!("uverbs{i}")).collect();
        Ok(Self {
            root,
            nvml_fixture,
            machine,
            gpus,
            uverbs,
        })
    }

    /// Host path of a device node of the emulated host (`/dev/nvidia0` -> `ROOT/dev/nvidia0`),
    /// as a device plugin would pass it to CRI.
    pub fn dev(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// The fake NVML library (`target/<profile>/deps/libfake_nvml.so`, built because fake-nvml
    /// is a dev-dependency of this package).
    pub fn nvml_lib() -> HResult<PathBuf> {
        let exe = std::env::current_exe().map_err(|e| HarnessError(e.to_string()))?;
        let lib = exe
            .parent()
            .map(|d| d.join("libfake_nvml.so"))
            .unwrap_or_default();
        if !lib.is_file() {
            return err(format!(
                "{} missing: is fake-nvml a dev-dependency?",
                lib.display()
            ));
        }
        Ok(lib)
    }
}

/// A host description with this machine's shape (one line per key; see crates/align-core/src/topology/desc/).
fn description(
    m: &RealMachine,
    gpus: usize,
    nics: usize,
    mig: &[(usize, &[&str])],
) -> HResult<String> {
    let nodes = m.nodes.len() as u32;
    let per_node: Vec<usize> = m.nodes.values().map(Vec::len).collect();
    let cpus_per_node = per_node.first().copied().unwrap_or(0);
    if nodes == 0 || per_node.iter().any(|n| *n != cpus_per_node) {
        return err(format!("cannot describe uneven NUMA nodes {:?}", m.nodes));
    }
    let sockets = m.sockets.min(nodes).max(1);
    if nodes % sockets != 0 {
        return err(format!("{nodes} NUMA nodes over {sockets} sockets"));
    }
    let threads = m.threads_per_core.max(1);
    let cores_per_numa = cpus_per_node as u32 / threads;
    let mem_kib = m.node_mem_kib.values().copied().min().unwrap_or(1 << 20);
    let first_node = m.nodes.keys().next().copied().unwrap_or(0);
    let mut d = format!(
        "name: this-machine\n\
         description: this machine's CPUs and NUMA nodes, fake GPUs and RDMA NICs\n\
         sockets: {sockets}\n\
         numa_per_socket: {}\n\
         cores_per_numa: {cores_per_numa}\n\
         threads_per_core: {threads}\n\
         numbering: {}\n\
         memory_per_numa: {mem_kib}Ki\n",
        nodes / sockets,
        if threads > 1 {
            "interleaved"
        } else {
            "sequential"
        },
    );
    if gpus + nics > 0 {
        d.push_str(&format!(
            "pcie_switches:\n  - {{id: sw0, numa_node: {first_node}}}\n"
        ));
    }
    if gpus > 0 {
        d.push_str("gpus:\n");
        for i in 0..gpus {
            match mig.iter().find(|(g, _)| *g == i) {
                Some((_, profiles)) => {
                    let devices: Vec<String> = profiles
                        .iter()
                        .map(|p| format!("{{profile: {p}}}"))
                        .collect();
                    d.push_str(&format!(
                        "  - {{name: NVIDIA Emulated GPU, switch: sw0, mig: true, \
                         mig_devices: [{}]}}\n",
                        devices.join(", ")
                    ));
                }
                None => d.push_str("  - {name: NVIDIA Emulated GPU, switch: sw0}\n"),
            }
        }
    }
    if nics > 0 {
        d.push_str("nics:\n");
        for i in 0..nics {
            d.push_str(&format!(
                "  - {{name: ibemu{i}, rdma: mlx5_{i}, link_layer: infiniband, switch: sw0}}\n"
            ));
        }
    }
    Ok(d)
}

/// Creates the device nodes `dev-nodes.json` lists (and [`EXTRA_NODES`]) under `root/dev`.
fn make_dev_nodes(root: &Path) -> HResult<()> {
    let list: Value = serde_json::from_str(&read(&root.join("dev-nodes.json"))?)
        .map_err(|e| HarnessError(format!("bad dev-nodes.json: {e}")))?;
    let mut nodes: Vec<(String, u32, u32)> = list
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| {
                    Some((
                        n["path"].as_str()?.to_string(),
                        u32::try_from(n["major"].as_u64()?).ok()?,
                        u32::try_from(n["minor"].as_u64()?).ok()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    nodes.extend(EXTRA_NODES.iter().map(|(p, a, b)| (p.to_string(), *a, *b)));
    for (path, major, minor) in nodes {
        let full = root.join(path.trim_start_matches('/'));
        if let Some(parent) = full.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| HarnessError(format!("mkdir {}: {e}", parent.display())))?;
        }
        let _ = fs::remove_file(&full);
        nix::sys::stat::mknod(
            &full,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(u64::from(major), u64::from(minor)),
        )
        .map_err(|e| HarnessError(format!("mknod {}: {e}", full.display())))?;
    }
    Ok(())
}

/// Says once per test binary, where every run's output shows it, that on this machine the
/// node choice cannot be wrong: with one NUMA node every CPU, memory node and device is on it,
/// so the host suites prove the plumbing (the cpuset, memory nodes, device nodes and env reach
/// the container) and not which node was chosen. Node choice on real nodes is proven in the
/// QEMU guests (tests/vm_numa) and over emulated multi-node hosts (crates/align-core/tests/placement).
fn say_single_node_once(nodes: usize) {
    use std::io::Write as _;
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "NOTE: this machine has {nodes} NUMA node(s): the end-to-end tests here check that \
             placements reach the containers, not which node they chose (that runs in the QEMU \
             guests, tests/vm_numa, and on emulated multi-node hosts, crates/align-core/tests/placement)"
        );
    });
}
