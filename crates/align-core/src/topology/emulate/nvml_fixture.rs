//! The NVML fixture (`nvml.json`) of an emulated host, which `crates/fake-nvml` serves through
//! the NVML C ABI. The schema is the `nvml-fixture` crate both ends depend on; this file builds
//! a fixture from a host description (or from a QEMU guest's sysfs).

pub use ::nvml_fixture::{nvml_bus_id, Fixture, FixtureGpu, FixtureLink, FixtureMig};

use crate::topology::desc::mig::{mig_uuid, MIG_SLOTS};
use crate::topology::desc::{gpu_uuid, HostDesc, Layout, LinkPeer};
use crate::topology::PcieLevel;

/// NVLink link slots of one GPU whose description does not say (H100: 18).
const DEFAULT_LINK_SLOTS: u32 = 18;

/// NVML's `nvmlGpuTopologyLevel_t` value of a PCIe level.
pub fn nvml_level(l: PcieLevel) -> u32 {
    match l {
        PcieLevel::Same => 0,
        PcieLevel::SingleSwitch => 10,
        PcieLevel::MultipleSwitches => 20,
        PcieLevel::HostBridge => 30,
        PcieLevel::SameNuma => 40,
        PcieLevel::CrossSocket => 50,
    }
}

/// Builds the fixture of a laid-out description.
pub fn fixture(desc: &HostDesc, l: &Layout) -> Fixture {
    let topo = l.to_topology(desc);
    let nvlink = l.nvlink_matrix();
    let gpus = l
        .gpu_funcs
        .iter()
        .enumerate()
        .map(|(i, &fi)| {
            let f = &l.funcs[fi];
            let g = &desc.gpus[i];
            let nvlinks = l.gpu_link_peers[i]
                .iter()
                .map(|p| {
                    let rf = match *p {
                        LinkPeer::Gpu(j) => l.gpu_funcs[j],
                        LinkPeer::NvSwitch(c) => l.nvswitch_funcs[c],
                    };
                    let r = &l.funcs[rf];
                    FixtureLink {
                        remote_pci_bus_id: nvml_bus_id(&r.bus_id),
                        remote_pci_device_id: (u32::from(r.device) << 16) | u32::from(r.vendor),
                    }
                })
                .collect::<Vec<_>>();
            let levels: Vec<PcieLevel> = l
                .gpu_funcs
                .iter()
                .map(|&fj| topo.pcie_level(&f.bus_id, &l.funcs[fj].bus_id))
                .collect();
            FixtureGpu {
                index: i as u32,
                name: g.name.clone(),
                uuid: gpu_uuid(desc, i),
                pci_bus_id: nvml_bus_id(&f.bus_id),
                pci_device_id: (u32::from(f.device) << 16) | u32::from(f.vendor),
                pci_subsystem_id: (0x1000 + u32::from(f.bus)) << 16 | u32::from(f.vendor),
                minor: i as u32,
                numa_node_id: g.memory_node,
                cpu_affinity: l.node_cpus(f.numa_node).to_list_string(),
                memory_affinity: f.numa_node.to_string(),
                mig_enabled: g.mig,
                // A GPU described with MIG on is MIG-capable (A100, H100: 7 slots).
                max_mig_devices: if g.mig { MIG_SLOTS } else { 0 },
                mig_devices: g
                    .mig_devices
                    .iter()
                    .enumerate()
                    .map(|(slot, m)| FixtureMig {
                        index: slot as u32,
                        uuid: mig_uuid(desc, i, slot),
                        gpu_instance_id: m.gpu_instance.unwrap_or(slot as u32 + 1),
                        compute_instance_id: m.compute_instance.unwrap_or(0),
                        profile: m.profile.clone(),
                    })
                    .collect(),
                nvlink_slots: g
                    .nvlink_slots
                    .unwrap_or(DEFAULT_LINK_SLOTS)
                    .max(nvlinks.len() as u32),
                nvlinks,
                common_ancestor: levels.iter().map(|&x| nvml_level(x)).collect(),
                // PCIe peer-to-peer works within a NUMA node; across sockets the chipset refuses.
                p2p_pci: levels
                    .iter()
                    .map(|&x| if x <= PcieLevel::SameNuma { 0 } else { 1 })
                    .collect(),
                p2p_nvlink: nvlink[i]
                    .iter()
                    .enumerate()
                    .map(|(j, &n)| if n > 0 || i == j { 0 } else { 5 })
                    .collect(),
            }
        })
        .collect();
    Fixture {
        host: desc.name.clone(),
        driver_version: "550.90.07".into(),
        nvml_version: "12.550.90.07".into(),
        cuda_driver_version: 12040,
        gpus,
    }
}

