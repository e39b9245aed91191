//! The readable `nri-align topology` report (NUMA nodes, distances, an `nvidia-smi topo -m` style
//! device matrix, where each device sits) and the JSON form.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::model::{PciKind, Topology};

/// The JSON form: the serialised model (the `--json` contract).
pub fn to_json(topo: &Topology) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(topo)
}

/// The readable report.
pub fn render(topo: &Topology) -> String {
    let mut out = String::new();
    summary(&mut out, topo);
    numa(&mut out, topo);
    distances(&mut out, topo);
    device_matrix(&mut out, topo);
    placement(&mut out, topo);
    out
}

fn summary(out: &mut String, topo: &Topology) {
    let packages: BTreeSet<u32> = topo.cpus.iter().map(|c| c.package).collect();
    let cores: BTreeSet<(u32, u32, u32)> = topo
        .cpus
        .iter()
        .map(|c| (c.package, c.die, c.core))
        .collect();
    let l3: BTreeSet<u32> = topo.cpus.iter().filter_map(|c| c.l3_group).collect();
    let _ = writeln!(out, "Host: {}", topo.source);
    let _ = writeln!(
        out,
        "CPUs: {} online ({}), {} packages, {} cores, {} L3 groups",
        topo.cpus.len(),
        topo.online_cpus(),
        packages.len(),
        cores.len(),
        l3.len()
    );
    if !topo.offline_cpus.is_empty() {
        let _ = writeln!(out, "Offline CPUs: {}", topo.offline_cpus);
    }
    if !topo.isolated_cpus.is_empty() {
        let _ = writeln!(out, "Isolated CPUs: {}", topo.isolated_cpus);
    }
    if !topo.outside_cpuset.is_empty() {
        let _ = writeln!(
            out,
            "Outside the containers' cpuset (never placed on): {}",
            topo.outside_cpuset
        );
    }
    out.push('\n');
}

fn numa(out: &mut String, topo: &Topology) {
    let _ = writeln!(out, "NUMA nodes:");
    for n in &topo.numa_nodes {
        let cpus = if n.is_memory_only() {
            format!(
                "no CPUs (memory-only, {})",
                n.memory_kind.as_deref().unwrap_or("unknown")
            )
        } else {
            format!("CPUs {} ({})", n.cpus, n.cpus.len())
        };
        let _ = write!(
            out,
            "  node {:<3} {:<40} memory {}",
            n.id,
            cpus,
            gib(n.memory_bytes)
        );
        let huge: Vec<String> = n
            .hugepages
            .iter()
            .filter(|h| h.total > 0)
            .map(|h| format!("{}: {}/{} free", page_size(h.size_kb), h.free, h.total))
            .collect();
        if !huge.is_empty() {
            let _ = write!(out, "  hugepages {}", huge.join(", "));
        }
        out.push('\n');
    }
    out.push('\n');
}

fn distances(out: &mut String, topo: &Topology) {
    if topo.numa_nodes.len() < 2 {
        return;
    }
    let _ = writeln!(out, "Node distances:");
    let _ = write!(out, "  {:>6}", "");
    for n in &topo.numa_nodes {
        let _ = write!(out, " {:>5}", format!("n{}", n.id));
    }
    out.push('\n');
    for a in &topo.numa_nodes {
        let _ = write!(out, "  {:>6}", format!("n{}", a.id));
        for b in &topo.numa_nodes {
            let _ = write!(out, " {:>5}", topo.distance(a.id, b.id));
        }
        out.push('\n');
    }
    out.push('\n');
}

