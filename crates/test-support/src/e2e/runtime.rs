//! The container runtimes the end-to-end suites run on: containerd 1.7 and 2.1 from Debian
//! (hack/containerd-up), containerd 2.3 and CRI-O 1.34 built from source (hack/containerd-up
//! v2.3 from shared/containerd-2.3 or `$CONTAINERD_23`; hack/crio-up from shared/crio or
//! `$CRIO`); what differs between them; [`each_runtime!`](crate::each_runtime), which turns one
//! suite function into one test per runtime, and [`each_cdi_runtime!`](crate::each_cdi_runtime),
//! which adds containerd 2.3 for the suites its CDI names matter to.

use std::path::PathBuf;
use std::process::Command;

use super::{describe, repo_root, run_cmd, skip_unless_root, Flavor};

/// Exit status of `hack/crio-up` when no CRI-O build is found (CRIO_MISSING_RC in
/// hack/crio-lib.sh): the only case in which a CRI-O test skips. `hack/containerd-up --locate
/// v2.3` exits with the same status when no containerd 2.3 build is found
/// (CONTAINERD_MISSING_RC in hack/lib.sh).
const CRIO_MISSING_RC: i32 = 3;

/// A container runtime the harness can bring up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// containerd from Debian, cgroupfs driver.
    Containerd(Flavor),
    /// CRI-O 1.34 (NRI v0.10.0), cgroupfs driver on this host.
    Crio,
}

impl From<Flavor> for Runtime {
    fn from(f: Flavor) -> Self {
        Runtime::Containerd(f)
    }
}

impl Runtime {
    /// containerd 1.7.x from Debian trixie (NRI v0.6.1).
    pub const CONTAINERD_1_7: Runtime = Runtime::Containerd(Flavor::Trixie);
    /// containerd 2.1.x from Debian sid (NRI v0.8).
    pub const CONTAINERD_2_1: Runtime = Runtime::Containerd(Flavor::Sid);
    /// containerd 2.3.x built from source (NRI v0.12).
    pub const CONTAINERD_2_3: Runtime = Runtime::Containerd(Flavor::V2_3);
    /// Every runtime.
    pub const ALL: [Runtime; 4] = [
        Self::CONTAINERD_1_7,
        Self::CONTAINERD_2_1,
        Self::CONTAINERD_2_3,
        Runtime::Crio,
    ];

    /// Name for messages: `containerd-1.7`, `containerd-2.1`, `containerd-2.3`, `cri-o`.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Containerd(Flavor::Trixie) => "containerd-1.7",
            Runtime::Containerd(Flavor::Sid) => "containerd-2.1",
            Runtime::Containerd(Flavor::V2_3) => "containerd-2.3",
            Runtime::Crio => "cri-o",
        }
    }

    /// Whether the runtime hands a container's CRI `CDI_devices` names to NRI plugins
    /// (`Container.CDI_devices`): containerd from 2.3.0 (commit "cri,nri: pass injected CDI
    /// devices to plugins"). containerd 1.7 and 2.1 do not, nor does CRI-O 1.34 (its
    /// `internal/nri/container.go` sets none): there nri-align matches the device nodes the
    /// runtime injected back to the specs.
    pub fn sends_cdi_devices(self) -> bool {
        self == Self::CONTAINERD_2_3
    }

    /// `RuntimeName` in the CRI Version answer (and `runtime_name` in NRI Configure).
    pub fn cri_name(self) -> &'static str {
        match self {
            Runtime::Containerd(_) => "containerd",
            Runtime::Crio => "cri-o",
        }
    }

    /// Prefix of the version the harness's build reports.
    pub fn version_prefix(self) -> &'static str {
        match self {
            Runtime::Containerd(Flavor::Trixie) => "1.7.",
            Runtime::Containerd(Flavor::Sid) => "2.1.",
            Runtime::Containerd(Flavor::V2_3) => "2.3.",
            Runtime::Crio => "1.34.",
        }
    }

    /// The NRI release this build vendors, as nri-align logs it (`NRI v0.8.0, inferred`).
    pub fn nri_version(self) -> &'static str {
        match self {
            Runtime::Containerd(Flavor::Trixie) => "v0.6.1",
            Runtime::Containerd(Flavor::Sid) => "v0.8",
            Runtime::Containerd(Flavor::V2_3) => "v0.12.2",
            Runtime::Crio => "v0.10.0",
        }
    }

    /// Whether the runtime sends Synchronize to a plugin it launched itself (NRI v0.6.1 does
    /// not).
    pub fn synchronizes_launched_plugins(self) -> bool {
        self != Self::CONTAINERD_1_7
    }

    /// Whether a pre-launched plugin that never registers stops the runtime from starting
    /// (NRI v0.6.1: "failed to start NRI interface"); later NRI drops the plugin and goes on.
    pub fn fails_on_unregistered_launched_plugin(self) -> bool {
        self == Self::CONTAINERD_1_7
    }

    /// The hack script that brings an instance up, with its arguments.
    pub(super) fn up_command(self, name: &str) -> Command {
        match self {
            Runtime::Containerd(f) => {
                let mut c = Command::new(repo_root().join("hack/containerd-up"));
                c.args([f.name(), name]);
                c
            }
            Runtime::Crio => {
                let mut c = Command::new(repo_root().join("hack/crio-up"));
                c.arg(name);
                c
            }
        }
    }

    /// The hack script that stops an instance and removes what it left.
    pub(super) fn down_command(self, name: &str) -> Command {
        match self {
            Runtime::Containerd(f) => {
                let mut c = Command::new(repo_root().join("hack/containerd-down"));
                c.args([f.name(), name]);
                c
            }
            Runtime::Crio => {
                let mut c = Command::new(repo_root().join("hack/crio-down"));
                c.arg(name);
                c
            }
        }
    }

    /// Where this runtime comes from: `Ok(None)` for the Debian packages hack/ downloads,
    /// `Ok(Some(path))` for a build from source (CRI-O's binary, containerd 2.3's directory),
    /// `Err(why)` when no such build is found.
    pub fn locate(self) -> Result<Option<PathBuf>, String> {
        let mut cmd = match self {
            Runtime::Containerd(Flavor::V2_3) => {
                let mut c = Command::new(repo_root().join("hack/containerd-up"));
                c.args(["--locate", "v2.3"]);
                c
            }
            Runtime::Containerd(_) => return Ok(None),
            Runtime::Crio => {
                let mut c = Command::new(repo_root().join("hack/crio-up"));
                c.arg("--locate");
                c
            }
        };
        let what = format!("locating {}", self.name());
        let out = run_cmd(&mut cmd, &what).map_err(|e| e.0)?;
        match out.status.code() {
            Some(0) => Ok(Some(PathBuf::from(
                String::from_utf8_lossy(&out.stdout).trim(),
            ))),
            Some(CRIO_MISSING_RC) => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            _ => panic!("{what} failed: {}", describe(&out)),
        }
    }

    /// The env variable that turns a missing build of this runtime into a failure instead of a
    /// skip (`None`: the runtime comes from a registry and is never missing).
    pub fn require_var(self) -> Option<&'static str> {
        match self {
            Runtime::Containerd(Flavor::V2_3) => Some("NRI_ALIGN_REQUIRE_CONTAINERD_2_3"),
            Runtime::Containerd(_) => None,
            Runtime::Crio => Some("NRI_ALIGN_REQUIRE_CRIO"),
        }
    }
}

