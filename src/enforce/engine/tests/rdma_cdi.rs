//! An RDMA device of another vendor's CDI spec (`/dev/infiniband/uverbsN`, its own PCI
//! function on node N) is placed on its node under `single-numa-node`.

use super::kubernetes::{kctr, kpod, real};
use super::*;
use crate::host::cdi::{CdiDevice, CdiTarget, PciFunction};
use crate::topology::Nic;

/// The other vendor's RDMA device on NUMA node 1: `irdma1`, `uverbs1`, PCI 0000:b1:00.0.
const BUS: &str = "0000:b1:00.0";

fn cdi_rdma() -> CdiDevice {
    CdiDevice {
        name: "example.com/rdma=nic1".into(),
        spec: "/var/run/cdi/example-rdma.yaml".into(),
        targets: vec![CdiTarget::Uverbs {
            name: "uverbs1".into(),
            pci: Some(PciFunction {
                bus_id: BUS.into(),
                numa_node: Some(1),
                pcie_path: vec!["pci0000:b0".into(), BUS.into()],
            }),
        }],
        unmapped: Vec::new(),
        net_devices: Vec::new(),
        env: Vec::new(),
        mounts: Vec::new(),
        nodes: Vec::new(),
    }
}

fn engine(nic_in_topology: bool) -> Engine<crate::placement::Allocator> {
    let mut config = Config::default();
    config.placement.policy = Policy::SingleNumaNode;
    let mut e = real(config, "");
    if nic_in_topology {
        let mut topo = e.placer().topology().clone();
        // The host's own RDMA NIC on node 0, free.
        topo.nics.push(Nic {
            name: "ib0".into(),
            pci_bus_id: Some("0000:1c:00.0".into()),
            numa_node: Some(0),
            rdma_device: Some("mlx5_0".into()),
            uverbs: vec!["uverbs0".into()],
        });
        topo.nics.push(Nic {
            name: "ens801f1".into(),
            pci_bus_id: Some(BUS.into()),
            numa_node: Some(1),
            rdma_device: Some("irdma1".into()),
            uverbs: vec!["uverbs1".into()],
        });
        let placement = e.config().placement.clone();
        e = Engine::new(
            crate::placement::Allocator::new(std::sync::Arc::new(topo), placement),
            e.config().clone(),
            None,
            Some(std::sync::Arc::new(Metrics::new())),
            Box::new(crate::enforce::testing::AllDevices),
        );
    }
    e
}

#[test]
fn an_rdma_device_of_another_vendors_spec_is_placed_on_its_node() {
    for nic_in_topology in [true, false] {
        let mut e = engine(nic_in_topology);
        let pod = kpod("default", "rdma", &[]);
        let mut c = kctr(&pod, "r", "main", 2000, Some(2000));
        c.cdi_devices = vec!["example.com/rdma=nic1".into()];
        c.cdi_resolved = vec![cdi_rdma()];
        c.devices = vec![node("/dev/infiniband/uverbs1", 231, 193)];
        let out = e
            .create_container(&pod, &c)
            .unwrap_or_else(|err| panic!("nic in topology {nic_in_topology}: {err}"))
            .expect("adjusted");
        assert_eq!(
            out.adjustment.cpuset_cpus.to_string(),
            "4-5",
            "{nic_in_topology}"
        );
        let a = &e.records().containers["r"].assignment;
        assert_eq!(a.numa_nodes.to_string(), "1");
    }
}
