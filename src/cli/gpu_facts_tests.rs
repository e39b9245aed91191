use super::*;
use crate::topology::load::{load, Source};

#[test]
fn every_gpu_fact_of_a_shipped_host_is_one_line() {
    let topo = load(&Source::Description("dgx-a100-mig".into()), None).expect("dgx-a100-mig");
    let text = render(&topo);
    let n = topo.gpus.len();
    assert!(n >= 2, "{text}");
    assert_eq!(text.lines().next(), Some(format!("gpus {n}").as_str()));
    let g0 = &topo.gpus[0];
    assert!(
        text.contains(&format!("gpu0 bus {}\n", g0.pci_bus_id)),
        "{text}"
    );
    // Every pair once, in index order.
    let pairs = text.lines().filter(|l| l.starts_with("nvlink ")).count();
    assert_eq!(pairs, n * (n - 1) / 2, "{text}");
    let links = topo.gpu_links.as_ref().expect("links");
    assert!(
        text.contains(&format!("nvlink gpu0 gpu1 {}\n", links.nvlink[0][1])),
        "{text}"
    );
    // The MIG host has MIG on somewhere: its devices are counted.
    let mig = topo
        .gpus
        .iter()
        .find(|g| g.mig_enabled == Some(true))
        .expect("a MIG GPU");
    assert!(text.contains(&format!(
        "gpu{} mig-devices {}\n",
        mig.index,
        mig.mig_devices.len()
    )));
}
