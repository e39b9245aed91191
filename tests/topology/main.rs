//! Reading hosts: sysfs fixtures and their quirks, hwloc's lstopo on the same trees, and emulated
//! hosts read back through sysfs, lstopo and the fake NVML library.

mod emulate_roundtrip;
mod gpu_check;
mod hwloc_corpus;
mod lstopo;
mod picture_browser;
mod quirks;
mod sysfs;
