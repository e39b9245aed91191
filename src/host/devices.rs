//! Device nodes on the host: what a node is (path, type, numbers, owner, mode), looking one up
//! under a root, the names nri-align cares about (`/dev/nvidiaN`, `/dev/infiniband/uverbsN`)
//! and which of them a container's `/dev` shows.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A device node, on the host or in a container spec (`LinuxDevice`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceNode {
    /// Path inside the container (`/dev/nvidia0`).
    pub path: String,
    /// Device type: `c` (char) or `b` (block).
    pub kind: String,
    /// Major number.
    pub major: i64,
    /// Minor number.
    pub minor: i64,
    /// File mode (permission bits), when set.
    pub file_mode: Option<u32>,
    /// Owner uid, when set.
    pub uid: Option<u32>,
    /// Owner gid, when set.
    pub gid: Option<u32>,
}

/// Finds a device node on the host.
pub trait DeviceLookup {
    /// The node at `path` (a host path like `/dev/nvidia0`), or `None` when absent.
    fn lookup(&self, path: &str) -> Option<DeviceNode>;

    /// Whether runc's systemd cgroup driver can name `node` to systemd. It passes devices as
    /// `DeviceAllow=/dev/char/MAJ:MIN` (`/dev/block/...`), falls back to
    /// `/sys/dev/char/MAJ:MIN`, and leaves out a device for which neither exists
    /// (libcontainer/cgroups/devices/systemd.go): NVIDIA's nodes have neither unless
    /// `nvidia-ctk system create-dev-char-symlinks` made the links. Such a device works until
    /// systemd re-applies the scope's device policy (every `runc update`), then is denied.
    fn systemd_can_name(&self, node: &DeviceNode) -> bool {
        let _ = node;
        true
    }

    /// Creates the `/dev/char/MAJ:MIN` (`/dev/block/...`) link to `node` that
    /// [`systemd_can_name`](Self::systemd_can_name) looks for, relative as udev and
    /// `nvidia-ctk system create-dev-char-symlinks` make it (`/dev/char/195:0 -> ../nvidia0`).
    /// Returns the link's host path.
    fn create_systemd_link(&self, node: &DeviceNode) -> Result<PathBuf, LinkError> {
        let _ = node;
        Err(LinkError::Unsupported)
    }
}

/// Why a `/dev/char` (`/dev/block`) link could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// This lookup has no host `/dev` to write.
    #[error("no host /dev to write")]
    Unsupported,
    /// The node is not a char or block device under `/dev`.
    #[error("{0} is not a device node under /dev")]
    NotADevice(String),
    /// The host's node at the path is not the device the container was given.
    #[error("{path} on the host is not {kind} {major}:{minor}")]
    NotTheNode {
        /// The node's path.
        path: String,
        /// `c` or `b`.
        kind: String,
        /// Major number.
        major: i64,
        /// Minor number.
        minor: i64,
    },
    /// The host's `/dev/char` (`/dev/block`) is a symbolic link: not written through.
    #[error("{0} is a symbolic link: no link is made through it")]
    LinkedDir(PathBuf),
    /// Something else sits at the link's path (a dangling or foreign link, a file).
    #[error("{0} exists but does not lead to the node")]
    Occupied(PathBuf),
    /// The link could not be written (a read-only `/dev`, no permission).
    #[error("cannot create {link}: {source}")]
    Io {
        /// The link's host path.
        link: PathBuf,
        /// What the kernel said.
        source: std::io::Error,
    },
}

/// Reads device nodes under a host root (`/` normally).
#[derive(Debug, Clone)]
pub struct HostDevices {
    root: PathBuf,
}

impl HostDevices {
    /// Device nodes under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The host's `/dev`.
    fn dev(&self) -> PathBuf {
        self.root.join("dev")
    }
}

impl DeviceLookup for HostDevices {
    fn lookup(&self, path: &str) -> Option<DeviceNode> {
        // Links are followed as the host follows them, never out of its `/dev`.
        let full = super::devpath::resolve(&self.dev(), path.strip_prefix("/dev/")?)?;
        let md = std::fs::symlink_metadata(&full).ok()?;
        let ft = md.file_type();
        let kind = if ft.is_char_device() {
            "c"
        } else if ft.is_block_device() {
            "b"
        } else {
            return None;
        };
        let rdev = md.rdev();
        Some(DeviceNode {
            path: path.to_string(),
            kind: kind.into(),
            major: i64::from(nix::sys::stat::major(rdev) as u32),
            minor: i64::from(nix::sys::stat::minor(rdev) as u32),
            file_mode: Some(md.mode() & 0o7777),
            uid: Some(md.uid()),
            gid: Some(md.gid()),
        })
    }

