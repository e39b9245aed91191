//! A container's cgroup as the runtime names it (OCI `linux.cgroupsPath`), turned into a path
//! below a cgroup hierarchy's root that cannot leave it. Two forms exist:
//!
//! - cgroupfs driver: a path, `/k8s.io/ID` (containerd), `/kubepods/burstable/podUID/ID`,
//!   `PARENT/crio-ID` (CRI-O);
//! - systemd driver: `slice:prefix:name`, which runc turns into the scope `prefix-name.scope`
//!   inside the nested slices of `slice` (`kubepods-burstable-podUID.slice:cri-containerd:ID`
//!   -> `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podUID.slice/
//!   cri-containerd-ID.scope`; CRI-O: `crio-ID.scope`, its conmon in `crio-conmon-ID.scope`).
//!
//! cgroups-rs has no notion of either form (it takes a path below its hierarchy and would
//! follow an absolute one or `..` anywhere: its controllers `PathBuf::push` what they are
//! given), so the mapping lives here, written from runc's `ExpandSlice` and `getUnitName`
//! (libcontainer/cgroups/systemd/common.go). Runtime input is never trusted: `..`, NUL bytes,
//! slashes inside a systemd unit name, malformed slices and over-long paths are errors, so no
//! later join can leave the hierarchy.

use std::path::PathBuf;

/// Longest `cgroupsPath` accepted (PATH_MAX).
pub const MAX_CGROUPS_PATH: usize = 4096;

/// Which cgroup driver named the container's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupDriver {
    /// A plain path (`SystemdCgroup = false`, `cgroup_manager = "cgroupfs"`).
    Cgroupfs,
    /// `slice:prefix:name` (runc's systemd driver).
    Systemd,
}

/// Why a runtime's cgroups path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CgroupPathError {
    /// Nothing given.
    #[error("empty cgroups path")]
    Empty,
    /// Longer than any real path.
    #[error("cgroups path of {len} bytes is longer than {MAX_CGROUPS_PATH}")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// A `..` component: it would leave the cgroup root.
    #[error("cgroups path {path:?} has a `..` component (it would leave the cgroup root)")]
    Escapes {
        /// The path (shortened).
        path: String,
    },
    /// A NUL byte (no real path has one).
    #[error("cgroups path {path:?} has a NUL byte")]
    Nul {
        /// The path (shortened).
        path: String,
    },
    /// A malformed systemd form.
    #[error("systemd cgroups path {path:?}: {why}")]
    Systemd {
        /// The path (shortened).
        path: String,
        /// What is wrong.
        why: String,
    },
}

/// A container's cgroup, relative to a hierarchy root: every component a single name, none
/// of them `.` or `..`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerCgroup {
    driver: CgroupDriver,
    components: Vec<String>,
}

