//! The PCI tree under `sys/devices/pci0000:BB`, `sys/bus/pci/devices` links, and the net,
//! infiniband and infiniband_verbs classes of the NICs.

use super::{mask_string, EmulateError, Tree};
use crate::topology::desc::{FuncRole, HostDesc, Layout, LayoutFunc, LinkLayer};
use crate::topology::CpuSet;

/// Major number of uverbs character devices (`/dev/infiniband/uverbsN` is 231:192+N).
pub(super) const UVERBS_MAJOR: u32 = 231;
/// First uverbs minor.
pub(super) const UVERBS_MINOR_BASE: u32 = 192;

/// Writes every function, the bus links, the driver links and the NIC classes.
pub(super) fn write_pci(t: &Tree, desc: &HostDesc, l: &Layout) -> Result<(), EmulateError> {
    let ncpus = l.cpus.len() as u32;
    for hb in &l.host_bridges {
        let dir = format!("devices/{}", hb.dir_name());
        t.dir(&dir)?;
        t.line(&format!("{dir}/uevent"), "")?;
    }
    for (i, f) in l.funcs.iter().enumerate() {
        let path = func_path(l, i);
        let cpus = l.node_cpus(f.numa_node);
        write_function(t, &path, f, &cpus, ncpus)?;
        t.link(&format!("bus/pci/devices/{}", f.bus_id), &path)?;
        let driver = match f.role {
            FuncRole::RootPort | FuncRole::SwitchUpstream | FuncRole::SwitchDownstream => {
                "pcieport"
            }
            FuncRole::Gpu(_) => "nvidia",
            FuncRole::Nic(n) if desc.nics[n].rdma.is_some() => "mlx5_core",
            FuncRole::Nic(_) => "ice",
            FuncRole::NvSwitch(_) => "nvidia-nvswitch",
        };
        let drv = format!("bus/pci/drivers/{driver}");
        t.link(&format!("{path}/driver"), &drv)?;
        t.link(&format!("{drv}/{}", f.bus_id), &path)?;
        t.link(&format!("{path}/subsystem"), "bus/pci")?;
    }
    let mut uverbs = 0;
    for (n, &fi) in l.nic_funcs.iter().enumerate() {
        let nic = &desc.nics[n];
        let dev = func_path(l, fi);
        let net = format!("{dev}/net/{}", nic.name);
        let ib = nic.link_layer == LinkLayer::Infiniband;
        t.line(&format!("{net}/ifindex"), n + 2)?;
        t.line(&format!("{net}/type"), if ib { 32 } else { 1 })?;
        t.line(&format!("{net}/mtu"), if ib { 4092 } else { 1500 })?;
        t.line(&format!("{net}/operstate"), "up")?;
        t.line(&format!("{net}/dev_id"), "0x0")?;
        t.line(&format!("{net}/dev_port"), 0)?;
        t.line(&format!("{net}/address"), mac(n))?;
        t.link(&format!("{net}/device"), &dev)?;
        t.link(&format!("class/net/{}", nic.name), &net)?;
        let Some(rdma) = &nic.rdma else { continue };
        let ibdir = format!("{dev}/infiniband/{rdma}");
        t.line(&format!("{ibdir}/node_type"), "1: CA")?;
        t.line(&format!("{ibdir}/node_guid"), guid(n))?;
        t.line(&format!("{ibdir}/sys_image_guid"), guid(n))?;
        t.line(&format!("{ibdir}/ports/1/state"), "4: ACTIVE")?;
        t.line(&format!("{ibdir}/ports/1/phys_state"), "5: LinkUp")?;
        t.line(&format!("{ibdir}/ports/1/lid"), format!("0x{:x}", n + 1))?;
        t.line(&format!("{ibdir}/ports/1/lid_mask_count"), 0)?;
        t.line(
            &format!("{ibdir}/ports/1/link_layer"),
            if ib { "InfiniBand" } else { "Ethernet" },
        )?;
        t.line(&format!("{ibdir}/ports/1/rate"), "400 Gb/sec (4X NDR)")?;
        t.line(&format!("{ibdir}/ports/1/gids/0"), gid(n))?;
        t.link(&format!("{ibdir}/device"), &dev)?;
        t.link(&format!("class/infiniband/{rdma}"), &ibdir)?;
        let verbs = format!("{dev}/infiniband_verbs/uverbs{uverbs}");
        t.line(&format!("{verbs}/ibdev"), rdma)?;
        t.line(
            &format!("{verbs}/dev"),
            format!("{UVERBS_MAJOR}:{}", UVERBS_MINOR_BASE + uverbs),
        )?;
        t.line(&format!("{verbs}/abi_version"), 1)?;
        t.link(&format!("{verbs}/device"), &dev)?;
        t.link(&format!("class/infiniband_verbs/uverbs{uverbs}"), &verbs)?;
        uverbs += 1;
    }
    if uverbs > 0 {
        t.line("class/infiniband_verbs/abi_version", 6)?;
    }
    Ok(())
}

