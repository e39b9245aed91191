//! The RDMA NICs of the kubelet baseline: which device plugin advertises them, and how the
//! kubelet's device manager then hints and picks them. Written from the public sources at the
//! versions below (none copied):
//! - SR-IOV network device plugin (github.com/k8snetworkplumbingwg/sriov-network-device-plugin,
//!   v3.11.0 and main at 40b6f507): one device per VF of a resource pool
//!   (`pkg/netdevice/netDeviceProvider.go` `AddTargetDevices` skips a PF with VFs configured and
//!   lists its VFs), each with `TopologyInfo` from the device's sysfs `numa_node`, the PF's
//!   (`pkg/devices/host.go`, `pkg/devices/api.go`; off only with `excludeTopology`), and no
//!   preferred allocation (`pkg/resources/server.go`: `GetPreferredAllocationAvailable: false`,
//!   GetPreferredAllocation answers empty). A PF without VFs is itself one device: the NVIDIA
//!   Network Operator's host-device network (`resourceName: hostdev`, selectors
//!   `vendors: [15b3], isRdma: true`, github.com/Mellanox/network-operator
//!   `example/crs/mellanox.com_v1alpha1_nicclusterpolicy_cr-ocp-hostdev.yaml`) is
//!   [`NicPlugin::PerNic`].
//! - RDMA shared device plugin (github.com/Mellanox/k8s-rdma-shared-dev-plugin, tag
//!   network-operator-v26.4.0-beta.6, 410b0f32; `pkg/resources/server.go`): `rdmaHcaMax`
//!   devices per resource, IDs "0".."rdmaHcaMax-1", without `Topology`; `Allocate` gives every
//!   container the device specs of every HCA the resource's selectors matched, whatever the
//!   count asked; no preferred allocation. The Network Operator's example policy
//!   (`example/crs/mellanox.com_v1alpha1_nicclusterpolicy_cr.yaml`, `rdmaHcaMax: 63`, one
//!   resource over the vendor's HCAs) and its GPUDirect test pod (`example/rdma-gpu-test-pod1.yml`:
//!   `nvidia.com/gpu: 1` with `rdma/rdma_shared_device_a: 1`) use it: the default here.
//! - kubelet device manager (github.com/kubernetes/kubernetes `pkg/kubelet/cm/devicemanager/`,
//!   `topology_hints.go` at 584e224b, `manager.go` `devicesToAllocate`/`filterByAffinity`):
//!   a resource none of whose devices has a NUMA node gives no hint (`nil`: no preference);
//!   otherwise a mask is a hint when the free devices on it hold the request, preferred when
//!   as narrow as the resource's devices (free or not) allow, and no hint at all (`[]`: not
//!   preferred) when fewer are free than asked. Without a preferred allocation the kubelet
//!   takes the free devices of the hint's nodes, then of other nodes, then node-less ones, each
//!   group iterated as a Go set (map order: unspecified, randomised per run). That order is a
//!   seeded shuffle here ([`map_order`]), deterministic per container.

use std::collections::HashMap;

use align_core::placement::error::PlacementError;
use align_core::placement::ledger::Ledger;

/// VFs per PF of [`NicPlugin::Sriov`] unless told (`--kubelet-sriov-vfs`): a common
/// `numVfs` of an `SriovNetworkNodePolicy`, the plugin itself has no default.
pub const DEFAULT_VFS_PER_PF: u32 = 8;

/// `rdmaHcaMax` of [`NicPlugin::Shared`] unless told (`--kubelet-rdma-hca-max`): the NVIDIA
/// Network Operator example policy's.
pub const DEFAULT_RDMA_HCA_MAX: u32 = 63;

/// Which device plugin advertises the RDMA NICs to the kubelet baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NicPlugin {
    /// The RDMA shared device plugin: `hca_max` units without NUMA node; every allocation
    /// gives every RDMA NIC of the host.
    Shared {
        /// `rdmaHcaMax`.
        hca_max: u32,
    },
    /// The SR-IOV network device plugin over VFs: `vfs_per_pf` units per RDMA NIC, each on the
    /// NIC's NUMA node, exclusive; the container's NICs are its VFs' PFs.
    Sriov {
        /// VFs created on each PF.
        vfs_per_pf: u32,
    },
    /// One exclusive unit per NIC with its NUMA node (the SR-IOV plugin over PFs without VFs,
    /// the host-device network): with 2 NICs a node, its hints run out of NICs before GPUs.
    PerNic,
}

impl Default for NicPlugin {
    fn default() -> Self {
        NicPlugin::Shared {
            hca_max: DEFAULT_RDMA_HCA_MAX,
        }
    }
}

impl NicPlugin {
    /// The `--kubelet-nic-plugin` spelling.
    pub fn name(self) -> &'static str {
        match self {
            NicPlugin::Shared { .. } => "shared",
            NicPlugin::Sriov { .. } => "sriov",
            NicPlugin::PerNic => "per-nic",
        }
    }

    /// Parses the `--kubelet-nic-plugin` spelling, with its parameters.
    pub fn parse(s: &str, vfs_per_pf: u32, hca_max: u32) -> Option<Self> {
        match s {
            "shared" => Some(NicPlugin::Shared { hca_max }),
            "sriov" => Some(NicPlugin::Sriov {
                vfs_per_pf: vfs_per_pf.max(1),
            }),
            "per-nic" => Some(NicPlugin::PerNic),
            _ => None,
        }
    }

    /// Units each NIC holds for the kubelet's hints (exclusive units with a NUMA node), or
    /// `None` when the units carry no NUMA node (no hint).
    pub fn units_per_nic(self) -> Option<u32> {
        match self {
            NicPlugin::Shared { .. } => None,
            NicPlugin::Sriov { vfs_per_pf } => Some(vfs_per_pf),
            NicPlugin::PerNic => Some(1),
        }
    }

    /// A description for the table's heading.
    pub fn describe(self) -> String {
        match self {
            NicPlugin::Shared { hca_max } => {
                format!("RDMA shared device plugin (rdmaHcaMax {hca_max}, no NUMA node)")
            }
            NicPlugin::Sriov { vfs_per_pf } => {
                format!("SR-IOV device plugin ({vfs_per_pf} VFs per RDMA NIC)")
            }
            NicPlugin::PerNic => "one exclusive unit per RDMA NIC".into(),
        }
    }
}

