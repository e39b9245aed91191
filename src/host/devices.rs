//! Device nodes on the host: what a node is (path, type, numbers, owner, mode), looking one up
//! under a root, the names nri-align cares about (`/dev/nvidiaN`, `/dev/infiniband/uverbsN`)
//! and which of them a container's `/dev` shows.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
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
}

impl DeviceLookup for HostDevices {
    fn lookup(&self, path: &str) -> Option<DeviceNode> {
        let full = self.root.join(path.trim_start_matches('/'));
        let md = std::fs::metadata(&full).ok()?;
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
        // `exists` follows the link, as runc's os.Stat does: a dangling link does not count.
        self.root.join("dev").join(&rel).exists() || self.root.join("sys/dev").join(&rel).exists()
    }
}

/// The minor number of `/dev/nvidiaN` (and not of `/dev/nvidiactl`, `/dev/nvidia-uvm`...).
pub fn nvidia_minor(path: &str) -> Option<u32> {
    let n = path.strip_prefix("/dev/nvidia")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
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
mod tests {
    use super::*;

    #[test]
    fn host_devices_reads_real_char_nodes() {
        // /dev/null exists on every Linux host: char 1:3.
        let d = HostDevices::new("/")
            .lookup("/dev/null")
            .expect("/dev/null");
        assert_eq!((d.kind.as_str(), d.major, d.minor), ("c", 1, 3));
        assert!(HostDevices::new("/").lookup("/etc/hostname").is_none());
        assert!(HostDevices::new("/nonexistent-root")
            .lookup("/dev/null")
            .is_none());
    }

    #[test]
    fn systemd_can_name_a_device_with_a_dev_char_link_or_a_sys_dev_char_entry() {
        let t = tempfile::tempdir().expect("tmp");
        let node = |minor| DeviceNode {
            path: format!("/dev/nvidia{minor}"),
            kind: "c".into(),
            major: 195,
            minor,
            file_mode: None,
            uid: None,
            gid: None,
        };
        std::fs::create_dir_all(t.path().join("dev/char")).expect("mkdir");
        std::fs::create_dir_all(t.path().join("sys/dev/char/195:1")).expect("mkdir");
        std::fs::write(t.path().join("dev/nvidia0"), "").expect("node stand-in");
        std::os::unix::fs::symlink("../nvidia0", t.path().join("dev/char/195:0")).expect("link");
        std::os::unix::fs::symlink("../nvidia9", t.path().join("dev/char/195:9")).expect("link");
        let host = HostDevices::new(t.path());
        assert!(host.systemd_can_name(&node(0)), "link");
        assert!(host.systemd_can_name(&node(1)), "/sys/dev/char entry");
        assert!(!host.systemd_can_name(&node(2)), "neither");
        assert!(!host.systemd_can_name(&node(9)), "dangling link");
    }

    #[test]
    fn only_numbered_gpu_and_uverbs_nodes_are_named() {
        assert_eq!(nvidia_minor("/dev/nvidia3"), Some(3));
        assert_eq!(nvidia_minor("/dev/nvidiactl"), None);
        assert_eq!(nvidia_minor("/dev/nvidia"), None);
        assert_eq!(uverbs_name("/dev/infiniband/uverbs1"), Some("uverbs1"));
        assert_eq!(uverbs_name("/dev/infiniband/rdma_cm"), None);
    }
}
