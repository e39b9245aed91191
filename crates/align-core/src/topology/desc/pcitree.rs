//! Placing a description's switches, GPUs, NICs and NVSwitch chips on PCI buses: one host
//! bridge per top-level attachment (as each IIO stack / root complex of a server CPU), a root
//! port below it, switches as upstream + downstream ports, bus numbers handed out depth-first
//! (pinned bus ids honoured when they keep that order), so the bridges' secondary/subordinate
//! ranges are consistent the way hwloc and the kernel expect.

use super::{HostDesc, LinkLayer};

/// What a PCI function is in the emulated tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FuncRole {
    /// Root port of a host bridge.
    RootPort,
    /// Upstream port of a PCIe switch.
    SwitchUpstream,
    /// Downstream port of a PCIe switch.
    SwitchDownstream,
    /// GPU number N (index into `HostDesc::gpus`).
    Gpu(usize),
    /// NIC number N (index into `HostDesc::nics`).
    Nic(usize),
    /// NVSwitch chip number N.
    NvSwitch(usize),
}

/// One PCI function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutFunc {
    /// Bus id in sysfs form.
    pub bus_id: String,
    /// Bus number (the function is always device 0 or a port number on it).
    pub bus: u8,
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Class code (24 bits).
    pub class: u32,
    /// Role in the tree.
    pub role: FuncRole,
    /// NUMA node of its root complex.
    pub numa_node: u32,
    /// Report -1 in sysfs `numa_node`.
    pub hide_numa_node: bool,
    /// Report this node in sysfs `numa_node` instead of `numa_node` (`local_cpulist` stays true).
    pub sysfs_numa_node: Option<u32>,
    /// Parent bridge (index into `Layout::funcs`), `None` for root ports.
    pub parent: Option<usize>,
    /// Host bridge (index into `Layout::host_bridges`).
    pub host_bridge: usize,
    /// For bridges: (secondary, subordinate) bus numbers.
    pub buses: Option<(u8, u8)>,
}

/// One host bridge (root complex): `/sys/devices/pci0000:BB`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBridge {
    /// Root bus number.
    pub bus: u8,
    /// NUMA node.
    pub numa_node: u32,
}

impl HostBridge {
    /// Directory name under `/sys/devices`.
    pub fn dir_name(&self) -> String {
        format!("pci0000:{:02x}", self.bus)
    }
}

/// Splits a sysfs-form bus id `dddd:bb:dd.f` into (domain, bus, device, function).
pub fn parse_bus_id(s: &str) -> Option<(u16, u8, u8, u8)> {
    let (dom, rest) = s.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    if dom.len() != 4 || bus.len() != 2 || dev.len() != 2 || func.len() != 1 {
        return None;
    }
    if s.chars().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    let dev = u8::from_str_radix(dev, 16).ok()?;
    let func = u8::from_str_radix(func, 16).ok()?;
    if dev > 31 || func > 7 {
        return None;
    }
    Some((
        u16::from_str_radix(dom, 16).ok()?,
        u8::from_str_radix(bus, 16).ok()?,
        dev,
        func,
    ))
}

/// A subtree to place below one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    Switch(usize),
    Gpu(usize),
    Nic(usize),
    NvSwitch(usize),
}

pub(super) struct Builder<'a> {
    desc: &'a HostDesc,
    pub(super) funcs: Vec<LayoutFunc>,
    pub(super) host_bridges: Vec<HostBridge>,
    next_bus: u16,
}

