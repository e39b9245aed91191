//! Host topology: the model, how it is read (sysfs under a root, NVML, hwloc XML), emulated
//! host descriptions, and the human/JSON report.
//!
//! May use: `untrusted` only. It reads sysfs and procfs only under the root it is given and NVML
//! only through [`nvml`]; it describes a host, never acts on one.

pub mod desc;
pub mod emulate;
pub mod hwloc;
pub mod idset;
pub mod load;
pub mod model;
pub mod nvml;
pub mod picture;
pub mod report;
pub mod sysfs;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use idset::{CpuSet, IdSet, NodeSet};
pub use model::*;
pub use sysfs::{read_host, read_host_checked, read_online, Online, OnlineError, TopologyError};

use std::path::Path;

/// Why the host topology could not be discovered.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    /// The sysfs/procfs tree could not be read.
    #[error(transparent)]
    Read(#[from] TopologyError),
    /// An NVML library the user named explicitly failed.
    #[error("NVML from {lib}: {source}")]
    Nvml {
        /// The library that was asked for.
        lib: std::path::PathBuf,
        /// What NVML said.
        source: nvml::NvmlError,
    },
}

/// Reads the host under `host_root` (sysfs + procfs) and enriches its GPUs through NVML.
///
/// The system's NVML describes this machine only, so it is asked when reading the live host
/// (`/`), never for another machine's tree; an explicit `nvml_lib` (such as the fake NVML of an
/// emulated tree) is always used, and its failure is an error the user asked to see. Without an
/// explicit library a missing driver only means "no link data".
pub fn discover(host_root: &Path, nvml_lib: Option<&Path>) -> Result<Topology, DiscoverError> {
    let mut topo = read_host(host_root)?;
    let live_host = host_root == Path::new("/");
    if nvml_lib.is_some() || live_host {
        if let Err(source) = nvml::enrich(&mut topo, nvml_lib) {
            match nvml_lib {
                Some(lib) => {
                    return Err(DiscoverError::Nvml {
                        lib: lib.to_path_buf(),
                        source,
                    })
                }
                None => tracing::debug!("NVML not used: {source}"),
            }
        }
    }
    Ok(topo)
}
