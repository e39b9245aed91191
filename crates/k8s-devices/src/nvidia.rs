//! What the NVIDIA device plugin hands a container, and what `NVIDIA_VISIBLE_DEVICES` means.
//!
//! Sources: NVIDIA/k8s-device-plugin v0.17-v0.20 `internal/plugin/server.go` (the four
//! device-list strategies), `internal/rm/devices.go` (replica ids `<id>::<n>`, MIG index
//! `<gpu>:<mig>`), `internal/rm/nvml_manager.go` and `nvml_devices.go` (device nodes), and the
//! NVIDIA container toolkit's reading of the variable (`void`, `none`, `all`, a list).
//!
//! | value | meaning for the toolkit | an allocation? |
//! |---|---|---|
//! | unset, empty, `void` | not a GPU container | no |
//! | `none` | driver libraries, no GPU | no |
//! | `all` | every GPU (CUDA base images set this in their ENV) | no |
//! | `/var/run/nvidia-container-devices` | the GPUs are the mounts under that directory (volume-mounts strategy) | read the mounts |
//! | `0,1` / `GPU-<uuid>,...` / `MIG-<uuid>` / `0:1` / `MIG-GPU-<uuid>/<gi>/<ci>` | those devices | only if an authoritative source agrees |
//!
//! `CUDA_VISIBLE_DEVICES` is read by CUDA inside the container, set by users (`-1` hides every
//! GPU) and by nri-align itself; no device plugin sets it, so nothing here parses it.

use std::fmt;

use crate::{excerpt, MAX_ENTRIES, MAX_INPUT_LEN};

/// The environment variable the envvar and volume-mounts strategies set.
pub const VISIBLE_DEVICES_ENV: &str = "NVIDIA_VISIBLE_DEVICES";
/// Container-side directory of the volume-mounts strategy; also the variable's value then.
pub const VOLUME_MOUNTS_ROOT: &str = "/var/run/nvidia-container-devices";
/// Host side of every volume-mounts mount (the mount only carries a name).
pub const VOLUME_MOUNTS_HOST_PATH: &str = "/dev/null";
/// CDI vendors whose devices are NVIDIA GPUs. The NVIDIA device plugin (v0.15 and later,
/// `cmd/nvidia-device-plugin/plugin-manager.go`: `cdi.WithVendor(...)`, and
/// `internal/plugin/server.go`: `QualifiedName("gpu", id)`) names them
/// `k8s.device-plugin.nvidia.com/gpu=<id>` in its cdi-annotations and cdi-cri responses;
/// `nvidia-ctk cdi generate`, the GPU Operator and the DRA driver use `nvidia.com/gpu=<id>`.
pub const CDI_VENDORS: [&str; 2] = ["nvidia.com", "k8s.device-plugin.nvidia.com"];

/// `vendor/class=name` split after an NVIDIA vendor: `Some((class, name))` for an NVIDIA device,
/// `None` for any other string.
pub fn split_cdi_name(qualified: &str) -> Option<(&str, &str)> {
    let (vendor, rest) = qualified.split_once('/')?;
    if !CDI_VENDORS.contains(&vendor) {
        return None;
    }
    rest.split_once('=')
}

/// Separator of the device plugin's replica ids (time-slicing and MPS): `<id>::<replica>`.
pub const REPLICA_SEPARATOR: &str = "::";

/// One device named in `NVIDIA_VISIBLE_DEVICES` (or by a volume-mounts mount).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GpuRef {
    /// A GPU by NVML index (`deviceIDStrategy: index`).
    Index(u32),
    /// A MIG device by `<gpu index>:<mig index>` (index strategy with MIG).
    MigIndex {
        /// Parent GPU index.
        gpu: u32,
        /// MIG device index on that GPU.
        mig: u32,
    },
    /// A GPU by UUID, `GPU-...` (the default uuid strategy).
    GpuUuid(String),
    /// A MIG device by its own UUID, `MIG-...` (driver R470 and later).
    MigUuid(String),
    /// A MIG device in the old form `MIG-GPU-<parent uuid>/<gi>/<ci>` (drivers before R470).
    MigLegacy {
        /// The parent GPU's UUID, with its `GPU-` prefix.
        gpu_uuid: String,
        /// GPU instance id.
        gi: u32,
        /// Compute instance id.
        ci: u32,
    },
}

impl GpuRef {
    /// Whether this names a MIG device rather than a whole GPU.
    pub fn is_mig(&self) -> bool {
        matches!(
            self,
            GpuRef::MigIndex { .. } | GpuRef::MigUuid(_) | GpuRef::MigLegacy { .. }
        )
    }
}

