//! Distance matrices of an hwloc XML capture: the NUMA latency matrix and the NVLink bandwidth
//! matrix (turned into link counts per GPU pair).

use std::collections::HashMap;

use roxmltree::Node;

use super::Walk;
use crate::topology::desc::MAX_NVLINKS;
use crate::topology::model::{GpuLinks, NumaNode, Topology};

/// All u64 values of a distances element, in order (hwloc splits long rows over elements).
fn values(node: Node) -> Vec<u64> {
    node.children()
        .filter(|c| c.has_tag_name("u64values"))
        .flat_map(|c| {
            c.text()
                .unwrap_or("")
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
        })
        .collect()
}

fn indexes(node: Node) -> Vec<String> {
    node.children()
        .filter(|c| c.has_tag_name("indexes"))
        .flat_map(|c| {
            c.text()
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_string)
        })
        .collect()
}

/// The NUMA latency matrix (`distances2 type="NUMANode"`), in `nodes` order.
pub(super) fn numa_distances(topology: Option<Node>, nodes: &[NumaNode]) -> Vec<Vec<u32>> {
    let Some(topology) = topology else {
        return Vec::new();
    };
    let Some(d) = topology.children().find(|c| {
        c.has_tag_name("distances2")
            && c.attribute("type") == Some("NUMANode")
            && c.attribute("name").map_or(true, |n| n == "NUMALatency")
    }) else {
        return Vec::new();
    };
    let idx: Vec<u32> = indexes(d).iter().filter_map(|s| s.parse().ok()).collect();
    let vals = values(d);
    let n = idx.len();
    if n == 0 || vals.len() != n * n || d.attribute("indexing") == Some("gp") {
        return Vec::new();
    }
    let pos: HashMap<u32, usize> = idx.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    nodes
        .iter()
        .map(|a| {
            nodes
                .iter()
                .map(|b| match (pos.get(&a.id), pos.get(&b.id)) {
                    (Some(i), Some(j)) => u32::try_from(vals[i * n + j]).unwrap_or(u32::MAX),
                    _ if a.id == b.id => 10,
                    _ => 20,
                })
                .collect()
        })
        .collect()
}

/// NVLink link counts per GPU pair from the `NVLinkBandwidth` matrix (MB/s per direction; hwloc
/// adds 20000 per NVLink 1 link and 25000 per later link). GPUs wired to NVSwitch peers reach each
/// other through the switch with as many links as the less-connected side has.
pub(super) fn nvlink(root: Node, walk: &Walk, topo: &Topology) -> Option<GpuLinks> {
    let d = root.children().find(|c| {
        (c.has_tag_name("distances2hetero") || c.has_tag_name("distances2"))
            && c.attribute("name") == Some("NVLinkBandwidth")
    })?;
    let idx = indexes(d);
    let vals = values(d);
    let n = idx.len();
    if n == 0 || vals.len() != n * n {
        return None;
    }
    // Each index is "Type:gp_index" (hetero) or a bare gp_index of an OSDev.
    let gpu_pos = |gp: &str| -> Option<usize> {
        let bus = &walk.osdevs.iter().find(|o| o.gp_index == gp)?.pci;
        topo.gpus.iter().position(|g| &g.pci_bus_id == bus)
    };
    let peers: Vec<(Option<usize>, bool)> = idx
        .iter()
        .map(|s| {
            let (ty, gp) = s.split_once(':').unwrap_or(("OSDev", s));
            match ty {
                "OSDev" => (gpu_pos(gp), false),
                "PCIDev" => (None, walk.pci_gp.contains_key(gp)),
                _ => (None, false),
            }
        })
        .collect();
    let off_diag: Vec<u64> = (0..n)
        .flat_map(|i| (0..n).filter(move |j| *j != i).map(move |j| (i, j)))
        .map(|(i, j)| vals[i * n + j])
        .filter(|v| *v > 0)
        .collect();
    let per_link = if off_diag.iter().all(|v| v % 25000 == 0) {
        25000
    } else if off_diag.iter().all(|v| v % 20000 == 0) {
        20000
    } else {
        off_diag.iter().copied().min().unwrap_or(25000)
    };
    let g = topo.gpus.len();
    let mut links = vec![vec![0u32; g]; g];
    let mut to_switch = vec![0u32; g];
    for i in 0..n {
        let Some(a) = peers[i].0 else { continue };
        for j in 0..n {
            // No GPU has more than MAX_NVLINKS links: larger counts are a capture's noise.
            let count = u32::try_from(vals[i * n + j] / per_link)
                .unwrap_or(0)
                .min(MAX_NVLINKS);
            if i == j || count == 0 {
                continue;
            }
            match peers[j] {
                (Some(b), _) if b != a => links[a][b] = links[a][b].max(count),
                (None, true) => to_switch[a] = to_switch[a].saturating_add(count),
                _ => {}
            }
        }
    }
    let nvswitch = to_switch.iter().any(|c| *c > 0);
    if nvswitch {
        for a in 0..g {
            for b in 0..g {
                if a != b && to_switch[a] > 0 && to_switch[b] > 0 {
                    links[a][b] = links[a][b].max(to_switch[a].min(to_switch[b]));
                }
            }
        }
    }
    Some(GpuLinks {
        nvlink: links,
        nvswitch,
    })
}
