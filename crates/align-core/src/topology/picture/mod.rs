//! The host as a picture (`nri-align topology --svg`, `nri-align placements --svg`): packages,
//! NUMA nodes with their memory, L3 groups, cores and their threads, GPUs and NICs under their
//! PCIe switches, memory-only nodes and the GPU interconnect, drawn as lstopo draws a machine;
//! with an [`Overlay`], each container's CPUs, memory nodes, GPUs and NICs in its own colour,
//! the shared pool, reserved, isolated and offline CPUs, and a legend naming the containers.
//!
//! Plain SVG text, no dependency: the output is deterministic (the same host and overlay give
//! the same bytes), so it can be diffed and tested. Every element a reader may wonder about
//! carries a `<title>` (a browser shows it on hover).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::idset::{CpuSet, NodeSet};
use super::model::{GpuLinks, Topology};
use super::report::gib;

mod devices;
use devices::{draw_devices, draw_links, draw_memory_only};

/// What holds which part of the host, drawn over the topology.
#[derive(Debug, Clone, Default)]
pub struct Overlay {
    /// Containers (or any holders), each in its own colour, in legend order.
    pub holders: Vec<Holder>,
    /// The shared pool: CPUs that containers without exclusive CPUs run on.
    pub shared: CpuSet,
    /// CPUs reserved for the system (never handed out).
    pub reserved: CpuSet,
}

/// One container's part of the host.
#[derive(Debug, Clone, Default)]
pub struct Holder {
    /// Legend name (`namespace/pod/container`).
    pub label: String,
    /// A short second legend column (policy, since when).
    pub detail: String,
    /// CPUs held exclusively (shared-pool containers hold none).
    pub cpus: CpuSet,
    /// Memory nodes (`cpuset.mems`).
    pub mems: NodeSet,
    /// GPUs by PCI bus id.
    pub gpus: Vec<String>,
    /// NICs by interface name.
    pub nics: Vec<String>,
}

const CELL_W: u32 = 26;
const CELL_H: u32 = 16;
const GAP: u32 = 4;
const PAD: u32 = 8;
const TITLE_H: u32 = 18;
/// Width inside a NUMA node box: eight two-thread cores a row.
const NODE_INNER_W: u32 = 8 * (2 * CELL_W + 2 * GAP) - GAP;
const NODE_W: u32 = NODE_INNER_W + 2 * PAD;
const NODES_PER_ROW: usize = 4;
const DEVICE_H: u32 = 18;

/// Fill colours of holders, cycled (a legend entry names each, so a repeat stays readable).
const PALETTE: [&str; 12] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#6b8e23", "#d37295", "#17becf",
];
const FREE: &str = "#ffffff";
const SHARED: &str = "#dbe9f6";
const RESERVED: &str = "#9e9e9e";
const ISOLATED_STROKE: &str = "#7b1fa2";

/// The SVG document for `topo`, with `overlay` drawn over it when given.
pub fn render_svg(topo: &Topology, overlay: Option<&Overlay>) -> String {
    let mut body = String::new();
    let mut y = PAD + 24;
    let mut width = 0;
    for (package, nodes) in nodes_by_package(topo) {
        let (w, h) = draw_package(&mut body, topo, overlay, package, &nodes, PAD, y);
        width = width.max(w);
        y += h + GAP * 2;
    }
    let (w, h) = draw_memory_only(&mut body, topo, overlay, PAD, y);
    width = width.max(w);
    y += h;
    // Drawn only where there is something to show: a matrix of dashes says nothing.
    let any_link = |l: &&GpuLinks| l.nvswitch || l.nvlink.iter().flatten().any(|&n| n > 0);
    if let Some(links) = topo.gpu_links.as_ref().filter(any_link) {
        let (w, h) = draw_links(&mut body, topo, links, PAD, y);
        width = width.max(w);
        y += h;
    }
    let (w, h) = draw_legend(&mut body, topo, overlay, PAD, y);
    width = width.max(w).max(400) + 2 * PAD;
    let height = y + h + PAD;
    let mut out = String::with_capacity(body.len() + 512);
    let _ = write!(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"10\">\n\
         <rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#fafafa\"/>\n"
    );
    text(&mut out, PAD, PAD + 14, 14, "bold", &title(&topo.source));
    out.push_str(&body);
    out.push_str("</svg>\n");
    out
}

/// The picture's title: the host description's name or file, or for a host read from its
/// sysfs, the root it was read under (`/` alone says nothing: the live host).
fn title(source: &str) -> String {
    match source {
        "/" | "" => "Machine: this host (read from /sys)".to_string(),
        s => format!("Machine: {s}"),
    }
}

/// Nodes with CPUs grouped by the package of their first CPU, both in id order.
fn nodes_by_package(topo: &Topology) -> BTreeMap<u32, Vec<u32>> {
    let mut by: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for n in topo.numa_nodes.iter().filter(|n| !n.is_memory_only()) {
        let package = n
            .cpus
            .first()
            .and_then(|id| topo.cpus.iter().find(|c| c.id == id))
            .map_or(0, |c| c.package);
        by.entry(package).or_default().push(n.id);
    }
    by
}

