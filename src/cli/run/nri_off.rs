//! A node where NRI is off: the runtime's socket does not exist. Said once, at start, with the
//! runtime setting to change for the runtime found under the host root (by its socket, binary
//! or configuration); the stub then retries quietly and `/readyz` keeps saying
//! `nri: socket missing`.

use std::path::Path;

/// The container runtimes nri-align knows how to advise about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// containerd with a version-3 configuration (containerd 2.x).
    Containerd2,
    /// containerd with an older configuration (1.7) or none.
    Containerd17,
    /// CRI-O.
    Crio,
}

const CONTAINERD: &[&str] = &[
    "run/containerd/containerd.sock",
    "usr/bin/containerd",
    "usr/local/bin/containerd",
    "etc/containerd/config.toml",
];
const CRIO: &[&str] = &[
    "run/crio/crio.sock",
    "var/run/crio/crio.sock",
    "usr/bin/crio",
    "usr/local/bin/crio",
    "etc/crio/crio.conf",
    "etc/crio/crio.conf.d",
];

/// The runtimes present under `host_root`.
pub fn detect(host_root: &Path) -> Vec<Runtime> {
    let any = |paths: &[&str]| paths.iter().any(|p| host_root.join(p).exists());
    let mut found = Vec::new();
    if any(CONTAINERD) {
        let config = std::fs::read_to_string(host_root.join("etc/containerd/config.toml"))
            .unwrap_or_default();
        let v3 = config.lines().any(|l| {
            let l: String = l.chars().filter(|c| !c.is_whitespace()).collect();
            l == "version=3"
        });
        found.push(if v3 {
            Runtime::Containerd2
        } else {
            Runtime::Containerd17
        });
    }
    if any(CRIO) {
        found.push(Runtime::Crio);
    }
    found
}

/// What to change in `runtime` so that it serves NRI at `socket`.
pub fn advice(runtime: Runtime, socket: &Path) -> String {
    let socket = socket.display();
    match runtime {
        Runtime::Containerd17 => format!(
            "containerd 1.7: NRI is off by default; set `disable = false` under \
             [plugins.\"io.containerd.nri.v1.nri\"] in /etc/containerd/config.toml (with \
             socket_path = \"{socket}\") and restart containerd"
        ),
        Runtime::Containerd2 => format!(
            "containerd 2.x: NRI is on by default; check that \
             [plugins.'io.containerd.nri.v1.nri'] in /etc/containerd/config.toml does not set \
             `disable = true` and that its socket_path is {socket}, then restart containerd"
        ),
        Runtime::Crio => format!(
            "CRI-O: set `enable_nri = true` under [crio.nri] in /etc/crio/crio.conf or a \
             drop-in of /etc/crio/crio.conf.d/ (on by default since CRI-O 1.30), with \
             nri_listen = \"{socket}\", and restart crio"
        ),
    }
}

/// The one log line for a missing socket: the advice for each runtime found, or for all.
pub fn message(socket: &Path, host_root: &Path) -> String {
    let found = detect(host_root);
    let (which, runtimes) = if found.is_empty() {
        (
            "no runtime found under the host root; for the one the node runs",
            vec![Runtime::Containerd17, Runtime::Containerd2, Runtime::Crio],
        )
    } else {
        ("to enable it", found)
    };
    let advice: Vec<String> = runtimes.iter().map(|r| advice(*r, socket)).collect();
    format!(
        "NRI socket {} does not exist: the runtime is not running or has NRI disabled; {which}: \
         {}. nri-align keeps retrying and registers as soon as it appears",
        socket.display(),
        advice.join("; ")
    )
}

/// Logs [`message`] once when `socket` does not exist (a plugin the runtime launched has its
/// socket already, and is not asked).
pub fn warn_if_missing(socket: &Path, host_root: &Path) {
    if std::env::var_os("NRI_PLUGIN_SOCKET").is_some() || socket.exists() {
        return;
    }
    tracing::warn!("{}", message(socket, host_root));
}

#[cfg(test)]
#[path = "nri_off_tests.rs"]
mod tests;
