//! Fake NVML: serves an emulated host's GPU fixture through the NVML C ABI (skeleton; see issue 3).
