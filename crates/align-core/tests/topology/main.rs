//! Reading hosts: sysfs fixtures and their quirks, hwloc's lstopo on the same trees, and emulated
//! hosts read back through sysfs, lstopo and the fake NVML library.

mod emulate_roundtrip;
mod hwloc_corpus;
mod lstopo;
mod quirks;
mod sysfs;
