//! NVML enrichment of a [`Topology`] (placeholder until the real NVML module lands: helper C2
//! owns it). Keeps the signature the CLI calls so the branches merge without edits.

use std::path::Path;

use super::model::Topology;

/// Why NVML could not enrich the topology.
#[derive(Debug, thiserror::Error)]
pub enum NvmlError {
    /// NVML support is not built into this branch yet.
    #[error("NVML support is not available in this build")]
    Unavailable,
}

/// Adds what NVML knows (UUIDs, minors, NVLink, MIG) to the GPUs found in the PCI tree.
/// Placeholder: leaves the topology unchanged.
pub fn enrich(_topo: &mut Topology, _lib: Option<&Path>) -> Result<(), NvmlError> {
    Ok(())
}
