//! Paths under a host's `/dev`, resolved the way the host would resolve them, but never out
//! of it: under `--host-root` a link's absolute target is the host's (`/dev/null` is
//! `ROOT/dev/null`, not the daemon's own), and a link that leads out of `/dev` (to `/etc`, up
//! with `..`, to the daemon's `/dev/null` from a fake host) resolves to nothing. A node found
//! this way is one the host itself has at that path, so a `/dev/nvidia0` planted as a link to
//! another device on the daemon's side is never handed to a container as that device.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// Most links followed in one resolution (the kernel's own limit, `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// The real path under `dev` (a host's `/dev`, under its root) of `rel` (a path relative to
/// `/dev`, plain names only), with every link followed only while it stays under `dev`;
/// `None` when `rel` is not a plain relative path, a part is missing, a link leads out of
/// `dev` or there are too many links. The last part is followed too when it is a link.
pub fn resolve(dev: &Path, rel: &str) -> Option<PathBuf> {
    let mut pending: VecDeque<OsString> = VecDeque::new();
    for part in rel.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return None;
        }
        pending.push_back(part.into());
    }
    let mut done: Vec<OsString> = Vec::new();
    let mut links = 0;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            // Up out of `dev` is out of bounds, not `dev` itself as the kernel's `/..` is.
            done.pop()?;
            continue;
        }
        if part == "." || part.is_empty() {
            continue;
        }
        let here: PathBuf = std::iter::once(dev.as_os_str())
            .chain(done.iter().map(|p| p.as_os_str()))
            .chain(std::iter::once(part.as_os_str()))
            .collect();
        let md = std::fs::symlink_metadata(&here).ok()?;
        if !md.file_type().is_symlink() {
            done.push(part);
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return None;
        }
        let target = std::fs::read_link(&here).ok()?;
        let parts = target_parts(&target, &mut done)?;
        for p in parts.into_iter().rev() {
            pending.push_front(p);
        }
    }
    Some(
        std::iter::once(dev.as_os_str())
            .chain(done.iter().map(|p| p.as_os_str()))
            .collect(),
    )
}

/// The parts of link `target` still to walk; an absolute target restarts at `dev` when it is
/// under `/dev`, and is out of bounds otherwise.
fn target_parts(target: &Path, done: &mut Vec<OsString>) -> Option<Vec<OsString>> {
    let rest = if target.is_absolute() {
        done.clear();
        target.strip_prefix("/dev").ok()?
    } else {
        target
    };
    Some(
        rest.components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some("..".into()),
                _ => None,
            })
            .collect(),
    )
}

#[cfg(test)]
#[path = "devpath_tests.rs"]
mod tests;
