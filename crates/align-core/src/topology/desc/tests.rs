use super::*;

fn desc(extra: &str) -> Result<HostDesc, DescError> {
    let memory = if extra.contains("memory_per_numa") {
        ""
    } else {
        "memory_per_numa: 1Gi\n"
    };
    HostDesc::from_yaml(&format!(
        "name: t\nsockets: 2\nnuma_per_socket: 2\ncores_per_numa: 2\nthreads_per_core: 2\n\
             {memory}{extra}"
    ))
}

fn invalid(extra: &str) -> String {
    match desc(extra) {
        Err(DescError::Invalid { reason, .. }) => reason,
        other => panic!("expected invalid, got {other:?}"),
    }
}

#[test]
fn sizes_parse_with_binary_and_decimal_units() {
    assert_eq!(parse_size("512Gi"), Ok(512 << 30));
    assert_eq!(parse_size("2Ti"), Ok(2 << 40));
    assert_eq!(parse_size("96GiB"), Ok(96 << 30));
    assert_eq!(parse_size("480G"), Ok(480_000_000_000));
    assert_eq!(parse_size("4096"), Ok(4096));
    assert!(parse_size("12Xi").is_err());
    assert!(parse_size("Gi").is_err());
    assert!(parse_size("99999999999Ti").is_err());
}

#[test]
fn default_distances_follow_sockets_and_attachment() {
    let d = desc("memory_only_nodes: [{memory: 1Gi, kind: cxl, attached_to: 1}]\n").expect("valid");
    let m = d.distance_matrix();
    assert_eq!(m[0], vec![10, 12, 21, 21, 22]);
    assert_eq!(m[4], vec![22, 20, 31, 31, 10]);
}

#[test]
fn interleaved_numbering_puts_second_threads_after_all_cores() {
    let t = desc("").expect("valid").to_topology();
    assert_eq!(t.cpus.len(), 16);
    let cpu0 = &t.cpus[0];
    assert_eq!(cpu0.thread_siblings.to_list_string(), "0,8");
    assert_eq!(
        t.node(1).map(|n| n.cpus.to_list_string()),
        Some("2-3,10-11".into())
    );
    assert_eq!(t.cpus[4].package, 1);
    assert_eq!(t.cpus[4].core, 0);
}

#[test]
fn inconsistent_descriptions_are_rejected_with_a_reason() {
    assert!(invalid("l3_per_numa: 3\n").contains("multiple of l3_per_numa"));
    assert!(invalid("memory_per_numa: 1000\n").contains("1 KiB"));
    assert!(invalid("distances: [[10]]\n").contains("4x4"));
    assert!(invalid("gpus: [{switch: nope}]\n").contains("unknown switch"));
    assert!(invalid("gpus: [{numa_node: 9}]\n").contains("no CPUs"));
    assert!(invalid("nics: [{name: e, numa_node: 0, sysfs_numa_node: 9}]\n").contains("9 has no"));
    let both = "nics: [{name: e, numa_node: 1, sysfs_numa_node: 0, hide_numa_node: true}]\n";
    assert!(invalid(both).contains("both set"));
    let empty = "memory_only_nodes: [{memory: \"0\", kind: gpu, attached_to: 0}]\n";
    assert_eq!(
        desc(empty).expect("an empty memory-only node").node_count(),
        5
    );
    assert!(invalid("offline_cpus: \"0-15\"\n").contains("no CPU online"));
    assert!(invalid("isolated_cpus: \"99\"\n").contains("does not exist"));
    let matrix = "gpus: [{numa_node: 0}, {numa_node: 0}]\n\
                      nvlink: {kind: matrix, links: [[0, 1], [2, 0]]}\n";
    assert!(invalid(matrix).contains("symmetric"));
    let order = "gpus: [{numa_node: 0, pci_bus_id: \"0000:40:00.0\"}, \
                     {numa_node: 0, pci_bus_id: \"0000:20:00.0\"}]\n";
    assert!(invalid(order).contains("increase"));
    let upper = "gpus: [{numa_node: 0, pci_bus_id: \"0000:1B:00.0\"}]\n";
    assert!(invalid(upper).contains("expected 0000:1b:00.0"));
    assert!(matches!(
        HostDesc::from_yaml("name: t\nsockets: 1\n"),
        Err(DescError::Parse { .. })
    ));
    // Nested aliases: refused before they expand.
    let mut laughs = format!("name: &l0 [{}]\n", ["\"lol\""; 10].join(", "));
    for i in 1..=9 {
        let row = vec![format!("*l{}", i - 1); 10].join(", ");
        laughs.push_str(&format!("x{i}: &l{i} [{row}]\n"));
    }
    assert!(matches!(
        HostDesc::from_yaml(&laughs),
        Err(DescError::Expansion { .. })
    ));
}

#[test]
fn shipped_names_and_paths_both_load() {
    let by_name = HostDesc::load("pcie-4gpu").expect("shipped name");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/hosts/pcie-4gpu.yaml");
    let by_path = HostDesc::load(&path.to_string_lossy()).expect("path");
    assert_eq!(by_name, by_path);
    let err = HostDesc::load("no-such-host").expect_err("unknown");
    assert!(matches!(err, DescError::NotFound { .. }));
    // The message names the valid names, never a path on the machine that built the binary.
    let msg = err.to_string();
    assert!(
        msg.contains("shipped: ") && msg.contains("dgx-h100"),
        "{msg}"
    );
    assert!(!msg.contains(env!("CARGO_MANIFEST_DIR")), "{msg}");
}
