use super::*;

fn named(items: &[(&str, Option<u32>)]) -> Vec<(String, Option<u32>)> {
    items.iter().map(|(n, i)| (n.to_string(), *i)).collect()
}

#[test]
fn devices_are_grouped_by_node_in_the_order_met() {
    let gpus = named(&[("a", Some(1)), ("b", Some(0)), ("c", Some(1)), ("d", None)]);
    assert_eq!(
        by_node("GPU", "GPUs", &gpus),
        [
            "GPUs a, c on node 1",
            "GPU b on node 0",
            "GPU d on no NUMA node"
        ]
    );
    let parts: Vec<String> = ["x", "y", "z"].iter().map(|s| s.to_string()).collect();
    assert_eq!(and_list(&parts[..1]), "x");
    assert_eq!(and_list(&parts[..2]), "x and y");
    assert_eq!(and_list(&parts), "x, y and z");
}

#[test]
fn remedies_fit_where_the_plugin_put_the_devices() {
    let gpus = named(&[("g0", Some(1)), ("g1", Some(1))]);
    let on_gpu_node = named(&[("n1", Some(1))]);
    let elsewhere = named(&[("n0", Some(0))]);
    // Aligned by the plugins: remap is the only change that could help.
    assert_eq!(plugin_remedies(&gpus, &on_gpu_node, true).len(), 1);
    let nic_off = plugin_remedies(&gpus, &elsewhere, true);
    assert!(nic_off[0].contains("gpu_mode: remap"), "{nic_off:?}");
    assert!(nic_off[1].contains("NIC device plugin"), "{nic_off:?}");
    let split = plugin_remedies(&named(&[("g0", Some(0)), ("g1", Some(1))]), &[], false);
    assert_eq!(split.len(), 1);
    assert!(split[0].contains("Topology Manager policy"), "{split:?}");
}
