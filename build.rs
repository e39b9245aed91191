//! Sets `NRI_ALIGN_GIT_REVISION` for `nri-align --version` and `nri_align_build_info`: the
//! environment variable of that name when set (builds from a source tarball, packagers),
//! else `git rev-parse --short=12 HEAD` with `-dirty` when the sources of the binary differ
//! from that commit, else `unknown` (no git, not a checkout).

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
    println!("cargo:rerun-if-env-changed=NRI_ALIGN_GIT_REVISION");
    let revision = match std::env::var("NRI_ALIGN_GIT_REVISION") {
        Ok(r) if !r.trim().is_empty() => r.trim().to_string(),
        _ => from_git().unwrap_or_else(|| "unknown".into()),
    };
    println!("cargo:rustc-env=NRI_ALIGN_GIT_REVISION={revision}");
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