/// Draws one package box at (x, y) and returns its size.
fn draw_package(
    out: &mut String,
    topo: &Topology,
    overlay: Option<&Overlay>,
    package: u32,
    nodes: &[u32],
    x: u32,
    y: u32,
) -> (u32, u32) {
    let mut inner = String::new();
    let mut row_y = y + TITLE_H + PAD;
    let mut width = 0;
    for row in nodes.chunks(NODES_PER_ROW) {
        let mut row_h = 0;
        for (i, &node) in row.iter().enumerate() {
            let nx = x + PAD + i as u32 * (NODE_W + GAP * 2);
            row_h = row_h.max(draw_node(&mut inner, topo, overlay, node, nx, row_y));
        }
        width = width.max(row.len() as u32 * (NODE_W + GAP * 2) - GAP * 2 + 2 * PAD);
        row_y += row_h + GAP * 2;
    }
    let height = row_y - y + PAD - GAP * 2;
    rect(out, (x, y, width, height), "#eeeeee", "#555555", "");
    text(
        out,
        x + PAD,
        y + 14,
        12,
        "bold",
        &format!("Package {package}"),
    );
    out.push_str(&inner);
    (width, height)
}

/// Draws one NUMA node with CPUs at (x, y) and returns its height.
fn draw_node(
    out: &mut String,
    topo: &Topology,
    overlay: Option<&Overlay>,
    id: u32,
    x: u32,
    y: u32,
) -> u32 {
    let Some(node) = topo.node(id) else {
        return 0;
    };
    let mut inner = String::new();
    let mut cy = y + TITLE_H + GAP;
    // L3 groups (one unnamed group where the host reports no caches), each a box of cores.
    let mut groups: BTreeMap<Option<u32>, Vec<Vec<u32>>> = BTreeMap::new();
    let mut seen = CpuSet::new();
    for cpu in topo.cpus.iter().filter(|c| node.cpus.contains(c.id)) {
        if seen.contains(cpu.id) {
            continue;
        }
        let threads: Vec<u32> = cpu
            .thread_siblings
            .iter()
            .filter(|t| node.cpus.contains(*t))
            .chain(std::iter::once(cpu.id))
            .collect::<CpuSet>()
            .iter()
            .collect();
        threads.iter().for_each(|t| {
            seen.insert(*t);
        });
        groups.entry(cpu.l3_group).or_default().push(threads);
    }
    for (l3, cores) in &groups {
        let h = draw_cores(&mut inner, topo, overlay, l3.is_some(), cores, x + PAD, cy);
        cy += h + GAP;
    }
    cy += draw_devices(&mut inner, topo, overlay, id, x + PAD, cy);
    let height = cy - y + PAD - GAP;
    let title = format!(
        "NUMA node {id}: CPUs {}, {}",
        node.cpus,
        gib(node.memory_bytes)
    );
    rect(out, (x, y, NODE_W, height), "#f5f5dc", "#8b8b5a", &title);
    text(
        out,
        x + PAD,
        y + 13,
        11,
        "bold",
        &format!("NUMA node {id} ({})", gib(node.memory_bytes)),
    );
    memory_chips(out, overlay, id, x + NODE_W - PAD, y + 4);
    out.push_str(&inner);
    height
}

/// Draws the cores of one L3 group (a labelled box when the host names its caches) and
/// returns the height used.
fn draw_cores(
    out: &mut String,
    topo: &Topology,
    overlay: Option<&Overlay>,
    boxed: bool,
    cores: &[Vec<u32>],
    x: u32,
    y: u32,
) -> u32 {
    let label_h = if boxed { 14 } else { 0 };
    let (mut cx, mut cy) = (x + GAP, y + label_h + GAP);
    let mut inner = String::new();
    for threads in cores {
        let w = threads.len() as u32 * CELL_W + 2 * 2;
        if cx + w > x + NODE_INNER_W {
            cx = x + GAP;
            cy += CELL_H + 4 + GAP;
        }
        rect(
            &mut inner,
            (cx, cy, w, CELL_H + 4),
            "#d0d0d0",
            "#808080",
            "",
        );
        for (i, &cpu) in threads.iter().enumerate() {
            cpu_cell(
                &mut inner,
                topo,
                overlay,
                cpu,
                cx + 2 + i as u32 * CELL_W,
                cy + 2,
            );
        }
        cx += w + GAP;
    }
    let height = cy + CELL_H + 4 + GAP - y;
    if boxed {
        rect(out, (x, y, NODE_INNER_W, height), "#ffffff", "#b0b0b0", "");
        text(out, x + GAP, y + 11, 9, "normal", "L3");
    }
    out.push_str(&inner);
    height
}