impl<'a> Builder<'a> {
    /// An empty tree for `desc`.
    pub(super) fn new(desc: &'a HostDesc) -> Builder<'a> {
        Builder {
            desc,
            funcs: Vec::new(),
            host_bridges: Vec::new(),
            next_bus: 0,
        }
    }

    /// Direct children of a switch (`Some`) or the top-level attachments of a node (`None`).
    pub(super) fn children(&self, switch: Option<&str>, node: u32) -> Vec<Slot> {
        let d = self.desc;
        let mut out = Vec::new();
        for (i, s) in d.pcie_switches.iter().enumerate() {
            let here = match switch {
                Some(p) => s.parent.as_deref() == Some(p),
                None => s.parent.is_none() && s.numa_node == node,
            };
            if here {
                out.push(Slot::Switch(i));
            }
        }
        let at_here = |sw: &Option<String>, n: Option<u32>| match switch {
            Some(p) => sw.as_deref() == Some(p),
            None => sw.is_none() && n == Some(node),
        };
        for (i, g) in d.gpus.iter().enumerate() {
            if at_here(&g.at.switch, g.at.numa_node) {
                out.push(Slot::Gpu(i));
            }
        }
        for (i, n) in d.nics.iter().enumerate() {
            if at_here(&n.at.switch, n.at.numa_node) {
                out.push(Slot::Nic(i));
            }
        }
        out
    }

    /// Sort key: pinned bus first, then GPUs by index, then NICs, then empty switches.
    pub(super) fn key(&self, slot: Slot) -> (u16, u8, usize) {
        let d = self.desc;
        let pinned = |b: &Option<String>| {
            b.as_deref()
                .and_then(parse_bus_id)
                .map_or(256, |(_, bus, _, _)| u16::from(bus))
        };
        match slot {
            Slot::Gpu(i) => (pinned(&d.gpus[i].at.pci_bus_id), 0, i),
            Slot::Nic(i) => (pinned(&d.nics[i].at.pci_bus_id), 1, i),
            Slot::NvSwitch(i) => (256, 2, i),
            Slot::Switch(i) => {
                let node = d.pcie_switches[i].numa_node;
                self.children(Some(&d.pcie_switches[i].id), node)
                    .into_iter()
                    .map(|c| self.key(c))
                    .min()
                    .unwrap_or((256, 3, i))
            }
        }
    }

    fn take_bus(&mut self, pinned: Option<u8>) -> Result<u8, String> {
        let bus = match pinned {
            Some(p) if u16::from(p) < self.next_bus => {
                return Err(format!(
                    "pinned bus {p:02x} is below the next free bus {:02x}: pinned bus ids must \
                     increase in depth-first order",
                    self.next_bus
                ))
            }
            Some(p) => u16::from(p),
            None => self.next_bus,
        };
        if bus > 255 {
            return Err("the PCI tree needs more than 256 buses".into());
        }
        self.next_bus = bus + 1;
        Ok(bus as u8)
    }

    fn bridge(
        &mut self,
        bus: u8,
        dev: u8,
        role: FuncRole,
        node: u32,
        parent: Option<usize>,
    ) -> usize {
        let (vendor, device) = match role {
            FuncRole::RootPort => (0x8086, 0x352a),
            _ => (0x1000, 0xc030),
        };
        self.funcs.push(LayoutFunc {
            bus_id: format!("0000:{bus:02x}:{dev:02x}.0"),
            bus,
            vendor,
            device,
            class: 0x060400,
            role,
            numa_node: node,
            hide_numa_node: false,
            sysfs_numa_node: None,
            parent,
            host_bridge: self.host_bridges.len() - 1,
            buses: Some((0, 0)),
        });
        self.funcs.len() - 1
    }

    /// One host bridge with a root port per slot (ports 01.0, 02.0, ...).
    pub(super) fn place_host_bridge(&mut self, node: u32, slots: &[Slot]) -> Result<(), String> {
        if slots.len() > 31 {
            return Err("a host bridge can have at most 31 root ports".into());
        }
        let root_bus = self.take_bus(None)?;
        self.host_bridges.push(HostBridge {
            bus: root_bus,
            numa_node: node,
        });
        for (k, &slot) in slots.iter().enumerate() {
            let port = self.bridge(root_bus, k as u8 + 1, FuncRole::RootPort, node, None);
            self.place_below(port, node, slot)?;
        }
        Ok(())
    }

    /// The host bridge group of a top-level slot: slots naming the same `host_bridge` share one.
    pub(super) fn host_bridge_of(&self, slot: Slot) -> Option<&str> {
        let d = self.desc;
        match slot {
            Slot::Switch(i) => d.pcie_switches[i].host_bridge.as_deref(),
            Slot::Gpu(i) => d.gpus[i].at.host_bridge.as_deref(),
            Slot::Nic(i) => d.nics[i].at.host_bridge.as_deref(),
            Slot::NvSwitch(_) => Some("nvswitch"),
        }
    }

    /// Places `slot` on the secondary bus of bridge `port` and closes the port's bus range.
    fn place_below(&mut self, port: usize, node: u32, slot: Slot) -> Result<(), String> {
        let d = self.desc;
        let first = match slot {
            Slot::Switch(i) => {
                let up_bus = self.take_bus(None)?;
                let up = self.bridge(up_bus, 0, FuncRole::SwitchUpstream, node, Some(port));
                let inner = self.take_bus(None)?;
                let mut kids = self.children(Some(&d.pcie_switches[i].id), node);
                kids.sort_by_key(|s| self.key(*s));
                if kids.len() > 32 {
                    return Err(format!(
                        "switch {:?} has over 32 devices",
                        d.pcie_switches[i].id
                    ));
                }
                for (k, kid) in kids.into_iter().enumerate() {
                    let down =
                        self.bridge(inner, k as u8, FuncRole::SwitchDownstream, node, Some(up));
                    self.place_below(down, node, kid)?;
                }
                self.close(up, inner);
                up_bus
            }
            Slot::Gpu(i) => self.endpoint(port, node, FuncRole::Gpu(i))?,
            Slot::Nic(i) => self.endpoint(port, node, FuncRole::Nic(i))?,
            Slot::NvSwitch(i) => self.endpoint(port, node, FuncRole::NvSwitch(i))?,
        };
        self.close(port, first);
        Ok(())
    }

    fn close(&mut self, bridge: usize, secondary: u8) {
        let sub = (self.next_bus.max(1) - 1) as u8;
        self.funcs[bridge].buses = Some((secondary, sub));
    }

    fn endpoint(&mut self, port: usize, node: u32, role: FuncRole) -> Result<u8, String> {
        let d = self.desc;
        let (at, vendor, device, class) = match role {
            FuncRole::Gpu(i) => (Some(&d.gpus[i].at), 0x10de, d.gpus[i].device_id, 0x030200),
            FuncRole::Nic(i) => {
                let n = &d.nics[i];
                let class = match n.link_layer {
                    LinkLayer::Infiniband => 0x020700,
                    LinkLayer::Ethernet => 0x020000,
                };
                // ConnectX-7 for RDMA NICs, Intel E810 otherwise.
                let (v, dev) = if n.rdma.is_some() {
                    (0x15b3, 0x1021)
                } else {
                    (0x8086, 0x159b)
                };
                (Some(&n.at), v, dev, class)
            }
            _ => (None, 0x10de, 0x22a3, 0x068000),
        };
        let pinned = at
            .and_then(|a| a.pci_bus_id.as_deref())
            .and_then(parse_bus_id);
        let bus = self.take_bus(pinned.map(|p| p.1))?;
        let (dev, func) = pinned.map_or((0, 0), |p| (p.2, p.3));
        self.funcs.push(LayoutFunc {
            bus_id: format!("0000:{bus:02x}:{dev:02x}.{func:x}"),
            bus,
            vendor,
            device,
            class,
            role,
            numa_node: node,
            hide_numa_node: at.is_some_and(|a| a.hide_numa_node),
            sysfs_numa_node: at.and_then(|a| a.sysfs_numa_node),
            parent: Some(port),
            host_bridge: self.host_bridges.len() - 1,
            buses: None,
        });
        Ok(bus)
    }
}
