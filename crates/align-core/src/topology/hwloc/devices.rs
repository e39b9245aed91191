//! Devices of an hwloc capture: the PCI functions with their locality (the NUMA node whose
//! CPUs the nearest non-I/O ancestor's cpuset covers), the NVIDIA GPUs, and the network and
//! OpenFabrics OS devices as NICs.

use std::collections::BTreeSet;

use super::{parse_hwloc_bitmap, OsKind, PciInfo, Walk};
use crate::topology::model::{Gpu, Nic, NumaNode, PciDevice, PciKind, Topology};

impl Walk {
    pub(super) fn devices(&self, topo: &mut Topology) {
        topo.pci_devices = self.pci_devices(&topo.numa_nodes);
        topo.gpus = self.gpus(&topo.pci_devices);
        topo.nics = self.nics(topo);
    }

    /// The PCI functions, each on the one node whose CPUs its locality covers.
    fn pci_devices(&self, numa_nodes: &[NumaNode]) -> Vec<PciDevice> {
        let cpu_nodes: Vec<&NumaNode> = numa_nodes.iter().filter(|n| !n.is_memory_only()).collect();
        let locality = |p: &PciInfo| -> Option<u32> {
            if let [only] = cpu_nodes.as_slice() {
                return Some(only.id);
            }
            let set = parse_hwloc_bitmap(p.locality.as_deref()?)?;
            let mut covered = cpu_nodes.iter().filter(|n| n.cpus.is_subset(&set));
            let first = covered.next()?;
            covered.next().is_none().then_some(first.id)
        };
        let mut devices: Vec<PciDevice> = self
            .pci
            .iter()
            .map(|p| PciDevice {
                bus_id: p.bus_id.clone(),
                vendor: p.vendor,
                device: p.device,
                class: p.class,
                kind: classify(p),
                numa_node: locality(p),
                sysfs_numa_node: None,
                bridges: p.bridges.clone(),
                root_complex: p.root_complex.clone(),
            })
            .collect();
        devices.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
        devices
    }

    /// The NVIDIA GPUs among `pci_devices`, named by their NVML OS device where there is one.
    fn gpus(&self, pci_devices: &[PciDevice]) -> Vec<Gpu> {
        let gpu_osdev = |bus: &str, prefix: &str| {
            self.osdevs
                .iter()
                .find(|o| o.pci == bus && o.kind == OsKind::Gpu && o.name.starts_with(prefix))
        };
        pci_devices
            .iter()
            .filter(|d| d.kind == PciKind::Gpu && d.vendor == 0x10de)
            .enumerate()
            .map(|(i, d)| {
                let nvml = gpu_osdev(&d.bus_id, "nvml");
                Gpu {
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                    pci_bus_id: d.bus_id.clone(),
                    numa_node: d.numa_node,
                    uuid: nvml.and_then(|o| o.uuid.clone()),
                    minor: None,
                    name: nvml
                        .or_else(|| gpu_osdev(&d.bus_id, ""))
                        .and_then(|o| o.model.clone()),
                    mig_enabled: None,
                    mig_devices: Vec::new(),
                    memory_node: None,
                }
            })
            .collect()
    }

    /// The network OS devices, then the OpenFabrics ones without a network device beside them.
    fn nics(&self, topo: &Topology) -> Vec<Nic> {
        let numa_of = |bus: &str| topo.pci(bus).and_then(|d| d.numa_node);
        let rdma_of = |bus: &str| {
            self.osdevs
                .iter()
                .find(|o| o.pci == bus && o.kind == OsKind::OpenFabrics)
                .map(|o| o.name.clone())
        };
        let mut nics: Vec<Nic> = self
            .osdevs
            .iter()
            .filter(|o| o.kind == OsKind::Network)
            .map(|o| Nic {
                name: o.name.clone(),
                pci_bus_id: Some(o.pci.clone()),
                numa_node: numa_of(&o.pci),
                rdma_device: rdma_of(&o.pci),
                uverbs: Vec::new(),
            })
            .collect();
        let with_net: BTreeSet<&str> = nics
            .iter()
            .filter_map(|n| n.pci_bus_id.as_deref())
            .collect();
        let ib_only: Vec<Nic> = self
            .osdevs
            .iter()
            .filter(|o| o.kind == OsKind::OpenFabrics && !with_net.contains(o.pci.as_str()))
            .map(|o| Nic {
                name: o.name.clone(),
                pci_bus_id: Some(o.pci.clone()),
                numa_node: numa_of(&o.pci),
                rdma_device: Some(o.name.clone()),
                uverbs: Vec::new(),
            })
            .collect();
        nics.extend(ib_only);
        nics.sort_by(|a, b| (&a.pci_bus_id, &a.name).cmp(&(&b.pci_bus_id, &b.name)));
        nics
    }
}

fn classify(p: &PciInfo) -> PciKind {
    let base = p.class >> 16;
    let sub = (p.class >> 8) & 0xff;
    match (base, sub) {
        _ if p.bridge => PciKind::Bridge,
        (0x03, _) if p.vendor == 0x10de => PciKind::Gpu,
        (0x03, 0x02) | (0x03, 0x80) => PciKind::Gpu,
        (0x02, _) => PciKind::Nic,
        _ => PciKind::Other,
    }
}
