//! `proc/` (cpuinfo, meminfo, the NVIDIA driver's per-GPU information) and the list of device
//! nodes an end-to-end test creates for the emulated host.

use serde::Serialize;

use super::pci::{UVERBS_MAJOR, UVERBS_MINOR_BASE};
use super::{EmulateError, Tree};
use crate::topology::desc::{gpu_uuid, HostDesc, Layout};

/// Character major of `/dev/nvidiaN` and `/dev/nvidiactl`.
pub const NVIDIA_MAJOR: u32 = 195;

/// One device node to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DevNode {
    /// Absolute path (`/dev/nvidia0`).
    pub path: String,
    /// `c` (character device).
    pub kind: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

/// Device nodes of the host's GPUs and RDMA devices.
pub(super) fn dev_nodes(desc: &HostDesc) -> Vec<DevNode> {
    let c = |path: String, major, minor| DevNode {
        path,
        kind: "c".into(),
        major,
        minor,
    };
    let mut out: Vec<DevNode> = (0..desc.gpus.len() as u32)
        .map(|i| c(format!("/dev/nvidia{i}"), NVIDIA_MAJOR, i))
        .collect();
    if !desc.gpus.is_empty() {
        out.push(c("/dev/nvidiactl".into(), NVIDIA_MAJOR, 255));
    }
    let rdma = desc.nics.iter().filter(|n| n.rdma.is_some()).count() as u32;
    out.extend((0..rdma).map(|i| {
        c(
            format!("/dev/infiniband/uverbs{i}"),
            UVERBS_MAJOR,
            UVERBS_MINOR_BASE + i,
        )
    }));
    out
}

/// cpuinfo for online CPUs, meminfo, and `driver/nvidia/gpus/<bus id>/information`.
pub(super) fn write_proc(t: &Tree, desc: &HostDesc, l: &Layout) -> Result<(), EmulateError> {
    let mut cpuinfo = String::new();
    for c in l.cpus.iter().filter(|c| c.online) {
        let siblings = l.package_cpus(c.package).len();
        let cores = desc.cores_per_numa * desc.numa_per_socket;
        cpuinfo.push_str(&format!(
            "processor\t: {}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n\
             model name\t: {}\nstepping\t: 8\ncpu MHz\t\t: 2000.000\ncache size\t: {} KB\n\
             physical id\t: {}\nsiblings\t: {siblings}\ncore id\t\t: {}\ncpu cores\t: {cores}\n\
             apicid\t\t: {}\ninitial apicid\t: {}\nfpu\t\t: yes\nflags\t\t: fpu vme de pse \
             tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 \
             ht syscall nx lm constant_tsc nopl xtopology\nbogomips\t: 4000.00\n\
             clflush size\t: 64\ncache_alignment\t: 64\naddress sizes\t: 46 bits physical, \
             57 bits virtual\npower management:\n\n",
            c.id,
            desc.cpu_model,
            2048 * (desc.cores_per_numa / desc.l3_per_numa.max(1)),
            c.package,
            c.core_id,
            c.id,
            c.id,
        ));
    }
    t.bytes("cpuinfo", cpuinfo.as_bytes())?;
    let total_kb: u64 = l.nodes.iter().map(|n| n.memory_bytes / 1024).sum();
    let huge: u64 = l.nodes.iter().map(|n| n.hugepages_2m).sum();
    let free_kb = total_kb.saturating_sub(huge * 2048);
    let meminfo = format!(
        "MemTotal:       {total_kb:>8} kB\nMemFree:        {free_kb:>8} kB\n\
         MemAvailable:   {free_kb:>8} kB\nHugePages_Total: {huge:>5}\nHugePages_Free:  {huge:>5}\n\
         HugePages_Rsvd:      0\nHugePages_Surp:      0\nHugepagesize:       2048 kB\n"
    );
    t.bytes("meminfo", meminfo.as_bytes())?;
    for (g, &fi) in l.gpu_funcs.iter().enumerate() {
        let bus = &l.funcs[fi].bus_id;
        let info = format!(
            "Model: \t\t {}\nIRQ:   \t\t {}\nGPU UUID: \t {}\nVideo BIOS: \t 96.00.74.00.01\n\
             Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n\
             Bus Location: \t {bus}\nDevice Minor: \t {g}\nGPU Excluded:\t No\n",
            desc.gpus[g].name,
            100 + g,
            gpu_uuid(desc, g),
        );
        t.bytes(
            &format!("driver/nvidia/gpus/{bus}/information"),
            info.as_bytes(),
        )?;
        if let Some(node) = desc.gpus[g].memory_node {
            // Coherent GPU memory onlined as a NUMA node (Grace Hopper); hwloc reads this.
            let status = format!("Node: {node}\nStatus: online\n");
            t.bytes(
                &format!("driver/nvidia/gpus/{bus}/numa_status"),
                status.as_bytes(),
            )?;
        }
    }
    Ok(())
}
