use super::super::HostDesc;

#[test]
fn nvswitch_chips_may_outnumber_links() {
    let gpus: String = (0..16).map(|_| "{numa_node: 0}, ").collect();
    let yaml = format!(
        "name: dgx2\nsockets: 1\ncores_per_numa: 4\nmemory_per_numa: 8Gi\n\
             gpus: [{gpus}]\nnvlink: {{kind: nvswitch, links: 6, chips: 12}}\n"
    );
    let topo = HostDesc::from_yaml(&yaml)
        .expect("12 chips, 6 links")
        .to_topology();
    let links = topo.gpu_links.expect("links");
    assert!(links.nvswitch);
    assert_eq!(links.nvlink[0][15], 6);
    let bad = yaml.replace("chips: 12", "chips: 0");
    assert!(HostDesc::from_yaml(&bad).is_err());
}