/// Rows and columns: GPUs then NICs, like `nvidia-smi topo -m`.
fn device_matrix(out: &mut String, topo: &Topology) {
    if topo.gpus.is_empty() && topo.nics.is_empty() {
        return;
    }
    struct Dev<'a> {
        label: String,
        bus: Option<&'a str>,
        numa: Option<u32>,
        gpu: Option<usize>,
    }
    let mut devs: Vec<Dev> = topo
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| Dev {
            label: format!("GPU{}", g.index),
            bus: Some(g.pci_bus_id.as_str()),
            numa: g.numa_node,
            gpu: Some(i),
        })
        .collect();
    devs.extend(topo.nics.iter().enumerate().map(|(i, n)| Dev {
        label: format!("NIC{i}"),
        bus: n.pci_bus_id.as_deref(),
        numa: n.numa_node,
        gpu: None,
    }));
    let cell = |a: &Dev, b: &Dev| -> String {
        if let (Some(i), Some(j), Some(links)) = (a.gpu, b.gpu, topo.gpu_links.as_ref()) {
            let n = links
                .nvlink
                .get(i)
                .and_then(|row| row.get(j))
                .copied()
                .unwrap_or(0);
            if i != j && n > 0 {
                return format!("NV{n}");
            }
        }
        match (a.bus, b.bus) {
            (Some(x), Some(y)) => topo.pcie_level(x, y).label().to_string(),
            _ => "SYS".to_string(),
        }
    };
    let _ = writeln!(out, "Device matrix:");
    let _ = write!(out, "  {:<6}", "");
    for d in &devs {
        let _ = write!(out, " {:>5}", d.label);
    }
    let _ = writeln!(out, "  {:<20} NUMA Affinity", "CPU Affinity");
    for a in &devs {
        let _ = write!(out, "  {:<6}", a.label);
        for b in &devs {
            let _ = write!(out, " {:>5}", cell(a, b));
        }
        let (cpus, node) = match a.numa.and_then(|n| topo.node(n)) {
            Some(n) => (n.cpus.to_string(), n.id.to_string()),
            None => ("N/A".to_string(), "N/A".to_string()),
        };
        let _ = writeln!(out, "  {cpus:<20} {node}");
    }
    if !topo.nics.is_empty() {
        let _ = writeln!(out, "\n  NIC legend:");
        for (i, n) in topo.nics.iter().enumerate() {
            let rdma = n
                .rdma_device
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            let _ = writeln!(out, "    NIC{i}: {}{rdma}", n.name);
        }
    }
    let _ = writeln!(
        out,
        "\n  X = self, NV# = # NVLinks, PIX = one PCIe switch, PXB = several switches, \
         PHB = host bridge, NODE = same NUMA node, SYS = across NUMA nodes"
    );
    if topo.gpu_links.as_ref().is_some_and(|l| l.nvswitch) {
        let _ = writeln!(out, "  GPUs are connected through NVSwitch");
    }
    out.push('\n');
}

fn placement(out: &mut String, topo: &Topology) {
    let interesting: Vec<_> = topo
        .pci_devices
        .iter()
        .filter(|d| d.kind != PciKind::Bridge)
        .collect();
    if interesting.is_empty() {
        return;
    }
    let _ = writeln!(out, "Where devices sit:");
    for d in interesting {
        let what = match d.kind {
            PciKind::Gpu => topo
                .gpus
                .iter()
                .find(|g| g.pci_bus_id == d.bus_id)
                .map(|g| {
                    let minor = g
                        .minor
                        .map(|m| format!(" /dev/nvidia{m}"))
                        .unwrap_or_default();
                    format!("GPU{}{minor}", g.index)
                })
                .unwrap_or_else(|| "GPU".to_string()),
            PciKind::Nic => {
                let names: Vec<&str> = topo
                    .nics
                    .iter()
                    .filter(|n| n.pci_bus_id.as_deref() == Some(d.bus_id.as_str()))
                    .map(|n| n.name.as_str())
                    .collect();
                format!("NIC {}", names.join(","))
            }
            _ if d.vendor == 0x10de && d.class >> 8 == 0x0680 => "NVSwitch".to_string(),
            _ => "other".to_string(),
        };
        let mut numa = d
            .numa_node
            .map(|n| n.to_string())
            .unwrap_or_else(|| "?".to_string());
        if let Some(said) = d.sysfs_numa_node {
            // Both values, and which one placement uses, so a firmware that misreports
            // numa_node in SNC/NPS modes is visible rather than silently corrected.
            numa = format!("{numa} (local_cpulist; sysfs numa_node says {said})");
        }
        let mut chain = vec![d.bus_id.clone()];
        chain.extend(d.bridges.iter().cloned());
        chain.push(d.root_complex.clone());
        let _ = writeln!(
            out,
            "  {:<12} {:<24} [{:04x}:{:04x}] numa {:<3} {}",
            d.bus_id,
            what,
            d.vendor,
            d.device,
            numa,
            chain.join(" <- ")
        );
    }
}

/// `bytes` in GiB with one decimal, as the report and the picture show memory.
pub(crate) fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn page_size(kb: u64) -> String {
    if kb >= 1 << 20 {
        format!("{}G", kb >> 20)
    } else if kb >= 1 << 10 {
        format!("{}M", kb >> 10)
    } else {
        format!("{kb}K")
    }
}
