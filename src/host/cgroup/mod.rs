//! cgroups: a container's cgroup from its runtime-given path (`path.rs`, both drivers), where
//! the cpuset hierarchy is mounted (`mounts.rs`: v1, v2, hybrid), reading a container's
//! `cpuset.cpus` / `cpuset.mems`, and the writes nri-align makes (repairing a cpuset the
//! runtime lost; memory nodes that follow CPUs another plugin set after creation; the CFS
//! quota of a pod holding exclusive CPUs, `quota.rs`). The reads and the writes go through cgroups-rs's cpuset and cpu controllers; every
//! path is confined to the hierarchy's mount before cgroups-rs sees it.

mod mounts;
mod path;
mod quota;

use std::path::{Path, PathBuf};

use cgroups_rs::fs::cpuset::CpuSetController;

pub use mounts::{CgroupMounts, Mount};
pub use path::{
    container_names, expand_slice, names_container, CgroupDriver, CgroupPathError, ContainerCgroup,
    MAX_CGROUPS_PATH,
};
pub use quota::{pod_components, set_pod_quota_under, PodQuota};

use crate::topology::idset::MAX_ID;
use crate::topology::IdSet;

/// Why a cgroup could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// The runtime's cgroups path was refused.
    #[error(transparent)]
    Path(#[from] CgroupPathError),
    /// A file or directory could not be used.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// cgroups-rs refused or failed.
    #[error("{}: {why}", path.display())]
    Cgroups {
        /// The cgroup directory.
        path: PathBuf,
        /// What cgroups-rs said.
        why: String,
    },
    /// Nothing would be written: an empty cpuset would let the container run anywhere.
    #[error("refusing to write an empty cpuset to {}", path.display())]
    EmptyCpuset {
        /// The cgroup directory.
        path: PathBuf,
    },
}

/// What a container's cpuset cgroup holds; each value or why it could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpusetState {
    /// The cgroup directory.
    pub dir: PathBuf,
    /// `cpuset.cpus`, or its effective value where cgroup v2 leaves it unset.
    pub cpus: Result<IdSet, String>,
    /// `cpuset.mems`, or its effective value where cgroup v2 leaves it unset.
    pub mems: Result<IdSet, String>,
}

impl CgroupMounts {
    /// The cpuset directory of `cg` when it exists (confined to the mount).
    pub fn cpuset_dir(&self, cg: &ContainerCgroup) -> Result<Option<PathBuf>, CgroupError> {
        let Some(mount) = self.cpuset() else {
            return Ok(None);
        };
        mount
            .dir_of(cg.components())
            .map_err(|source| CgroupError::Io {
                path: mount.point.join(cg.relative()),
                source,
            })
    }

    /// The memory cgroup directory of `cg` when it exists (confined to the mount), and
    /// whether it is cgroup v2's.
    pub fn memory_dir(&self, cg: &ContainerCgroup) -> Result<Option<(PathBuf, bool)>, CgroupError> {
        let Some(mount) = self.memory() else {
            return Ok(None);
        };
        match mount.dir_of(cg.components()) {
            Ok(dir) => Ok(dir.map(|d| (d, mount.v2))),
            Err(source) => Err(CgroupError::Io {
                path: mount.point.join(cg.relative()),
                source,
            }),
        }
    }

    /// Reads the cpuset of `cg`; `None` when that cgroup does not exist here.
    pub fn read_cpuset(&self, cg: &ContainerCgroup) -> Result<Option<CpusetState>, CgroupError> {
        let (Some(mount), Some(dir)) = (self.cpuset(), self.cpuset_dir(cg)?) else {
            return Ok(None);
        };
        let rel = relative_to(&dir, &mount.point);
        let cgroup = mount.cgroup(&rel);
        let Some(ctl) = cgroup.controller_of::<CpuSetController>() else {
            return Err(CgroupError::Cgroups {
                path: dir,
                why: "no cpuset controller".into(),
            });
        };
        let state = ctl.cpuset();
        // cgroups-rs reads the effective values under their v1 names
        // (`cpuset.effective_cpus`); cgroup v2 calls them `cpuset.cpus.effective`, which it
        // does not read, and v2 leaves `cpuset.cpus` empty until someone sets it.
        let value = |set: &[(u64, u64)], v1_effective: &[(u64, u64)], v2_file: &str| {
            if !set.is_empty() {
                return ranges(set);
            }
            if !mount.v2 {
                return ranges(v1_effective).and_then(|s| nonempty(s, &dir));
            }
            std::fs::read_to_string(dir.join(v2_file))
                .map_err(|e| format!("{v2_file}: {e}"))
                .and_then(|t| IdSet::parse_list(t.trim()).map_err(|e| e.to_string()))
                .and_then(|s| nonempty(s, &dir))
        };
        Ok(Some(CpusetState {
            cpus: value(&state.cpus, &state.effective_cpus, "cpuset.cpus.effective"),
            mems: value(&state.mems, &state.effective_mems, "cpuset.mems.effective"),
            dir,
        }))
    }

    /// Makes the cpuset of `cg` hold `want` when it holds something else; returns what it
    /// held then. `Ok(None)`: it matched, or the cgroup does not exist here.
    pub fn repair_cpus(
        &self,
        cg: &ContainerCgroup,
        want: &IdSet,
    ) -> Result<Option<IdSet>, CgroupError> {
        self.repair(cg, want, CpusetFile::Cpus)
    }

    /// [`CgroupMounts::repair_cpus`] for `cpuset.mems`: the memory nodes of a container whose
    /// CPUs another plugin set, moved after its creation to follow them.
    pub fn repair_mems(
        &self,
        cg: &ContainerCgroup,
        want: &IdSet,
    ) -> Result<Option<IdSet>, CgroupError> {
        self.repair(cg, want, CpusetFile::Mems)
    }