    fn systemd_can_name(&self, node: &DeviceNode) -> bool {
        let dir = match node.kind.as_str() {
            "c" => "char",
            "b" => "block",
            _ => return true,
        };
        let rel = format!("{dir}/{}:{}", node.major, node.minor);
        // Followed as runc's os.Stat does (a dangling link does not count), but only within
        // the host's `/dev`: a `/dev/char` that is a link elsewhere names nothing.
        super::devpath::resolve(&self.dev(), &rel).is_some()
            || self.root.join("sys/dev").join(&rel).exists()
    }

    fn create_systemd_link(&self, node: &DeviceNode) -> Result<PathBuf, LinkError> {
        let not_a_device = || LinkError::NotADevice(node.path.clone());
        let dir = match node.kind.as_str() {
            "c" => "char",
            "b" => "block",
            _ => return Err(not_a_device()),
        };
        // The path comes from a container spec or a decision: only a plain name under /dev
        // may become a link target, never one that climbs out of it.
        let rel = node.path.strip_prefix("/dev/").ok_or_else(not_a_device)?;
        if rel.is_empty()
            || rel
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(not_a_device());
        }
        // Only the node itself: a link to a path that holds another device (or none) would
        // tell systemd to allow the wrong device.
        match self.lookup(&node.path) {
            Some(h) if h.kind == node.kind && h.major == node.major && h.minor == node.minor => {}
            _ => {
                return Err(LinkError::NotTheNode {
                    path: node.path.clone(),
                    kind: node.kind.clone(),
                    major: node.major,
                    minor: node.minor,
                })
            }
        }
        let parent = self.dev().join(dir);
        let link = parent.join(format!("{}:{}", node.major, node.minor));
        let io = |source| LinkError::Io {
            link: link.clone(),
            source,
        };
        // Never written through a link: a `/dev/char` that leads elsewhere (`/etc`, out of
        // the host root) would get the new link there.
        let parent_md = std::fs::symlink_metadata(&parent);
        if parent_md.as_ref().is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(LinkError::LinkedDir(parent));
        }
        if !parent_md.is_ok_and(|m| m.is_dir()) {
            // udev makes /dev/char 0755; the daemon's umask (0077) would make it root-only.
            std::fs::create_dir(&parent).map_err(io)?;
            std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o755))
                .map_err(io)?;
        }
        let target = format!("../{rel}");
        match std::os::unix::fs::symlink(&target, &link) {
            Ok(()) => Ok(link),
            // Made meanwhile (udev, nvidia-ctk, another nri-align): fine when it leads there.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let rel = format!("{dir}/{}:{}", node.major, node.minor);
                let leads_there = super::devpath::resolve(&self.dev(), &rel)
                    .and_then(|real| std::fs::symlink_metadata(real).ok())
                    .is_some_and(|m| {
                        let rdev = m.rdev();
                        i64::from(nix::sys::stat::major(rdev) as u32) == node.major
                            && i64::from(nix::sys::stat::minor(rdev) as u32) == node.minor
                    });
                if leads_there {
                    Ok(link)
                } else {
                    Err(LinkError::Occupied(link))
                }
            }
            Err(e) => Err(io(e)),
        }
    }
}

/// The minor number of `/dev/nvidiaN` (and not of `/dev/nvidiactl`, `/dev/nvidia-uvm`...),
/// for the host side (`/dev` of a container, a CDI spec's nodes). There is one reading of
/// NVIDIA device paths, `k8s_devices::nvidia::parse_device_node`; this only picks its GPUs.
pub fn nvidia_minor(path: &str) -> Option<u32> {
    match k8s_devices::nvidia::parse_device_node(path)? {
        k8s_devices::nvidia::NvidiaNode::Gpu(minor) => Some(minor),
        _ => None,
    }
}

/// `uverbsN` of `/dev/infiniband/uverbsN`.
pub fn uverbs_name(path: &str) -> Option<&str> {
    let name = path.strip_prefix("/dev/infiniband/")?;
    let n = name.strip_prefix("uverbs")?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(name)
}

/// GPU and uverbs nodes under a container's `/dev`, sorted; `None` when it cannot be read.
pub fn visible_devices(dev: &Path) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dev).ok()?.filter_map(|e| e.ok()) {
        let path = format!("/dev/{}", e.file_name().to_string_lossy());
        if nvidia_minor(&path).is_some() {
            out.push(path);
        }
    }
    if let Ok(ib) = std::fs::read_dir(dev.join("infiniband")) {
        for e in ib.filter_map(|e| e.ok()) {
            let path = format!("/dev/infiniband/{}", e.file_name().to_string_lossy());
            if uverbs_name(&path).is_some() {
                out.push(path);
            }
        }
    }
    out.sort();
    Some(out)
}

#[cfg(test)]
#[path = "devices_tests.rs"]
mod tests;