/// `items` in the order a Go set of them iterates, as a deterministic stand-in: sorted by a
/// hash of `key` (the container) and the item.
pub fn map_order<T: Copy>(key: &str, items: &mut [T], id: impl Fn(T) -> u64) {
    let seed = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    items.sort_by_key(|x| mix(seed ^ id(*x)));
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The kubelet's pick of `needed` units among free ones (`(unit id, in hint)`: `Some(true)` on
/// the hint's nodes, `Some(false)` elsewhere, `None` without a node), no preferred allocation:
/// the hint's first, then the other nodes', then the node-less ones, each in [`map_order`].
/// Fewer than `needed` when not enough are free.
pub fn devices_to_allocate(key: &str, free: &[(u64, Option<bool>)], needed: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(needed);
    for group in [Some(true), Some(false), None] {
        let mut ids: Vec<u64> = free
            .iter()
            .filter(|(_, g)| *g == group)
            .map(|(id, _)| *id)
            .collect();
        map_order(key, &mut ids, |x| x);
        out.extend(ids.into_iter().take(needed - out.len()));
    }
    out
}

/// One NIC unit a container holds: `(NIC index, VF number)` ([`NicPlugin::Sriov`]), or
/// `(usize::MAX, unit)` ([`NicPlugin::Shared`]'s node-less units).
pub type Unit = (usize, u32);

/// What [`NicUnits::pick`] gives: the NICs (indices) and the units held.
pub type Picked = (Vec<usize>, Vec<Unit>);

/// The NIC units each container of the kubelet baseline holds (none for
/// [`NicPlugin::PerNic`], whose NIC users the ledger counts).
#[derive(Debug, Clone, Default)]
pub struct NicUnits(HashMap<String, Vec<Unit>>);

impl NicUnits {
    /// Records container `id`'s units.
    pub fn insert(&mut self, id: String, units: Vec<Unit>) {
        self.0.insert(id, units);
    }

    /// Frees container `id`'s units.
    pub fn remove(&mut self, id: &str) {
        self.0.remove(id);
    }

    /// The VF numbers of NIC `nic` no container holds, of `vfs_per_pf`.
    pub fn free_vfs(&self, nic: usize, vfs_per_pf: u32) -> Vec<u32> {
        (0..vfs_per_pf)
            .filter(|vf| !self.0.values().any(|held| held.contains(&(nic, *vf))))
            .collect()
    }

    /// The NICs `plugin` gives container `(who, id)` asking `count` units, the kubelet's hint
    /// on nodes `in_mask` (CPU node indices), and the units it then holds.
    pub fn pick(
        &self,
        plugin: NicPlugin,
        ledger: &Ledger,
        (who, id): (&str, &str),
        count: usize,
        in_mask: &[usize],
    ) -> Result<Picked, PlacementError> {
        let el = ledger.eligible_nics();
        let short = |free: usize| PlacementError::Insufficient {
            container: who.to_string(),
            resource: "rdma nic units".into(),
            asked: count.to_string(),
            free: free.to_string(),
        };
        if count == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        match plugin {
            NicPlugin::PerNic => {
                // Unused NICs first, the hint's before the others, lowest index.
                let on_mask = |n: Option<usize>| n.is_some_and(|i| in_mask.contains(&i));
                let mut order: Vec<usize> = el.to_vec();
                order.sort_by_key(|x| (ledger.nic_users(*x), !on_mask(ledger.nic_node(*x)), *x));
                Ok((order.into_iter().take(count).collect(), Vec::new()))
            }
            NicPlugin::Sriov { vfs_per_pf } => {
                let free: Vec<(u64, Option<bool>)> = el
                    .iter()
                    .flat_map(|x| {
                        let hint = ledger.nic_node(*x).map(|i| in_mask.contains(&i));
                        self.free_vfs(*x, vfs_per_pf)
                            .into_iter()
                            .map(move |vf| (((*x as u64) << 32) | u64::from(vf), hint))
                    })
                    .collect();
                let ids = devices_to_allocate(id, &free, count);
                if ids.len() < count {
                    return Err(short(free.len()));
                }
                let units: Vec<Unit> = ids
                    .iter()
                    .map(|u| ((u >> 32) as usize, (u & 0xffff_ffff) as u32))
                    .collect();
                // Two VFs of one PF are one NIC.
                let mut nics: Vec<usize> = units.iter().map(|u| u.0).collect();
                nics.sort_unstable();
                nics.dedup();
                Ok((nics, units))
            }
            NicPlugin::Shared { hca_max } => {
                let used: usize = self.0.values().map(Vec::len).sum();
                let free = if el.is_empty() {
                    0
                } else {
                    (hca_max as usize).saturating_sub(used)
                };
                if free < count {
                    return Err(short(free));
                }
                let units = (0..count as u32).map(|u| (usize::MAX, u)).collect();
                Ok((el.to_vec(), units))
            }
        }
    }
}

#[cfg(test)]
#[path = "nic_plugin_tests.rs"]
mod tests;