/// Runtime input in error messages: at most 160 characters of it.
pub(crate) fn shown(s: &str) -> String {
    match s.char_indices().nth(160) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

impl ContainerCgroup {
    /// Parses `linux.cgroupsPath` as the runtime gave it.
    pub fn parse(cgroups_path: &str) -> Result<Self, CgroupPathError> {
        if cgroups_path.len() > MAX_CGROUPS_PATH {
            return Err(CgroupPathError::TooLong {
                len: cgroups_path.len(),
            });
        }
        if cgroups_path.contains('\0') {
            return Err(CgroupPathError::Nul {
                path: shown(cgroups_path),
            });
        }
        if cgroups_path.trim().is_empty() {
            return Err(CgroupPathError::Empty);
        }
        if cgroups_path.contains(':') {
            return Self::parse_systemd(cgroups_path);
        }
        let mut components = Vec::new();
        for c in cgroups_path.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    return Err(CgroupPathError::Escapes {
                        path: shown(cgroups_path),
                    })
                }
                c => components.push(c.to_string()),
            }
        }
        // `/` alone is the root cgroup: no container lives there.
        if components.is_empty() {
            return Err(CgroupPathError::Empty);
        }
        Ok(Self {
            driver: CgroupDriver::Cgroupfs,
            components,
        })
    }

    /// `slice:prefix:name`, as runc's systemd driver reads it: an empty slice is
    /// `system.slice`, the unit is `prefix-name.scope` unless `name` is itself a slice.
    fn parse_systemd(path: &str) -> Result<Self, CgroupPathError> {
        let bad = |why: &str| CgroupPathError::Systemd {
            path: shown(path),
            why: why.to_string(),
        };
        let parts: Vec<&str> = path.split(':').collect();
        let [slice, prefix, name] = parts.as_slice() else {
            return Err(bad("expected slice:prefix:name"));
        };
        let slice = if slice.is_empty() {
            "system.slice"
        } else {
            slice
        };
        let mut components = expand_slice(slice).map_err(|why| bad(&why))?;
        for (what, part) in [("prefix", prefix), ("name", name)] {
            if part.contains('/') || *part == "." || *part == ".." {
                return Err(bad(&format!("{what} {:?} is not a unit name", shown(part))));
            }
        }
        if name.is_empty() {
            return Err(bad("empty container name"));
        }
        components.push(if name.ends_with(".slice") {
            name.to_string()
        } else {
            format!("{prefix}-{name}.scope")
        });
        Ok(Self {
            driver: CgroupDriver::Systemd,
            components,
        })
    }

    /// The driver that named it.
    pub fn driver(&self) -> CgroupDriver {
        self.driver
    }

    /// The path below the hierarchy root (no leading `/`).
    pub fn relative(&self) -> PathBuf {
        self.components.iter().collect()
    }

    /// The path as `/proc/PID/cgroup` lists it (`/a/b`).
    pub fn proc_path(&self) -> String {
        format!("/{}", self.components.join("/"))
    }

    /// The components below the hierarchy root.
    pub fn components(&self) -> &[String] {
        &self.components
    }

    /// Whether a process whose cgroup is `proc_path` (as `/proc/PID/cgroup` lists it) runs in
    /// this cgroup or below it: whole components compare, so `/k8s.io/a` does not hold
    /// `/k8s.io/ab`, and `crio-ID.scope` does not hold `crio-conmon-ID.scope`.
    pub fn holds(&self, proc_path: &str) -> bool {
        let mut theirs = proc_path.split('/').filter(|c| !c.is_empty());
        self.components
            .iter()
            .all(|mine| theirs.next() == Some(mine.as_str()))
    }
}

/// The nested slices systemd makes of a slice name (`a-b.slice` -> `a.slice`, `a-b.slice`),
/// with runc's `ExpandSlice` checks: it must end in `.slice`, hold no `/`, and have no empty
/// dash-separated part (`a--b.slice`, `-a.slice`); `-.slice` is the root.
pub fn expand_slice(slice: &str) -> Result<Vec<String>, String> {
    let Some(stem) = slice.strip_suffix(".slice") else {
        return Err(format!("slice {:?} does not end in .slice", shown(slice)));
    };
    if slice.contains('/') {
        return Err(format!("slice {:?} has a /", shown(slice)));
    }
    if stem == "-" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let mut prefix = String::new();
    for part in stem.split('-') {
        if part.is_empty() {
            return Err(format!(
                "slice {:?} has an empty dash-separated part",
                shown(slice)
            ));
        }
        prefix.push_str(part);
        out.push(format!("{prefix}.slice"));
        prefix.push('-');
    }
    Ok(out)
}

/// Runtime prefixes of container scopes (`cri-containerd-ID.scope`, `crio-ID.scope`, ...).
const SCOPE_PREFIXES: [&str; 4] = ["cri-containerd", "crio", "docker", "libpod"];

/// Whether one cgroup path component is container `id`'s own cgroup, for records without a
/// cgroups path: `ID` (containerd's cgroupfs form), `crio-ID` (CRI-O's), or a runtime's scope
/// `PREFIX-ID.scope`. Never a monitor's (`crio-conmon-ID`), never a substring.
pub fn names_container(component: &str, id: &str) -> bool {
    !id.is_empty() && !id.contains('/') && container_names(component).any(|n| n == id)
}

/// Every container id that cgroup path component `component` can be the own cgroup of (see
/// [`names_container`]): itself, what follows `crio-`, and the id of a runtime's scope. One
/// definition serves both the pairwise check and the index of a host's processes by id.
pub fn container_names(component: &str) -> impl Iterator<Item = &str> {
    let scope = component.strip_suffix(".scope");
    std::iter::once(component)
        .chain(component.strip_prefix("crio-"))
        .chain(
            SCOPE_PREFIXES
                .iter()
                .filter_map(move |p| scope?.strip_prefix(p)?.strip_prefix('-')),
        )
}

#[cfg(test)]
#[path = "path_tests.rs"]
mod tests;