/// `devices/pci0000:BB/<root port>/.../<function>`.
pub(super) fn func_path(l: &Layout, i: usize) -> String {
    let f = &l.funcs[i];
    let mut parts: Vec<&str> = l
        .bridge_chain(i)
        .into_iter()
        .rev()
        .map(|p| l.funcs[p].bus_id.as_str())
        .collect();
    parts.push(&f.bus_id);
    format!(
        "devices/{}/{}",
        l.host_bridges[f.host_bridge].dir_name(),
        parts.join("/")
    )
}

fn write_function(
    t: &Tree,
    path: &str,
    f: &LayoutFunc,
    cpus: &CpuSet,
    ncpus: u32,
) -> Result<(), EmulateError> {
    t.line(&format!("{path}/vendor"), format!("0x{:04x}", f.vendor))?;
    t.line(&format!("{path}/device"), format!("0x{:04x}", f.device))?;
    t.line(&format!("{path}/class"), format!("0x{:06x}", f.class))?;
    t.line(
        &format!("{path}/subsystem_vendor"),
        format!("0x{:04x}", f.vendor),
    )?;
    t.line(
        &format!("{path}/subsystem_device"),
        format!("0x{:04x}", 0x1000 + u32::from(f.bus)),
    )?;
    t.line(&format!("{path}/revision"), "0x01")?;
    let numa: i64 = if f.hide_numa_node {
        -1
    } else {
        i64::from(f.sysfs_numa_node.unwrap_or(f.numa_node))
    };
    t.line(&format!("{path}/numa_node"), numa)?;
    t.line(&format!("{path}/local_cpus"), mask_string(cpus, ncpus))?;
    t.line(&format!("{path}/local_cpulist"), cpus.to_list_string())?;
    t.line(&format!("{path}/enable"), 1)?;
    t.line(&format!("{path}/current_link_speed"), "32.0 GT/s PCIe")?;
    t.line(&format!("{path}/current_link_width"), 16)?;
    t.line(&format!("{path}/max_link_speed"), "32.0 GT/s PCIe")?;
    t.line(&format!("{path}/max_link_width"), 16)?;
    t.line(
        &format!("{path}/uevent"),
        format!(
            "PCI_CLASS={:X}\nPCI_ID={:04X}:{:04X}\nPCI_SLOT_NAME={}",
            f.class, f.vendor, f.device, f.bus_id
        ),
    )?;
    t.line(
        &format!("{path}/modalias"),
        format!(
            "pci:v{:08X}d{:08X}sv*sd*bc{:02X}sc{:02X}i{:02X}",
            f.vendor,
            f.device,
            f.class >> 16,
            (f.class >> 8) & 0xff,
            f.class & 0xff
        ),
    )?;
    t.bytes(&format!("{path}/config"), &config_space(f))
}

/// The first 256 bytes of configuration space: the standard header (type 1 with bus numbers for
/// bridges), which hwloc reads to rebuild the tree.
fn config_space(f: &LayoutFunc) -> Vec<u8> {
    let mut c = vec![0u8; 256];
    c[0..2].copy_from_slice(&f.vendor.to_le_bytes());
    c[2..4].copy_from_slice(&f.device.to_le_bytes());
    // Memory space + bus master enabled.
    c[4..6].copy_from_slice(&0x0006u16.to_le_bytes());
    c[8] = 0x01;
    c[9] = (f.class & 0xff) as u8;
    c[10] = ((f.class >> 8) & 0xff) as u8;
    c[11] = ((f.class >> 16) & 0xff) as u8;
    c[0x0c] = 0x10;
    match f.buses {
        Some((secondary, subordinate)) => {
            c[0x0e] = 0x01;
            c[0x18] = f.bus;
            c[0x19] = secondary;
            c[0x1a] = subordinate;
        }
        None => {
            c[0x0e] = 0x00;
            c[0x2c..0x2e].copy_from_slice(&f.vendor.to_le_bytes());
            c[0x2e..0x30].copy_from_slice(&(0x1000 + u16::from(f.bus)).to_le_bytes());
        }
    }
    c
}

fn mac(n: usize) -> String {
    format!("02:00:00:00:{:02x}:{:02x}", (n >> 8) & 0xff, n & 0xff)
}

fn guid(n: usize) -> String {
    format!("b83f:d203:00{:02x}:{:04x}", (n >> 16) & 0xff, n & 0xffff)
}

fn gid(n: usize) -> String {
    format!(
        "fe80:0000:0000:0000:b83f:d203:00{:02x}:{:04x}",
        (n >> 16) & 0xff,
        n & 0xffff
    )
}