/// Returns `true` (after printing why) when the end-to-end test `test` on `runtime` may not
/// run here: without root (see [`skip_unless_root`]), or on a runtime built from source (CRI-O,
/// containerd 2.3: in no package registry; the hack script says where it looked) when no build
/// is found and its [`Runtime::require_var`] (`NRI_ALIGN_REQUIRE_CRIO=1`,
/// `NRI_ALIGN_REQUIRE_CONTAINERD_2_3=1`) is not set, nor `NRI_ALIGN_FORBID_SKIPS=1` (see
/// [`crate::skip`]). Any other problem fails the test.
pub fn skip_unless_ready(runtime: Runtime, test: &str) -> bool {
    if skip_unless_root(test) {
        return true;
    }
    let rt = runtime.name();
    match runtime.locate() {
        Ok(_) => false,
        Err(why)
            if runtime
                .require_var()
                .is_some_and(|v| std::env::var(v).as_deref() == Ok("1")) =>
        {
            let var = runtime.require_var().unwrap_or_default();
            panic!("{test}: no {rt} build and {var}=1: {why}")
        }
        Err(why) => {
            crate::skip::skip(test, &format!("no {rt} build: {why}"));
            true
        }
    }
}

/// One `#[test]` per runtime for each suite function `fn suite(runtime: Runtime)`, in a module
/// of the suite's name: `suite::containerd_1_7`, `suite::containerd_2_1`, `suite::crio`, so
/// `cargo test --test BINARY crio` runs one runtime's tests.
#[macro_export]
macro_rules! each_runtime {
    ($($suite:ident),+ $(,)?) => {$(
        mod $suite {
            #[test]
            fn containerd_1_7() {
                super::$suite($crate::e2e::Runtime::CONTAINERD_1_7);
            }

            #[test]
            fn containerd_2_1() {
                super::$suite($crate::e2e::Runtime::CONTAINERD_2_1);
            }

            #[test]
            fn crio() {
                super::$suite($crate::e2e::Runtime::Crio);
            }
        }
    )+};
}

/// [`each_runtime!`](crate::each_runtime) plus `suite::containerd_2_3`, for the suites whose
/// subject is the CDI names a runtime sends (the device and DRA suites): containerd 2.3 is the
/// only runtime that sends the CRI `CDI_devices` names to NRI. The other suites do not run on
/// it, which keeps its cost to CI at those suites.
#[macro_export]
macro_rules! each_cdi_runtime {
    ($($suite:ident),+ $(,)?) => {$(
        mod $suite {
            #[test]
            fn containerd_1_7() {
                super::$suite($crate::e2e::Runtime::CONTAINERD_1_7);
            }

            #[test]
            fn containerd_2_1() {
                super::$suite($crate::e2e::Runtime::CONTAINERD_2_1);
            }

            #[test]
            fn containerd_2_3() {
                super::$suite($crate::e2e::Runtime::CONTAINERD_2_3);
            }

            #[test]
            fn crio() {
                super::$suite($crate::e2e::Runtime::Crio);
            }
        }
    )+};
}
