//! `nri-align topology --gpu-facts`: what nri-align read of the GPUs, one fact a line, in the
//! form `hack/gpu-check` also derives from `nvidia-smi -q -x` and `nvidia-smi topo -m`, so the
//! two can be compared line by line on a real GPU host.
//!
//! ```text
//! gpus 2
//! gpu0 bus 0000:18:00.0
//! gpu0 uuid GPU-...
//! gpu0 minor 0
//! gpu0 numa 0
//! gpu0 mig disabled
//! gpu0 mig-devices 0
//! nvlink gpu0 gpu1 18
//! ```
//!
//! `numa` is the node of the GPU's PCI function (what `topo -m` shows as "NUMA Affinity"),
//! `unknown` where there is none; `mig` is `enabled`, `disabled` or `unknown` (no NVML, or a
//! GPU without MIG); `nvlink` is the number of NVLinks between a pair (`NV#` of `topo -m`; on
//! NVSwitch systems the links into the fabric, as NVIDIA counts them), 0 when there are none.

use std::fmt::Write as _;

use crate::topology::Topology;

/// The GPU facts of `topo`, one a line, GPUs in NVML index order.
pub fn render(topo: &Topology) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "gpus {}", topo.gpus.len());
    for g in &topo.gpus {
        let i = g.index;
        let _ = writeln!(out, "gpu{i} bus {}", g.pci_bus_id);
        if let Some(uuid) = &g.uuid {
            let _ = writeln!(out, "gpu{i} uuid {uuid}");
        }
        if let Some(minor) = g.minor {
            let _ = writeln!(out, "gpu{i} minor {minor}");
        }
        let numa = g.numa_node.map_or("unknown".to_string(), |n| n.to_string());
        let _ = writeln!(out, "gpu{i} numa {numa}");
        let mig = match g.mig_enabled {
            Some(true) => "enabled",
            Some(false) => "disabled",
            None => "unknown",
        };
        let _ = writeln!(out, "gpu{i} mig {mig}");
        let _ = writeln!(out, "gpu{i} mig-devices {}", g.mig_devices.len());
    }
    let links = topo.gpu_links.as_ref();
    for (a, ga) in topo.gpus.iter().enumerate() {
        for (b, gb) in topo.gpus.iter().enumerate().skip(a + 1) {
            let n = links
                .and_then(|l| l.nvlink.get(a).and_then(|r| r.get(b)))
                .copied()
                .unwrap_or(0);
            let _ = writeln!(out, "nvlink gpu{} gpu{} {n}", ga.index, gb.index);
        }
    }
    out
}

#[cfg(test)]
#[path = "gpu_facts_tests.rs"]
mod tests;
