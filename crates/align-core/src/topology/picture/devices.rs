//! The devices part of the picture: each node's GPUs and NICs under their PCIe bridges, the
//! memory-only nodes, and the GPU interconnect table.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::super::model::{GpuLinks, Topology};
use super::super::report::gib;
use super::{
    escape, memory_chips, rect, text, Holder, Overlay, DEVICE_H, GAP, NODE_INNER_W, PAD, PALETTE,
    TITLE_H,
};

/// The GPUs and NICs of node `node`, grouped under their nearest PCIe bridge; returns the
/// height used.
pub(super) fn draw_devices(
    out: &mut String,
    topo: &Topology,
    overlay: Option<&Overlay>,
    node: u32,
    x: u32,
    y: u32,
) -> u32 {
    // (bridge, label, holder) per device, grouped by bridge.
    let mut groups: BTreeMap<String, Vec<(String, Option<usize>)>> = BTreeMap::new();
    let bridge_of = |bus: &str| {
        topo.pci_devices
            .iter()
            .find(|d| d.bus_id == bus)
            .map(|d| match d.bridges.as_slice() {
                // Downstream port, the switch's upstream port, ..., the root port: grouped by
                // the switch, as lstopo draws it.
                [_, upstream, _, ..] => format!("PCIe switch {upstream}"),
                [port, ..] => format!("PCIe port {port}"),
                [] => String::new(),
            })
            .unwrap_or_default()
    };
    let holder_of =
        |pred: &dyn Fn(&Holder) -> bool| overlay.and_then(|o| o.holders.iter().position(pred));
    for g in topo.gpus.iter().filter(|g| g.numa_node == Some(node)) {
        let mut label = format!("GPU{} {}", g.index, g.pci_bus_id);
        if let Some(name) = &g.name {
            let _ = write!(label, " {name}");
        }
        if g.mig_enabled == Some(true) {
            label.push_str(" [MIG]");
        }
        let holder = holder_of(&|h: &Holder| h.gpus.iter().any(|b| b == &g.pci_bus_id));
        groups
            .entry(bridge_of(&g.pci_bus_id))
            .or_default()
            .push((label, holder));
    }
    for n in topo.nics.iter().filter(|n| n.numa_node == Some(node)) {
        let mut label = format!("NIC {}", n.name);
        if let Some(rdma) = &n.rdma_device {
            let _ = write!(label, " ({rdma})");
        }
        let holder = holder_of(&|h: &Holder| h.nics.iter().any(|name| name == &n.name));
        let bridge = n.pci_bus_id.as_deref().map(bridge_of).unwrap_or_default();
        groups.entry(bridge).or_default().push((label, holder));
    }
    let mut cy = y;
    for (bridge, devices) in &groups {
        let h = 14 + devices.len() as u32 * (DEVICE_H + GAP) + GAP;
        let name = if bridge.is_empty() {
            "PCIe root complex".to_string()
        } else {
            bridge.clone()
        };
        rect(out, (x, cy, NODE_INNER_W, h), "#e8f0e8", "#6a8f6a", "");
        text(out, x + GAP, cy + 11, 9, "normal", &name);
        for (k, (label, holder)) in devices.iter().enumerate() {
            let dy = cy + 14 + k as u32 * (DEVICE_H + GAP);
            let (fill, ink, who) = match (holder, overlay) {
                (Some(i), Some(o)) => (
                    PALETTE[i % PALETTE.len()],
                    "#ffffff",
                    o.holders[*i].label.as_str(),
                ),
                _ => ("#ffffff", "#000000", "free"),
            };
            let title = if overlay.is_some() {
                format!("{label}: {who}")
            } else {
                label.clone()
            };
            rect(
                out,
                (x + GAP, dy, NODE_INNER_W - 2 * GAP, DEVICE_H),
                fill,
                "#406040",
                &title,
            );
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{}\" fill=\"{ink}\">{}</text>",
                x + 2 * GAP,
                dy + 13,
                escape(label)
            );
        }
        cy += h + GAP;
    }
    cy - y
}

