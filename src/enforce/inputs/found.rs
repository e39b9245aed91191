//! What the device readers (`devices.rs`, `cdi.rs`) share: the devices one container was
//! found to have, where its GPUs came from, and a GPU reference resolved on this host. Both
//! readers import it; neither imports the other for it, so the reading runs one way
//! (`devices.rs` asks `cdi.rs` for source 2, and both build on this).

use k8s_devices::nvidia::GpuRef;

use super::RequestError;
use crate::enforce::container::ContainerView;
use crate::topology::Topology;

/// Which source the GPUs of a container came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuSource {
    /// The kubelet's PodResources API.
    Kubelet,
    /// CDI devices (CRI field or annotations).
    Cdi,
    /// Device nodes in the spec.
    DeviceNodes,
    /// The volume-mounts strategy's mounts.
    VolumeMounts,
    /// `NVIDIA_VISIBLE_DEVICES` alone (not authoritative).
    Env,
    /// `NVIDIA_VISIBLE_DEVICES` alone, on a node whose administrator vouches for it.
    TrustedEnv,
}

impl GpuSource {
    /// Whether the source is authoritative (may add devices, hold GPUs, refuse on error).
    pub fn is_authoritative(self) -> bool {
        self != GpuSource::Env
    }

    /// Label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            GpuSource::Kubelet => "podresources",
            GpuSource::Cdi => "cdi",
            GpuSource::DeviceNodes => "device-nodes",
            GpuSource::VolumeMounts => "volume-mounts",
            GpuSource::Env => "env",
            GpuSource::TrustedEnv => "trusted-env",
        }
    }
}

/// A device reference nri-align could not use and no authoritative source vouches for: the
/// container is placed without it, and the engine logs and counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    /// Where it came from (`NVIDIA_VISIBLE_DEVICES`, `cdi.k8s.io/x`...).
    pub origin: String,
    /// Why it was not used.
    pub why: String,
}

/// The devices of one container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// Other PCI devices, aligned to but not managed (CDI devices that are no GPU or RDMA NIC
    /// of the topology).
    pub generic: Vec<crate::placement::GenericDevice>,
    /// Whole GPUs held alone (PCI bus ids), from an authoritative source.
    pub gpus: Vec<String>,
    /// GPUs used shared (PCI bus ids).
    pub shared_gpus: Vec<String>,
    /// RDMA NICs (names as in `Topology::nics`).
    pub nics: Vec<String>,
    /// Where the GPUs came from, when any did.
    pub source: Option<GpuSource>,
    /// What could not be used.
    pub unread: Vec<Unread>,
    /// The CDI name each GPU (bus id) or NIC (name) that came through one was named by, in
    /// the order they were found: `(device, CDI name)`.
    pub via: Vec<(String, String)>,
}

impl Found {
    pub(super) fn push(&mut self, bus: &str, shared: bool) {
        let list = if shared {
            &mut self.shared_gpus
        } else {
            &mut self.gpus
        };
        if !list.iter().any(|b| b == bus) {
            list.push(bus.to_string());
        }
    }

    /// Records that device `key` (a GPU's bus id, a NIC's name) came through CDI name `name`;
    /// the first name a device came through is the one kept.
    pub(super) fn name_via(&mut self, key: &str, name: &str) {
        if !self.via.iter().any(|(k, _)| k == key) {
            self.via.push((key.to_string(), name.to_string()));
        }
    }

    pub(super) fn note(&mut self, origin: impl Into<String>, why: impl Into<String>) {
        self.unread.push(Unread {
            origin: origin.into(),
            why: why.into(),
        });
    }

    pub(super) fn any_gpu(&self) -> bool {
        !self.gpus.is_empty() || !self.shared_gpus.is_empty()
    }

    /// Takes the GPUs a later source found (`from`, read as `source`) when no earlier source
    /// named any: the first source that names GPUs is the one believed.
    pub(super) fn adopt(&mut self, from: Found, source: GpuSource) {
        if !self.any_gpu() && from.any_gpu() {
            self.gpus = from.gpus;
            self.shared_gpus = from.shared_gpus;
            self.via.extend(from.via);
            self.source = Some(source);
        }
    }
}

/// How one reference resolved on this host.
pub(super) enum Resolved {
    /// A whole GPU (bus id).
    Whole(String),
    /// The parent GPU of a MIG device (bus id).
    MigParent(String),
    /// Nothing on this host matches.
    Unknown,
    /// A MIG device whose parent cannot be told from its id alone.
    MigUnknownParent,
}

fn by_index(topo: &Topology, i: u32) -> Option<String> {
    topo.gpus
        .iter()
        .find(|g| g.index == i)
        .map(|g| g.pci_bus_id.clone())
}

fn by_uuid(topo: &Topology, u: &str) -> Option<String> {
    topo.gpus
        .iter()
        .find(|g| g.uuid.as_deref().is_some_and(|x| x.eq_ignore_ascii_case(u)))
        .map(|g| g.pci_bus_id.clone())
}

/// The parent GPU (bus id) of the MIG device `MIG-<uuid>`, from the MIG devices NVML listed.
fn by_mig_uuid(topo: &Topology, u: &str) -> Option<String> {
    topo.gpus
        .iter()
        .find(|g| g.mig_devices.iter().any(|m| m.uuid.eq_ignore_ascii_case(u)))
        .map(|g| g.pci_bus_id.clone())
}

pub(super) fn resolve_ref(topo: &Topology, r: &GpuRef) -> Resolved {
    let found = match r {
        GpuRef::Index(i) => by_index(topo, *i).map(Resolved::Whole),
        GpuRef::GpuUuid(u) => by_uuid(topo, u).map(Resolved::Whole),
        GpuRef::MigIndex { gpu, .. } => by_index(topo, *gpu).map(Resolved::MigParent),
        GpuRef::MigLegacy { gpu_uuid, .. } => by_uuid(topo, gpu_uuid).map(Resolved::MigParent),
        GpuRef::MigUuid(u) => match by_mig_uuid(topo, u) {
            Some(parent) => Some(Resolved::MigParent(parent)),
            // NVML did not list it (MIG reconfigured since start-up, no NVML): fail open.
            None => return Resolved::MigUnknownParent,
        },
    };
    found.unwrap_or(Resolved::Unknown)
}

/// The error for a GPU an authoritative source names that this host does not have. Everything
/// here comes from the runtime: never repeat more than the start of it.
pub(super) fn unknown_gpu(c: &ContainerView, origin: &str, given: &str) -> RequestError {
    RequestError::UnknownGpu {
        container: crate::untrusted::excerpt(&c.name),
        origin: crate::untrusted::excerpt(origin),
        given: crate::untrusted::quoted(given),
    }
}