/// The fixture of `desc` with the GPUs moved to the guest's real PCI functions: the GPU
/// stand-ins found under `root/bus/pci/devices` (NVIDIA vendor, a 3D or "other" display class
/// such as QEMU's `bochs-display`, or QEMU's `edu` device 1234:11e8), in bus order, take the
/// GPUs' places in index order; their CPU and memory affinity come from the guest's
/// `local_cpulist` and `numa_node`.
pub fn fixture_from_sysfs(
    desc: &HostDesc,
    root: &std::path::Path,
) -> Result<Fixture, super::EmulateError> {
    let layout = Layout::new(desc).map_err(|reason| crate::topology::desc::DescError::Invalid {
        name: desc.name.clone(),
        reason,
    })?;
    let mut fx = fixture(desc, &layout);
    let dir = root.join("bus/pci/devices");
    let read = |p: std::path::PathBuf| -> Result<String, super::EmulateError> {
        std::fs::read_to_string(&p)
            .map(|s| s.trim().to_string())
            .map_err(|source| super::EmulateError::Io { path: p, source })
    };
    let entries = std::fs::read_dir(&dir).map_err(|source| super::EmulateError::Io {
        path: dir.clone(),
        source,
    })?;
    let mut found = Vec::new();
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let d = dir.join(&name);
        let vendor = read(d.join("vendor"))?;
        let device = read(d.join("device"))?;
        let class = read(d.join("class"))?;
        let stand_in = vendor == "0x10de" && class.starts_with("0x03")
            || class.starts_with("0x0300")
            || class.starts_with("0x0302")
            || class.starts_with("0x0380")
            || (vendor == "0x1234" && device == "0x11e8");
        if stand_in {
            let cpus = read(d.join("local_cpulist")).unwrap_or_default();
            let node = read(d.join("numa_node")).unwrap_or_default();
            let id = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or(0);
            found.push((name, cpus, node, (id(&device) << 16) | id(&vendor)));
        }
    }
    found.sort();
    if found.len() < fx.gpus.len() {
        return Err(super::EmulateError::MissingGpus {
            want: fx.gpus.len(),
            found: found.len(),
        });
    }
    let renames: Vec<(String, String)> = fx
        .gpus
        .iter()
        .zip(&found)
        .map(|(g, f)| (g.pci_bus_id.clone(), nvml_bus_id(&f.0)))
        .collect();
    for (g, (_, cpus, node, devid)) in fx.gpus.iter_mut().zip(found) {
        g.cpu_affinity = cpus;
        if node.parse::<u32>().is_ok() {
            g.memory_affinity = node;
        }
        g.pci_device_id = devid;
    }
    // One lookup per id, so a new id equal to another GPU's old one is not renamed twice.
    let rename = |id: &mut String| {
        if let Some((_, new)) = renames.iter().find(|(old, _)| old == id) {
            *id = new.clone();
        }
    };
    for g in &mut fx.gpus {
        rename(&mut g.pci_bus_id);
        for link in &mut g.nvlinks {
            rename(&mut link.remote_pci_bus_id);
        }
    }
    Ok(fx)
}