    fn repair(
        &self,
        cg: &ContainerCgroup,
        want: &IdSet,
        which: CpusetFile,
    ) -> Result<Option<IdSet>, CgroupError> {
        let Some(state) = self.read_cpuset(cg)? else {
            return Ok(None);
        };
        let has = match which {
            CpusetFile::Cpus => state.cpus,
            CpusetFile::Mems => state.mems,
        }
        .unwrap_or_default();
        if has == *want {
            return Ok(None);
        }
        if want.is_empty() {
            return Err(CgroupError::EmptyCpuset { path: state.dir });
        }
        // Only ever an existing regular file of a real cgroup: cgroups-rs opens it with
        // O_CREAT, which must never make a file where no cgroup is.
        let file = state.dir.join(which.file());
        existing_regular_file(&file)?;
        let Some(mount) = self.cpuset() else {
            return Ok(None);
        };
        let cgroup = mount.cgroup(&relative_to(&state.dir, &mount.point));
        let ctl =
            cgroup
                .controller_of::<CpuSetController>()
                .ok_or_else(|| CgroupError::Cgroups {
                    path: state.dir.clone(),
                    why: "no cpuset controller".into(),
                })?;
        match which {
            CpusetFile::Cpus => ctl.set_cpus(&want.to_string()),
            CpusetFile::Mems => ctl.set_mems(&want.to_string()),
        }
        .map_err(|e| CgroupError::Cgroups {
            path: state.dir.clone(),
            why: e.to_string(),
        })?;
        Ok(Some(has))
    }
}

/// Makes the cpuset cgroup of a container hold `want` when it holds something else (both
/// drivers, any hierarchy). Returns what it held when it changed it; `Ok(None)` when it already
/// matched or the cgroup does not exist. A cgroups path that would leave the cgroup root is an
/// error, and nothing is written.
///
/// For repairing what the runtime lost (the runtime already recorded `want` in the
/// container's spec, see `Engine::container_started`, the kernel just never got it), and for
/// a shared pool that grew at a removal, whose update reaches the runtime with its next
/// response (`AlignPlugin`'s doc comment).
pub fn repair_cpuset(cgroups_path: &str, want: &IdSet) -> Result<Option<IdSet>, CgroupError> {
    repair_cpuset_under(Path::new("/"), cgroups_path, want)
}

/// [`repair_cpuset`] on the host whose `/proc` and cgroup mounts are under `root`.
pub fn repair_cpuset_under(
    root: &Path,
    cgroups_path: &str,
    want: &IdSet,
) -> Result<Option<IdSet>, CgroupError> {
    CgroupMounts::read(root).repair_cpuset(cgroups_path, want)
}

impl CgroupMounts {
    /// [`repair_cpuset`] on these mounts: for many containers at once (a grown shared pool
    /// moves thousands), the mount table is read once, not once per container.
    pub fn repair_cpuset(
        &self,
        cgroups_path: &str,
        want: &IdSet,
    ) -> Result<Option<IdSet>, CgroupError> {
        let cg = ContainerCgroup::parse(cgroups_path)?;
        self.repair_cpus(&cg, want)
    }
}

/// [`repair_cpuset_under`] for `cpuset.mems` (see [`CgroupMounts::repair_mems`]).
pub fn repair_mems_under(
    root: &Path,
    cgroups_path: &str,
    want: &IdSet,
) -> Result<Option<IdSet>, CgroupError> {
    let cg = ContainerCgroup::parse(cgroups_path)?;
    CgroupMounts::read(root).repair_mems(&cg, want)
}

/// The cpuset file a repair writes.
#[derive(Debug, Clone, Copy)]
enum CpusetFile {
    Cpus,
    Mems,
}

impl CpusetFile {
    fn file(self) -> &'static str {
        match self {
            CpusetFile::Cpus => "cpuset.cpus",
            CpusetFile::Mems => "cpuset.mems",
        }
    }
}
/// Ok when `file` is an existing regular file (not followed if a link): cgroups-rs opens the
/// files it writes with `O_CREAT`, which must never make a file where no cgroup is.
pub(super) fn existing_regular_file(file: &Path) -> Result<(), CgroupError> {
    match std::fs::symlink_metadata(file) {
        Ok(md) if md.file_type().is_file() => Ok(()),
        Ok(_) => Err(CgroupError::Io {
            path: file.to_path_buf(),
            source: std::io::Error::other("not a regular file"),
        }),
        Err(source) => Err(CgroupError::Io {
            path: file.to_path_buf(),
            source,
        }),
    }
}

/// `dir` below `base` (both from the same confined join).
fn relative_to(dir: &Path, base: &Path) -> PathBuf {
    dir.strip_prefix(base)
        .unwrap_or(Path::new(""))
        .to_path_buf()
}

/// cgroups-rs's `(first, last)` ranges as a set, bounded like every id list.
fn ranges(r: &[(u64, u64)]) -> Result<IdSet, String> {
    let mut set = IdSet::new();
    for &(lo, hi) in r {
        if lo > hi || hi >= u64::from(MAX_ID) {
            return Err(format!("range {lo}-{hi} out of bounds"));
        }
        for id in lo..=hi {
            // Bounded by MAX_ID above.
            set.insert(id as u32);
        }
    }
    Ok(set)
}

fn nonempty(s: IdSet, dir: &Path) -> Result<IdSet, String> {
    if s.is_empty() {
        Err(format!("{}: empty or unreadable", dir.display()))
    } else {
        Ok(s)
    }
}

#[cfg(test)]
mod tests;
