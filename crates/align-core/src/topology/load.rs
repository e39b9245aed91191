//! The one topology loader of every CLI verb: a host description (a file, a shipped name, or a
//! `nri-align topology --json` capture), an hwloc XML capture, or sysfs/procfs under a root;
//! the last two enriched through an NVML library when one is named (and, for the live host `/`,
//! through the system's).

use std::path::{Path, PathBuf};

use super::{desc::HostDesc, hwloc, nvml, DiscoverError, Topology};

/// Where the host picture comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A host description: a YAML/JSON file, the name of a shipped one (`dgx-h100`), or a
    /// `.json` topology captured with `nri-align topology --json`.
    Description(String),
    /// An hwloc v2 XML capture (`lstopo --of xml`).
    HwlocXml(PathBuf),
    /// sysfs and procfs under this directory (`/` for this machine).
    HostRoot(PathBuf),
}

/// Why the topology could not be loaded; each names its source.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A captured topology file could not be read.
    #[error("reading {path}")]
    Capture {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The host description is missing or invalid.
    #[error("loading host description {name}")]
    Description {
        /// What was asked for.
        name: String,
        /// Cause.
        #[source]
        source: super::desc::DescError,
    },
    /// The hwloc capture could not be imported.
    #[error("importing hwloc XML {}", path.display())]
    Hwloc {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: hwloc::HwlocError,
    },
    /// The NVML library that was named explicitly failed.
    #[error("NVML from {}: {source}", lib.display())]
    Nvml {
        /// The library.
        lib: PathBuf,
        /// What NVML said.
        source: nvml::NvmlError,
    },
    /// The tree under a root could not be read.
    #[error("reading the topology under {}", root.display())]
    HostRoot {
        /// The root.
        root: PathBuf,
        /// Cause.
        #[source]
        source: DiscoverError,
    },
}

/// Loads the topology from `source`. `nvml_lib` enriches an hwloc capture or a tree under a
/// root (a description already says what its GPUs are linked with, so it is not asked there).
pub fn load(source: &Source, nvml_lib: Option<&Path>) -> Result<Topology, LoadError> {
    match source {
        Source::Description(name) => {
            // A capture of `nri-align topology --json` replays as it is; anything else is a
            // host description (its JSON form included).
            if name.ends_with(".json") {
                let text = std::fs::read_to_string(name).map_err(|source| LoadError::Capture {
                    path: name.clone(),
                    source,
                })?;
                if let Ok(topo) = serde_json::from_str::<Topology>(&text) {
                    return Ok(topo);
                }
            }
            let desc = HostDesc::load(name).map_err(|source| LoadError::Description {
                name: name.clone(),
                source,
            })?;
            Ok(desc.to_topology())
        }
        Source::HwlocXml(path) => {
            let mut topo = hwloc::import_file(path).map_err(|source| LoadError::Hwloc {
                path: path.clone(),
                source,
            })?;
            // A capture describes another machine: only an explicit NVML library applies.
            if let Some(lib) = nvml_lib {
                nvml::enrich(&mut topo, Some(lib)).map_err(|source| LoadError::Nvml {
                    lib: lib.to_path_buf(),
                    source,
                })?;
            }
            Ok(topo)
        }
        Source::HostRoot(root) => {
            super::discover(root, nvml_lib).map_err(|source| LoadError::HostRoot {
                root: root.clone(),
                source,
            })
        }
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
