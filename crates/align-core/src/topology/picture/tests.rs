//! Tests of the host picture.
use super::*;
use crate::topology::testing::shipped;

fn parse(svg: &str) -> roxmltree::Document<'_> {
    roxmltree::Document::parse(svg).expect("the picture is well-formed XML")
}

/// The `<title>` texts of the rectangles whose title starts with `prefix`.
fn titles(doc: &roxmltree::Document<'_>, prefix: &str) -> Vec<String> {
    doc.descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text())
        .filter(|t| t.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_shipped_host_draws_each_cpu_gpu_and_node_once() {
    for name in [
        "vm-2s4n",
        "dgx1-v100",
        "dgx-h100",
        "grace-hopper",
        "numa16-1024",
        "epyc-nps4",
    ] {
        let topo = shipped(name);
        let svg = render_svg(&topo, None);
        let doc = parse(&svg);
        assert_eq!(doc.root_element().tag_name().name(), "svg", "{name}");
        assert_eq!(
            titles(&doc, "CPU ").len(),
            topo.cpus.len(),
            "{name}: one cell per CPU"
        );
        assert_eq!(
            titles(&doc, "GPU").len(),
            topo.gpus.len(),
            "{name}: one box per GPU"
        );
        assert_eq!(
            titles(&doc, "NUMA node ").len(),
            topo.numa_nodes.len(),
            "{name}: one box per node, memory-only ones included"
        );
        assert_eq!(
            svg,
            render_svg(&topo, None),
            "{name}: the same host draws the same bytes"
        );
    }
}

#[test]
fn the_largest_host_stays_a_readable_size() {
    let topo = shipped("numa16-1024");
    let svg = render_svg(&topo, None);
    let doc = parse(&svg);
    let size = |attr| -> u32 {
        doc.root_element()
            .attribute(attr)
            .and_then(|v| v.parse().ok())
            .expect("size")
    };
    // Four NUMA nodes a row and cells of 26 px: wide, but a screen or two, never a strip.
    assert!(size("width") <= 2200, "width {}", size("width"));
    assert!(size("height") <= 4000, "height {}", size("height"));
}

#[test]
fn an_overlay_colours_what_each_holder_has_and_names_it_in_the_legend() {
    let topo = shipped("dgx1-v100");
    let gpu = topo.gpus[2].pci_bus_id.clone();
    let node = topo.gpus[2].numa_node.expect("node");
    let cpus: CpuSet = topo.node(node).expect("node").cpus.iter().take(2).collect();
    let overlay = Overlay {
        holders: vec![Holder {
            label: "ml/train-<0>/cuda & co".into(),
            detail: "single-numa-node".into(),
            cpus: cpus.clone(),
            mems: [node].into_iter().collect(),
            gpus: vec![gpu.clone()],
            nics: vec![],
        }],
        shared: topo.online_cpus().difference(&cpus),
        reserved: CpuSet::new(),
    };
    let svg = render_svg(&topo, Some(&overlay));
    let doc = parse(&svg);
    let label = "ml/train-<0>/cuda & co";
    for cpu in cpus.iter() {
        let cell = doc
            .descendants()
            .find(|n| {
                n.has_tag_name("rect")
                    && n.children()
                        .any(|t| t.text() == Some(&format!("CPU {cpu}: {label}")))
            })
            .expect("the held CPU's cell");
        assert_eq!(cell.attribute("fill"), Some(PALETTE[0]));
    }
    assert_eq!(
        titles(&doc, &format!("memory of node {node}: {label}")).len(),
        1
    );
    assert_eq!(
        titles(&doc, "GPU2 ")
            .iter()
            .filter(|t| t.ends_with(label))
            .count(),
        1
    );
    let legend = doc
        .descendants()
        .find(|n| n.attribute("id") == Some("legend"))
        .expect("legend");
    let text: String = legend.descendants().filter_map(|n| n.text()).collect();
    assert!(text.contains(label), "{text}");
    assert!(text.contains("shared pool"), "{text}");
    // Every other CPU is in the shared pool.
    let shared = titles(&doc, "CPU ")
        .iter()
        .filter(|t| t.ends_with("shared pool"))
        .count();
    assert_eq!(shared, topo.cpus.len() - cpus.len());
}

#[test]
fn names_from_outside_cannot_break_the_document() {
    let topo = shipped("vm-2s4n");
    let overlay = Overlay {
        holders: vec![Holder {
            label: "a\"b'</text><script>x</script>\u{1}".into(),
            ..Holder::default()
        }],
        ..Overlay::default()
    };
    let svg = render_svg(&topo, Some(&overlay));
    let doc = parse(&svg);
    assert!(doc.descendants().all(|n| !n.has_tag_name("script")));
}

#[test]
fn the_live_hosts_picture_is_titled_as_such() {
    assert_eq!(title("/"), "Machine: this host (read from /sys)");
    assert_eq!(title("dgx-h100"), "Machine: dgx-h100");
    assert_eq!(title("/tmp/fake-root"), "Machine: /tmp/fake-root");
}