/// One hardware thread, filled by who holds it.
fn cpu_cell(
    out: &mut String,
    topo: &Topology,
    overlay: Option<&Overlay>,
    cpu: u32,
    x: u32,
    y: u32,
) {
    let holder = overlay.and_then(|o| o.holders.iter().position(|h| h.cpus.contains(cpu)));
    let (fill, what) = match (holder, overlay) {
        (Some(i), Some(o)) => (PALETTE[i % PALETTE.len()], o.holders[i].label.clone()),
        (None, Some(o)) if o.reserved.contains(cpu) => (RESERVED, "reserved".to_string()),
        (None, Some(o)) if o.shared.contains(cpu) => (SHARED, "shared pool".to_string()),
        _ => (FREE, "free".to_string()),
    };
    let isolated = topo.isolated_cpus.contains(cpu);
    let stroke = if isolated { ISOLATED_STROKE } else { "#606060" };
    let title = format!(
        "CPU {cpu}: {what}{}",
        if isolated { " (isolated)" } else { "" }
    );
    rect(out, (x, y, CELL_W - 2, CELL_H), fill, stroke, &title);
    let ink = if holder.is_some() {
        "#ffffff"
    } else {
        "#000000"
    };
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\" fill=\"{ink}\">{cpu}</text>",
        x + (CELL_W - 2) / 2,
        y + 12
    );
}

/// Small squares in the colours of the holders whose memory nodes include `node`, right-aligned
/// ending at `right`.
fn memory_chips(out: &mut String, overlay: Option<&Overlay>, node: u32, right: u32, y: u32) {
    let Some(o) = overlay else { return };
    let users: Vec<usize> = (0..o.holders.len())
        .filter(|&i| o.holders[i].mems.contains(node))
        .collect();
    for (k, &i) in users.iter().rev().enumerate() {
        let x = right.saturating_sub((k as u32 + 1) * 12);
        let title = format!("memory of node {node}: {}", o.holders[i].label);
        rect(
            out,
            (x, y, 10, 10),
            PALETTE[i % PALETTE.len()],
            "#404040",
            &title,
        );
    }
}

/// The legend: what each fill means, then one line per holder; returns the size used.
fn draw_legend(
    out: &mut String,
    topo: &Topology,
    overlay: Option<&Overlay>,
    x: u32,
    y: u32,
) -> (u32, u32) {
    let mut entries: Vec<(String, String, &str)> = vec![("free CPU".into(), String::new(), FREE)];
    if let Some(o) = overlay {
        entries.push((
            format!("shared pool ({})", list_or_none(&o.shared)),
            String::new(),
            SHARED,
        ));
        entries.push((
            format!("reserved ({})", list_or_none(&o.reserved)),
            String::new(),
            RESERVED,
        ));
    }
    if !topo.isolated_cpus.is_empty() {
        entries.push((
            format!("isolated, outlined ({})", topo.isolated_cpus),
            String::new(),
            ISOLATED_STROKE,
        ));
    }
    if !topo.offline_cpus.is_empty() {
        entries.push((
            format!("offline, not drawn ({})", topo.offline_cpus),
            String::new(),
            "#000000",
        ));
    }
    if let Some(o) = overlay {
        for (i, h) in o.holders.iter().enumerate() {
            entries.push((
                h.label.clone(),
                h.detail.clone(),
                PALETTE[i % PALETTE.len()],
            ));
        }
    }
    let height = TITLE_H + entries.len() as u32 * 16 + PAD;
    let width = 2 * PAD
        + entries
            .iter()
            .map(|(l, d, _)| 20 + 6 * (l.chars().count() + d.chars().count()) as u32 + 24)
            .max()
            .unwrap_or(0);
    let _ = writeln!(out, "<g id=\"legend\">");
    text(out, x, y + 13, 12, "bold", "Legend");
    for (k, (label, detail, colour)) in entries.iter().enumerate() {
        let ly = y + TITLE_H + k as u32 * 16;
        rect(out, (x, ly, 12, 12), colour, "#404040", "");
        let line = if detail.is_empty() {
            label.clone()
        } else {
            format!("{label}  {detail}")
        };
        text(out, x + 18, ly + 10, 10, "normal", &line);
    }
    out.push_str("</g>\n");
    (width, height)
}

fn list_or_none(set: &CpuSet) -> String {
    if set.is_empty() {
        "none".into()
    } else {
        set.to_string()
    }
}

/// A rectangle at `(x, y)` of `w` x `h`, with a hover title when `title` is not empty.
fn rect(
    out: &mut String,
    (x, y, w, h): (u32, u32, u32, u32),
    fill: &str,
    stroke: &str,
    title: &str,
) {
    let _ = write!(
        out,
        "<rect x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"{h}\" fill=\"{fill}\" stroke=\"{stroke}\""
    );
    if title.is_empty() {
        out.push_str("/>\n");
    } else {
        let _ = writeln!(out, "><title>{}</title></rect>", escape(title));
    }
}

fn text(out: &mut String, x: u32, y: u32, size: u32, weight: &str, s: &str) {
    let _ = writeln!(
        out,
        "<text x=\"{x}\" y=\"{y}\" font-size=\"{size}\" font-weight=\"{weight}\">{}</text>",
        escape(s)
    );
}

/// `s` with the five XML special characters escaped (names come from pods and annotations).
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0 text.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests;
