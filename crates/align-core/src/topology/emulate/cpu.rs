//! `sys/devices/system/cpu` and `sys/devices/system/node`: CPU topology, caches, NUMA nodes.

use super::{mask_string, EmulateError, Tree};
use crate::topology::desc::{HostDesc, Layout, LayoutCpu};
use crate::topology::CpuSet;

const CPU: &str = "devices/system/cpu";
const NODE: &str = "devices/system/node";

/// CPU-wide lists and, for every online CPU, its topology and cache directories.
pub(super) fn write_cpus(t: &Tree, desc: &HostDesc, l: &Layout) -> Result<(), EmulateError> {
    let n = desc.total_cpus();
    let online: CpuSet = l.cpus.iter().filter(|c| c.online).map(|c| c.id).collect();
    let all: CpuSet = (0..n).collect();
    t.line(&format!("{CPU}/online"), online.to_list_string())?;
    t.line(
        &format!("{CPU}/offline"),
        desc.offline_set().to_list_string(),
    )?;
    t.line(&format!("{CPU}/present"), all.to_list_string())?;
    t.line(&format!("{CPU}/possible"), all.to_list_string())?;
    t.line(
        &format!("{CPU}/isolated"),
        desc.isolated_set().to_list_string(),
    )?;
    t.line(&format!("{CPU}/kernel_max"), 8191)?;
    for c in &l.cpus {
        let dir = format!("{CPU}/cpu{}", c.id);
        t.dir(&dir)?;
        // The boot CPU has no `online` file on x86: it cannot be unplugged.
        if c.id != 0 {
            t.line(&format!("{dir}/online"), u8::from(c.online))?;
        }
        if !c.online {
            // The kernel removes topology and cache directories of offline CPUs.
            continue;
        }
        t.link(
            &format!("{dir}/node{}", c.node),
            &format!("{NODE}/node{}", c.node),
        )?;
        write_topology(t, &dir, c, l, n)?;
        write_caches(t, &dir, c, l, desc, n)?;
    }
    Ok(())
}

fn write_topology(
    t: &Tree,
    dir: &str,
    c: &LayoutCpu,
    l: &Layout,
    n: u32,
) -> Result<(), EmulateError> {
    let top = format!("{dir}/topology");
    let threads = l.thread_siblings(c);
    let package = l.package_cpus(c.package);
    t.line(&format!("{top}/physical_package_id"), c.package)?;
    t.line(&format!("{top}/die_id"), 0)?;
    t.line(&format!("{top}/core_id"), c.core_id)?;
    t.line(&format!("{top}/cluster_id"), c.core_index)?;
    for (names, set) in [
        (["thread_siblings", "core_cpus", "cluster_cpus"], &threads),
        (["core_siblings", "package_cpus", "die_cpus"], &package),
    ] {
        for name in names {
            t.line(&format!("{top}/{name}"), mask_string(set, n))?;
            t.line(&format!("{top}/{name}_list"), set.to_list_string())?;
        }
    }
    Ok(())
}

fn write_caches(
    t: &Tree,
    dir: &str,
    c: &LayoutCpu,
    l: &Layout,
    desc: &HostDesc,
    n: u32,
) -> Result<(), EmulateError> {
    let threads = l.thread_siblings(c);
    let l3 = l.l3_siblings(c);
    let cores_per_l3 = (desc.cores_per_numa / desc.l3_per_numa.max(1)).max(1);
    // Sizes in KiB, ways: Sapphire-Rapids-like per-core caches; L3 of 2 MiB per core.
    let caches = [
        (1, "Data", 48, 12, &threads, c.core_index),
        (1, "Instruction", 32, 8, &threads, c.core_index),
        (2, "Unified", 2048, 16, &threads, c.core_index),
        (3, "Unified", 2048 * cores_per_l3, 16, &l3, c.l3_index),
    ];
    for (i, (level, kind, kib, ways, shared, id)) in caches.into_iter().enumerate() {
        let d = format!("{dir}/cache/index{i}");
        t.line(&format!("{d}/level"), level)?;
        t.line(&format!("{d}/type"), kind)?;
        t.line(&format!("{d}/size"), format!("{kib}K"))?;
        t.line(&format!("{d}/ways_of_associativity"), ways)?;
        t.line(&format!("{d}/coherency_line_size"), 64)?;
        t.line(&format!("{d}/physical_line_partition"), 1)?;
        t.line(&format!("{d}/number_of_sets"), kib * 1024 / 64 / ways)?;
        t.line(&format!("{d}/id"), id)?;
        t.line(&format!("{d}/shared_cpu_map"), mask_string(shared, n))?;
        t.line(&format!("{d}/shared_cpu_list"), shared.to_list_string())?;
    }
    Ok(())
}

/// Node lists and every node's CPUs, memory, distances and huge pages.
pub(super) fn write_nodes(t: &Tree, l: &Layout) -> Result<(), EmulateError> {
    let ncpus = l.cpus.len() as u32;
    let all: CpuSet = l.nodes.iter().map(|n| n.id).collect();
    let with_cpu: CpuSet = l
        .nodes
        .iter()
        .filter(|n| !n.cpus.is_empty())
        .map(|n| n.id)
        .collect();
    let with_mem: CpuSet = l
        .nodes
        .iter()
        .filter(|n| n.memory_bytes > 0)
        .map(|n| n.id)
        .collect();
    t.line(&format!("{NODE}/online"), all.to_list_string())?;
    t.line(&format!("{NODE}/possible"), all.to_list_string())?;
    t.line(&format!("{NODE}/has_cpu"), with_cpu.to_list_string())?;
    t.line(&format!("{NODE}/has_memory"), with_mem.to_list_string())?;
    t.line(
        &format!("{NODE}/has_normal_memory"),
        with_mem.to_list_string(),
    )?;
    for node in &l.nodes {
        let dir = format!("{NODE}/node{}", node.id);
        t.line(&format!("{dir}/cpumap"), mask_string(&node.cpus, ncpus))?;
        t.line(&format!("{dir}/cpulist"), node.cpus.to_list_string())?;
        let dist: Vec<String> = node.distances.iter().map(u32::to_string).collect();
        t.line(&format!("{dir}/distance"), dist.join(" "))?;
        for cpu in node.cpus.iter() {
            t.link(&format!("{dir}/cpu{cpu}"), &format!("{CPU}/cpu{cpu}"))?;
        }
        let total_kb = node.memory_bytes / 1024;
        let huge_kb = node.hugepages_2m * 2048;
        let free_kb = total_kb.saturating_sub(huge_kb);
        let id = node.id;
        let meminfo = [
            ("MemTotal", total_kb),
            ("MemFree", free_kb),
            ("MemUsed", total_kb - free_kb),
        ]
        .iter()
        .map(|(k, v)| format!("Node {id} {:<16}{v:>8} kB\n", format!("{k}:")))
        .chain([
            format!("Node {id} HugePages_Total: {:>5}\n", node.hugepages_2m),
            format!("Node {id} HugePages_Free:  {:>5}\n", node.hugepages_2m),
            format!("Node {id} HugePages_Surp:  {:>5}\n", 0),
        ])
        .collect::<String>();
        t.bytes(&format!("{dir}/meminfo"), meminfo.as_bytes())?;
        for (size, count) in [(2048u64, node.hugepages_2m), (1_048_576, 0)] {
            let h = format!("{dir}/hugepages/hugepages-{size}kB");
            t.line(&format!("{h}/nr_hugepages"), count)?;
            t.line(&format!("{h}/free_hugepages"), count)?;
            t.line(&format!("{h}/surplus_hugepages"), 0)?;
        }
    }
    Ok(())
}
