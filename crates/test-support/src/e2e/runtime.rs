//! The container runtimes the end-to-end suites run on: containerd 1.7 and 2.1 from Debian
//! (hack/containerd-up) and CRI-O 1.34 built from source (hack/crio-up, from shared/crio or
//! `$CRIO`); what differs between them; and [`each_runtime!`](crate::each_runtime), which turns
//! one suite function into one test per runtime.

use std::path::PathBuf;
use std::process::Command;

use super::{describe, repo_root, run_cmd, skip_unless_root, Flavor};

/// Exit status of `hack/crio-up` when no CRI-O build is found (CRIO_MISSING_RC in
/// hack/crio-lib.sh): the only case in which a CRI-O test skips.
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
    /// Every runtime, oldest NRI first.
    pub const ALL: [Runtime; 3] = [Self::CONTAINERD_1_7, Self::CONTAINERD_2_1, Runtime::Crio];

    /// Name for messages: `containerd-1.7`, `containerd-2.1`, `cri-o`.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Containerd(Flavor::Trixie) => "containerd-1.7",
            Runtime::Containerd(Flavor::Sid) => "containerd-2.1",
            Runtime::Crio => "cri-o",
        }
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
            Runtime::Crio => "1.34.",
        }
    }

    /// The NRI release this build vendors, as nri-align logs it (`NRI v0.8.0, inferred`).
    pub fn nri_version(self) -> &'static str {
        match self {
            Runtime::Containerd(Flavor::Trixie) => "v0.6.1",
            Runtime::Containerd(Flavor::Sid) => "v0.8",
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
    /// `Ok(Some(binary))` for CRI-O, `Err(why)` when no CRI-O build is found.
    pub fn locate(self) -> Result<Option<PathBuf>, String> {
        match self {
            Runtime::Containerd(_) => Ok(None),
            Runtime::Crio => {
                let out = run_cmd(
                    Command::new(repo_root().join("hack/crio-up")).arg("--locate"),
                    "hack/crio-up --locate",
                )
                .map_err(|e| e.0)?;
                match out.status.code() {
                    Some(0) => Ok(Some(PathBuf::from(
                        String::from_utf8_lossy(&out.stdout).trim(),
                    ))),
                    Some(CRIO_MISSING_RC) => {
                        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
                    }
                    _ => panic!("hack/crio-up --locate failed: {}", describe(&out)),
                }
            }
        }
    }
}

/// Returns `true` (after printing why) when the end-to-end test `test` on `runtime` may not
/// run here: without root (see [`skip_unless_root`]), or on CRI-O when no CRI-O build is found
/// (it is in no package registry; hack/crio-up says where it looked) and
/// `NRI_ALIGN_REQUIRE_CRIO=1` is not set. Any other problem fails the test.
pub fn skip_unless_ready(runtime: Runtime, test: &str) -> bool {
    if skip_unless_root(test) {
        return true;
    }
    match runtime.locate() {
        Ok(_) => false,
        Err(why) if std::env::var("NRI_ALIGN_REQUIRE_CRIO").as_deref() == Ok("1") => {
            panic!("{test}: no CRI-O build and NRI_ALIGN_REQUIRE_CRIO=1: {why}")
        }
        Err(why) => {
            eprintln!("SKIP {test}: no CRI-O build: {why}");
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