/// Memory-only nodes (HBM, CXL, GPU memory) in one row; returns the size used.
pub(super) fn draw_memory_only(
    out: &mut String,
    topo: &Topology,
    overlay: Option<&Overlay>,
    x: u32,
    y: u32,
) -> (u32, u32) {
    let nodes: Vec<_> = topo
        .numa_nodes
        .iter()
        .filter(|n| n.is_memory_only())
        .collect();
    if nodes.is_empty() {
        return (0, 0);
    }
    const W: u32 = 150;
    const PER_ROW: usize = 8;
    let rows = nodes.len().div_ceil(PER_ROW) as u32;
    let width = 2 * PAD + PER_ROW.min(nodes.len()) as u32 * (W + GAP) - GAP;
    let height = TITLE_H + PAD + rows * (30 + GAP) + PAD;
    rect(out, (x, y, width, height), "#eeeeee", "#555555", "");
    text(out, x + PAD, y + 14, 12, "bold", "Memory-only nodes");
    for (k, n) in nodes.iter().enumerate() {
        let nx = x + PAD + (k % PER_ROW) as u32 * (W + GAP);
        let ny = y + TITLE_H + PAD + (k / PER_ROW) as u32 * (30 + GAP);
        let kind = n.memory_kind.as_deref().unwrap_or("memory");
        let title = format!("NUMA node {} ({kind}), {}", n.id, gib(n.memory_bytes));
        rect(out, (nx, ny, W, 30), "#f5f5dc", "#8b8b5a", &title);
        text(
            out,
            nx + GAP,
            ny + 12,
            10,
            "bold",
            &format!("NUMA node {}", n.id),
        );
        text(
            out,
            nx + GAP,
            ny + 25,
            9,
            "normal",
            &format!("{kind}, {}", gib(n.memory_bytes)),
        );
        memory_chips(out, overlay, n.id, nx + W - GAP, ny + 3);
    }
    (width, height + GAP * 2)
}

/// The GPU interconnect as `nvidia-smi topo -m` shows it: NVLink counts per pair, or one line
/// for NVSwitch; returns the size used.
pub(super) fn draw_links(
    out: &mut String,
    topo: &Topology,
    links: &GpuLinks,
    x: u32,
    y: u32,
) -> (u32, u32) {
    const C: u32 = 34;
    let n = topo.gpus.len() as u32;
    if links.nvswitch {
        let width = 420;
        rect(out, (x, y, width, 30), "#eeeeee", "#555555", "");
        text(
            out,
            x + PAD,
            y + 19,
            11,
            "bold",
            &format!("GPU interconnect: NVSwitch, all {n} GPUs all-to-all"),
        );
        return (width, 30 + GAP * 2);
    }
    let width = 2 * PAD + (n + 1) * C;
    let height = TITLE_H + PAD + (n + 1) * 18 + PAD;
    rect(out, (x, y, width, height), "#eeeeee", "#555555", "");
    text(
        out,
        x + PAD,
        y + 14,
        12,
        "bold",
        "GPU interconnect (NVLink links)",
    );
    let top = y + TITLE_H + PAD;
    for (i, g) in topo.gpus.iter().enumerate() {
        let i = i as u32;
        text(
            out,
            x + PAD + (i + 1) * C,
            top + 12,
            9,
            "bold",
            &format!("GPU{}", g.index),
        );
        text(
            out,
            x + PAD,
            top + (i + 1) * 18 + 12,
            9,
            "bold",
            &format!("GPU{}", g.index),
        );
    }
    for (i, row) in links.nvlink.iter().enumerate() {
        for (j, &count) in row.iter().enumerate() {
            let cell = match (i == j, count) {
                (true, _) => "X".to_string(),
                (false, 0) => "-".to_string(),
                (false, c) => format!("NV{c}"),
            };
            let cx = x + PAD + (j as u32 + 1) * C;
            let cy = top + (i as u32 + 1) * 18 + 12;
            text(out, cx, cy, 9, "normal", &cell);
        }
    }
    (width, height + GAP * 2)
}
