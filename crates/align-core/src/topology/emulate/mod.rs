//! Materialises a host description as the files Linux would show: `sys/` (CPU topology, caches,
//! NUMA nodes, the PCI tree with bridges, network, RDMA and uverbs classes), `proc/` (cpuinfo,
//! meminfo, the NVIDIA driver's per-GPU information), `dev-nodes.json` (the device nodes a test
//! would create) and `nvml.json` (the fixture the fake NVML library serves).
//!
//! Everything under `sys/` follows the kernel's layout, symlinks included (relative, as sysfs
//! makes them), so the sysfs reader and hwloc's `lstopo` (`HWLOC_FSROOT=DIR`) both read it.

mod cpu;
pub mod nvml_fixture;
mod pci;
mod procfs;
pub mod qemu;

use std::path::{Component, Path, PathBuf};

use super::desc::{DescError, HostDesc, Layout};

/// Why a tree could not be written.
#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    /// The description is not usable.
    #[error(transparent)]
    Desc(#[from] DescError),
    /// Writing a file, directory or symlink failed.
    #[error("writing {path}: {source}")]
    Io {
        /// What failed.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The output directory already holds a tree; refusing to mix two hosts.
    #[error("{0} already exists: pick an empty output directory")]
    Exists(PathBuf),
    /// `--nvml-from-sysfs`: the tree has fewer GPU stand-ins than the description has GPUs.
    #[error("the sysfs tree has {found} GPU stand-ins, the description {want} GPUs")]
    MissingGpus {
        /// GPUs described.
        want: usize,
        /// Stand-ins found.
        found: usize,
    },
    /// The fixture could not be serialised.
    #[error("serialising the NVML fixture: {0}")]
    Json(#[from] serde_json::Error),
}

/// What `emulate` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emulated {
    /// `DIR/sys`.
    pub sys: PathBuf,
    /// `DIR/proc`.
    pub proc: PathBuf,
    /// `DIR/nvml.json`.
    pub nvml_fixture: PathBuf,
    /// `DIR/dev-nodes.json`.
    pub dev_nodes: PathBuf,
}

/// Writes `desc` under `out` (created if missing). Fails if `out/sys` or `out/proc` exist.
pub fn emulate(desc: &HostDesc, out: &Path) -> Result<Emulated, EmulateError> {
    desc.validate()?;
    let layout = Layout::new(desc).map_err(|reason| DescError::Invalid {
        name: desc.name.clone(),
        reason,
    })?;
    for sub in ["sys", "proc"] {
        let p = out.join(sub);
        if p.exists() {
            return Err(EmulateError::Exists(p));
        }
    }
    let sys = Tree::new(out.join("sys"));
    let proc = Tree::new(out.join("proc"));
    cpu::write_cpus(&sys, desc, &layout)?;
    cpu::write_nodes(&sys, &layout)?;
    pci::write_pci(&sys, desc, &layout)?;
    procfs::write_proc(&proc, desc, &layout)?;
    let dev_nodes = out.join("dev-nodes.json");
    let nodes = serde_json::to_string_pretty(&procfs::dev_nodes(desc))?;
    write_file(&dev_nodes, nodes.as_bytes())?;
    let fixture = out.join("nvml.json");
    let json = serde_json::to_string_pretty(&nvml_fixture::fixture(desc, &layout))?;
    write_file(&fixture, json.as_bytes())?;
    Ok(Emulated {
        sys: sys.root,
        proc: proc.root,
        nvml_fixture: fixture,
        dev_nodes,
    })
}

/// A directory tree being written; paths are relative to its root.
pub(crate) struct Tree {
    root: PathBuf,
}

impl Tree {
    fn new(root: PathBuf) -> Tree {
        Tree { root }
    }

    /// Writes `rel` (creating parents) with `contents` plus the newline sysfs files end with.
    fn line(&self, rel: &str, contents: impl std::fmt::Display) -> Result<(), EmulateError> {
        self.bytes(rel, format!("{contents}\n").as_bytes())
    }

    fn bytes(&self, rel: &str, contents: &[u8]) -> Result<(), EmulateError> {
        write_file(&self.root.join(rel), contents)
    }

    fn dir(&self, rel: &str) -> Result<(), EmulateError> {
        let p = self.root.join(rel);
        std::fs::create_dir_all(&p).map_err(|source| EmulateError::Io { path: p, source })
    }

    /// Makes `rel` a symlink to `target` (another path relative to the root), written as a
    /// relative link the way sysfs writes them, so the tree can be moved or chrooted.
    fn link(&self, rel: &str, target: &str) -> Result<(), EmulateError> {
        let p = self.root.join(rel);
        let parent = p.parent().unwrap_or(&self.root).to_path_buf();
        std::fs::create_dir_all(&parent).map_err(|source| EmulateError::Io {
            path: parent.clone(),
            source,
        })?;
        let rel_target = relative(Path::new(rel).parent().unwrap_or(Path::new("")), target);
        std::os::unix::fs::symlink(&rel_target, &p)
            .map_err(|source| EmulateError::Io { path: p, source })
    }
}

fn write_file(path: &Path, contents: &[u8]) -> Result<(), EmulateError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| EmulateError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(path, contents).map_err(|source| EmulateError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The path from directory `from` to `to` (both relative to the same root).
fn relative(from: &Path, to: &str) -> PathBuf {
    let f: Vec<Component> = from.components().collect();
    let t: Vec<Component> = Path::new(to).components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    out
}

/// A CPU set as the kernel prints cpumaps: 32-bit hex groups, most significant first, separated
/// by commas, over `nbits` bits (`nr_cpu_ids`); the first group only as wide as it needs.
pub fn mask_string(set: &super::CpuSet, nbits: u32) -> String {
    let nbits = nbits.max(1);
    let groups = nbits.div_ceil(32);
    let mut parts = Vec::with_capacity(groups as usize);
    for g in (0..groups).rev() {
        let mut word: u32 = 0;
        for b in 0..32 {
            if set.contains(g * 32 + b) {
                word |= 1 << b;
            }
        }
        let width = if g == groups - 1 {
            let bits = nbits - g * 32;
            bits.div_ceil(4) as usize
        } else {
            8
        };
        parts.push(format!("{word:0width$x}"));
    }
    parts.join(",")
}

#[cfg(test)]
mod tests;
