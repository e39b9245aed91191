//! The importer's bounds (`bounds.rs`) against hostile captures: nesting that would overflow a
//! recursive walk, ids and counts that would make the model allocate without end, and the
//! NVLink counts a capture may claim.

use super::*;

/// One NUMA node and one PU under `depth` nested Group objects.
fn nested(depth: usize) -> String {
    format!(
        r#"<topology version="2.0"><object type="Machine" os_index="0" cpuset="0x1"><object type="NUMANode" os_index="0" local_memory="1024"/>{}<object type="PU" os_index="0" cpuset="0x1"/>{}</object></topology>"#,
        r#"<object type="Group" cpuset="0x1">"#.repeat(depth),
        "</object>".repeat(depth)
    )
}

/// A Machine with one NUMA node, then `body`.
fn machine(body: &str) -> String {
    format!(
        r#"<topology version="2.0"><object type="Machine" os_index="0"><object type="NUMANode" os_index="0" local_memory="1024"/>{body}</object></topology>"#
    )
}

fn too_large(xml: &str) -> String {
    match import_str(xml, "hostile") {
        Err(err @ HwlocError::TooLarge(_)) => err.to_string(),
        Err(other) => panic!("expected TooLarge, got {other}"),
        Ok(t) => panic!("imported {} CPUs", t.cpus.len()),
    }
}

#[test]
fn objects_nested_ten_thousand_deep_are_refused_not_a_stack_overflow() {
    let err = too_large(&nested(10_000));
    assert!(err.contains("nested more than 256 deep"), "{err}");
    // Just inside the bound (root, Machine, groups, PU) the import walks it, recursion included,
    // on a test thread's 2 MiB stack in a debug build.
    let t = import_str(&nested(MAX_DEPTH - 3), "deep").expect("deep but within bounds");
    assert_eq!(t.cpus.len(), 1);
    too_large(&nested(MAX_DEPTH - 1));
}

#[test]
fn ids_and_counts_beyond_any_machine_are_refused_with_their_bound() {
    let pu = |id: &str| format!(r#"<object type="PU" os_index="{id}"/>"#);
    let err = too_large(&machine(&pu("4294967295")));
    assert!(
        err.contains("PU os_index 4294967295 is beyond the largest supported (16383)"),
        "{err}"
    );
    let err = too_large(&machine(&pu(&"9".repeat(1000))));
    assert!(
        err.contains("… (1000 bytes)"),
        "the id is echoed cut: {err}"
    );
    let err = too_large(&machine(r#"<object type="NUMANode" os_index="1024"/>"#));
    assert!(err.contains("NUMANode os_index 1024"), "{err}");

    // Unique ids below the bound cap the count already; objects without one count too.
    let many = r#"<object type="PU"/>"#.repeat(MAX_PUS as usize + 1);
    let err = too_large(&machine(&format!("{}{many}", pu("0"))));
    assert!(err.contains("more than 16384 PU objects"), "{err}");
    let nodes = r#"<object type="NUMANode"/>"#.repeat(MAX_NUMA_NODES as usize);
    let err = too_large(&machine(&format!("{nodes}{}", pu("0"))));
    assert!(err.contains("more than 1024 NUMANode objects"), "{err}");

    // 1025 NVIDIA GPUs: link tables are square in them.
    let gpus: String = (0..=MAX_GPUS)
        .map(|i| {
            format!(
                r#"<object type="PCIDev" pci_busid="0001:{:02x}:{:02x}.0" pci_type="0302 [10de:2330] [10de:16c1] a1 00"/>"#,
                i / 32,
                i % 32
            )
        })
        .collect();
    // A PU with its cpuset: the GPU count is checked once the import has its CPUs.
    let cpu = r#"<object type="PU" os_index="0" cpuset="0x1"/>"#;
    let err = too_large(&machine(&format!("{cpu}{gpus}")));
    assert!(
        err.contains("1025 NVIDIA GPUs, more than the 1024 supported"),
        "{err}"
    );
}

#[test]
fn the_same_cpu_or_node_twice_is_a_corrupt_capture() {
    let xml = machine(r#"<object type="PU" os_index="3"/><object type="PU" os_index="3"/>"#);
    let err = import_str(&xml, "dup")
        .expect_err("duplicate PU")
        .to_string();
    assert!(err.contains("two PU objects have os_index 3"), "{err}");
    let xml = machine(r#"<object type="NUMANode" os_index="0"/><object type="PU" os_index="0"/>"#);
    let err = import_str(&xml, "dup")
        .expect_err("duplicate node")
        .to_string();
    assert!(
        err.contains("two NUMANode objects have os_index 0"),
        "{err}"
    );
}

#[test]
fn a_huge_root_tag_is_named_by_its_start() {
    let tag = "t".repeat(100_000);
    let err = import_str(&format!("<{tag}/>"), "x")
        .expect_err("not hwloc")
        .to_string();
    assert!(err.len() < 200 && err.contains("(100000 bytes)"), "{err}");
}
