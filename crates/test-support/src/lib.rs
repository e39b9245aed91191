//! The test harnesses of the workspace, one crate instead of files each test binary included
//! by path: every item here is `pub`, used by some test binary, none by production code.
//!
//! - [`e2e`]: private containerd / CRI-O instances, the CRI client, pod and container specs,
//!   nri-align as an NRI plugin or daemon, the kubelet's requests.
//! - [`nri_sim`]: a simulated NRI runtime over the real mux and ttrpc services, and a plugin.
//! - [`bench`](mod@bench): the benches' simulated runtime, with pods and containers as
//!   containerd sends them.
//! - [`apiserver`]: a real Kubernetes API server with the NodeResourceTopology CRD.
//! - [`testfs`]: small real filesystems that fill up or turn read-only.
//! - [`skip`](mod@skip): the one way a test skips, seen in every run and failing in CI.
//! - [`rng`]: the seeded generator of the soak and the fuzzer.
//! - `lstopo` and `requests` (feature `core`): hwloc's view of a sysfs tree against
//!   align-core's, placement requests; align-core's own tests use them without the runtime
//!   harnesses (feature `runtime`, the default).
//! - `daemon` (feature `align`): the daemon driven over its state directory and its NRI socket,
//!   with nri-align's own types.

#[cfg(feature = "runtime")]
pub mod apiserver;
#[cfg(feature = "runtime")]
pub mod bench;
#[cfg(feature = "align")]
pub mod daemon;
#[cfg(feature = "runtime")]
pub mod e2e;
#[cfg(feature = "core")]
pub mod lstopo;
#[cfg(feature = "runtime")]
pub mod nri_sim;
#[cfg(feature = "core")]
pub mod requests;
pub mod rng;
pub mod skip;
#[cfg(feature = "runtime")]
pub mod testfs;

use std::path::{Path, PathBuf};

/// Root of the repository (where the workspace's Cargo.toml and hack/ are).
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    // crates/test-support -> the repository.
    here.ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| here.to_path_buf())
}

/// The nri-align binary under test: `$NRI_ALIGN_BIN` when set (hack/vm-e2e's guest runs the test
/// binary away from cargo's target directory), else the `nri-align` cargo built beside this test
/// binary (`target/<profile>/deps/<test>` -> `target/<profile>/nri-align`). A library cannot read
/// `CARGO_BIN_EXE_nri-align`: cargo sets it for the root package's own test targets only.
pub fn nri_align_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("NRI_ALIGN_BIN").filter(|b| !b.is_empty()) {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let deps = exe.parent().unwrap_or(Path::new("."));
    let profile = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().unwrap_or(deps)
    } else {
        deps
    };
    profile.join("nri-align")
}

/// The fake libnvidia-ml cargo built beside this test binary (`fake-nvml` must be a
/// dev-dependency of the package under test).
pub fn fake_nvml() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let lib = exe
        .parent()
        .unwrap_or(Path::new("."))
        .join("libfake_nvml.so");
    assert!(
        lib.is_file(),
        "{} missing: is fake-nvml a dev-dependency?",
        lib.display()
    );
    lib
}