impl fmt::Display for GpuRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuRef::Index(i) => write!(f, "{i}"),
            GpuRef::MigIndex { gpu, mig } => write!(f, "{gpu}:{mig}"),
            GpuRef::GpuUuid(u) | GpuRef::MigUuid(u) => f.write_str(u),
            GpuRef::MigLegacy { gpu_uuid, gi, ci } => write!(f, "MIG-{gpu_uuid}/{gi}/{ci}"),
        }
    }
}

/// What a `NVIDIA_VISIBLE_DEVICES` value asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisibleDevices {
    /// Unset, empty or `void`: not a GPU container.
    Void,
    /// `none`: the driver, no GPU.
    None,
    /// `all`: every GPU of the host.
    All,
    /// `/var/run/nvidia-container-devices`: the devices are the volume-mounts mounts.
    VolumeMounts,
    /// A list of devices.
    List(Vec<GpuRef>),
}

impl VisibleDevices {
    /// Whether the value itself names devices (a list). `Void`, `None`, `All` and the
    /// volume-mounts marker never do: they must never be read as an allocation.
    pub fn names_devices(&self) -> bool {
        matches!(self, VisibleDevices::List(l) if !l.is_empty())
    }
}

/// Why a value or id could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvidiaError {
    /// One entry of the list is none of the known forms.
    #[error("NVIDIA device {entry:?} is not an index, a GPU-/MIG- UUID, a MIG index or MIG-GPU-<uuid>/<gi>/<ci>")]
    BadEntry {
        /// The entry (shortened).
        entry: String,
    },
    /// An empty entry (`0,,1`, a trailing comma) or `all`/`none`/`void` inside a list.
    #[error("NVIDIA device list {value:?} has an empty or special entry ({entry:?})")]
    BadList {
        /// The whole value (shortened).
        value: String,
        /// The entry.
        entry: String,
    },
    /// Over [`MAX_INPUT_LEN`] bytes or [`MAX_ENTRIES`] entries.
    #[error("NVIDIA device list too large: {len} (limit {limit})")]
    TooLarge {
        /// Its size.
        len: usize,
        /// The limit.
        limit: usize,
    },
}

/// Reads a `NVIDIA_VISIBLE_DEVICES` value (`None` = the variable is unset). Entries are
/// separated by `,`, with ASCII blanks around them ignored.
pub fn parse_visible_devices(value: Option<&str>) -> Result<VisibleDevices, NvidiaError> {
    let Some(raw) = value else {
        return Ok(VisibleDevices::Void);
    };
    if raw.len() > MAX_INPUT_LEN {
        return Err(NvidiaError::TooLarge {
            len: raw.len(),
            limit: MAX_INPUT_LEN,
        });
    }
    let value = raw.trim_matches(|c: char| c.is_ascii_whitespace());
    match value {
        "" | "void" => return Ok(VisibleDevices::Void),
        "none" => return Ok(VisibleDevices::None),
        "all" => return Ok(VisibleDevices::All),
        VOLUME_MOUNTS_ROOT => return Ok(VisibleDevices::VolumeMounts),
        _ => {}
    }
    let mut list = Vec::new();
    for entry in value.split(',') {
        if list.len() == MAX_ENTRIES {
            return Err(NvidiaError::TooLarge {
                len: list.len() + 1,
                limit: MAX_ENTRIES,
            });
        }
        let entry = entry.trim_matches(|c: char| c.is_ascii_whitespace());
        if matches!(entry, "" | "void" | "none" | "all") {
            return Err(NvidiaError::BadList {
                value: excerpt(raw),
                entry: entry.to_string(),
            });
        }
        list.push(parse_gpu_ref(entry)?);
    }
    Ok(VisibleDevices::List(list))
}

