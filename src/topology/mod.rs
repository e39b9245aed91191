//! Host topology: the model, how it is read (sysfs under a root, NVML, hwloc XML), emulated
//! host descriptions, and the human/JSON report.

pub mod desc;
pub mod emulate;
pub mod idset;
pub mod model;
pub mod nvml;

pub use idset::{CpuSet, IdSet, NodeSet};
pub use model::*;
