//! Sets `NRI_ALIGN_GIT_REVISION` (the `nri_align_build_info` metric's `revision`) and
//! `NRI_ALIGN_VERSION` (`nri-align --version`).
//!
//! The revision: the environment variable `NRI_ALIGN_REVISION` (or its older name
//! `NRI_ALIGN_GIT_REVISION`) when set (builds from a source tarball, packagers), else
//! `git rev-parse --short=12 HEAD` with `-dirty` when the sources of the binary differ from
//! that commit, else `unknown` (no git, not a checkout).
//!
//! The version, so that a change of code changes it: `VERSION+REVISION` (semver build
//! metadata) for a release build (HEAD is the clean tag `vVERSION`, or `NRI_ALIGN_RELEASE=1`
//! for a release built outside git) or a package version that already is a pre-release
//! (`0.3.0-dev`); otherwise the sources are past the release in Cargo.toml, on the way to the
//! next minor one: `0.3.0-dev+REVISION` while Cargo.toml still says 0.2.0.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the binary is built from: a change elsewhere (docs, tests) does not make it dirty.
const SOURCES: &[&str] = &[
    "src",
    "crates",
    "proto",
    "Cargo.toml",
    "Cargo.lock",
    "build.rs",
];

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    for var in [
        "NRI_ALIGN_REVISION",
        "NRI_ALIGN_GIT_REVISION",
        "NRI_ALIGN_RELEASE",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let forced = ["NRI_ALIGN_REVISION", "NRI_ALIGN_GIT_REVISION"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|r| !r.trim().is_empty()));
    let revision = match forced {
        Some(r) => r.trim().to_string(),
        None => from_git().unwrap_or_else(|| "unknown".into()),
    };
    println!("cargo:rustc-env=NRI_ALIGN_GIT_REVISION={revision}");
    let package = env!("CARGO_PKG_VERSION");
    let release = std::env::var("NRI_ALIGN_RELEASE").is_ok_and(|v| v == "1")
        || (!revision.ends_with("-dirty") && tagged(&format!("v{package}")));
    let version = version(package, &revision, release);
    println!("cargo:rustc-env=NRI_ALIGN_VERSION={version}");
}

/// `package+revision` for a release or a pre-release package version, else the next minor
/// version in development. Build metadata allows only `[0-9A-Za-z-]` (dot-separated).
fn version(package: &str, revision: &str, release: bool) -> String {
    let meta: String = revision
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if release || package.contains('-') {
        return format!("{package}+{meta}");
    }
    let mut parts = package.split('.').map(|p| p.parse::<u64>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => format!("{major}.{}.0-dev+{meta}", minor + 1),
        _ => format!("{package}-dev+{meta}"),
    }
}

/// Whether HEAD carries tag `tag`.
fn tagged(tag: &str) -> bool {
    git(&["tag", "--points-at", "HEAD"]).is_some_and(|out| out.lines().any(|t| t == tag))
}

fn from_git() -> Option<String> {
    let head = git(&["rev-parse", "--short=12", "HEAD"])?;
    // Run again when HEAD moves (a commit, a checkout) or the sources change; in a worktree
    // `--git-path` names the worktree's HEAD and the shared refs.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut watch = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(git(&["rev-parse", "--git-path", &branch]));
    }
    watch.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    // A release tag made on HEAD turns the version into the release's.
    watch.push(git(&["rev-parse", "--git-path", "refs/tags"]));
    for p in watch.into_iter().flatten() {
        let p = Path::new(&p);
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            root.join(p)
        };
        // A path that does not exist would make cargo run this script on every build.
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--"];
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
        status.push(s);
    }
    let dirty = git(&status).is_some_and(|out| !out.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}