/// Reads one device id as the device plugin and the toolkit write them.
pub fn parse_gpu_ref(entry: &str) -> Result<GpuRef, NvidiaError> {
    let bad = || NvidiaError::BadEntry {
        entry: excerpt(entry),
    };
    if let Some(rest) = entry.strip_prefix("MIG-GPU-") {
        // Old MIG form: MIG-GPU-<uuid>/<gi>/<ci>.
        let mut parts = rest.split('/');
        let (Some(uuid), Some(gi), Some(ci), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        if !is_uuid_body(uuid) {
            return Err(bad());
        }
        return Ok(GpuRef::MigLegacy {
            gpu_uuid: format!("GPU-{uuid}"),
            gi: parse_u32(gi).ok_or_else(bad)?,
            ci: parse_u32(ci).ok_or_else(bad)?,
        });
    }
    if let Some(rest) = entry.strip_prefix("MIG-") {
        return is_uuid_body(rest)
            .then(|| GpuRef::MigUuid(entry.to_string()))
            .ok_or_else(bad);
    }
    if let Some(rest) = entry.strip_prefix("GPU-") {
        return is_uuid_body(rest)
            .then(|| GpuRef::GpuUuid(entry.to_string()))
            .ok_or_else(bad);
    }
    if let Some((gpu, mig)) = entry.split_once(':') {
        return Ok(GpuRef::MigIndex {
            gpu: parse_u32(gpu).ok_or_else(bad)?,
            mig: parse_u32(mig).ok_or_else(bad)?,
        });
    }
    parse_u32(entry).map(GpuRef::Index).ok_or_else(bad)
}

/// A UUID body after its `GPU-`/`MIG-` prefix: ASCII letters, digits and dashes. Real ones are 36
/// characters (8-4-4-4-12); emulated hosts use shorter ones, so only the alphabet is checked.
fn is_uuid_body(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A decimal u32 without sign, blanks or leading `+` (what the device plugin prints).
fn parse_u32(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// What a volume-mounts mount's container path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountedDevice {
    /// A GPU or MIG device.
    Gpu(GpuRef),
    /// An IMEX channel (`.../imex/<channel>`).
    ImexChannel(u32),
}

/// Reads a container path of the volume-mounts strategy
/// (`/var/run/nvidia-container-devices/<id>`); `None` for any other path.
pub fn parse_volume_mount(container_path: &str) -> Option<Result<MountedDevice, NvidiaError>> {
    let rest = container_path
        .strip_prefix(VOLUME_MOUNTS_ROOT)?
        .strip_prefix('/')?;
    if let Some(channel) = rest.strip_prefix("imex/") {
        return Some(parse_u32(channel).map(MountedDevice::ImexChannel).ok_or(
            NvidiaError::BadEntry {
                entry: excerpt(rest),
            },
        ));
    }
    Some(parse_gpu_ref(rest).map(MountedDevice::Gpu))
}

/// Splits a device plugin id into the device and its replica number: `GPU-x::3` is replica 3
/// of `GPU-x` (time-slicing or MPS); an id without `::` is the device itself.
pub fn split_replica_id(id: &str) -> (&str, Option<u32>) {
    match id.split_once(REPLICA_SEPARATOR) {
        Some((device, replica)) => match parse_u32(replica) {
            Some(n) => (device, Some(n)),
            None => (id, None),
        },
        None => (id, None),
    }
}

/// An NVIDIA device node the device plugin passes (with `passDeviceSpecs: true`) or CDI adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NvidiaNode {
    /// `/dev/nvidia<minor>`: one GPU (also the parent of a MIG device).
    Gpu(u32),
    /// `/dev/nvidiactl`.
    Control,
    /// `/dev/nvidia-uvm`.
    Uvm,
    /// `/dev/nvidia-uvm-tools`.
    UvmTools,
    /// `/dev/nvidia-modeset`.
    Modeset,
    /// `/dev/nvidia-caps/nvidia-cap<minor>`: a MIG GPU- or compute-instance capability.
    Capability(u32),
    /// `/dev/nvidia-caps-imex-channels/channel<n>`.
    ImexChannel(u32),
}

impl NvidiaNode {
    /// Whether the node is shared by every GPU container (control nodes), rather than one
    /// device's own node.
    pub fn is_control(self) -> bool {
        matches!(
            self,
            NvidiaNode::Control | NvidiaNode::Uvm | NvidiaNode::UvmTools | NvidiaNode::Modeset
        )
    }
}

/// Classifies a device path (container path, as the plugin writes host and container paths
/// the same); `None` if it is no NVIDIA node.
pub fn parse_device_node(path: &str) -> Option<NvidiaNode> {
    match path {
        "/dev/nvidiactl" => return Some(NvidiaNode::Control),
        "/dev/nvidia-uvm" => return Some(NvidiaNode::Uvm),
        "/dev/nvidia-uvm-tools" => return Some(NvidiaNode::UvmTools),
        "/dev/nvidia-modeset" => return Some(NvidiaNode::Modeset),
        _ => {}
    }
    if let Some(n) = path.strip_prefix("/dev/nvidia-caps/nvidia-cap") {
        return parse_u32(n).map(NvidiaNode::Capability);
    }
    if let Some(n) = path.strip_prefix("/dev/nvidia-caps-imex-channels/channel") {
        return parse_u32(n).map(NvidiaNode::ImexChannel);
    }
    path.strip_prefix("/dev/nvidia")
        .and_then(parse_u32)
        .map(NvidiaNode::Gpu)
}

#[cfg(test)]
#[path = "nvidia_tests.rs"]
mod tests;
