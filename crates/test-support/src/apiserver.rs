//! A real API server for the NodeResourceTopology tests: hack/apiserver-up NAME (the upstream
//! apiextensions-apiserver on etcd, with the upstream CRD), its env file, restarts, and the
//! teardown (hack/apiserver-down when the handle drops; `--keep` after a panic or with
//! `NRI_ALIGN_KEEP=1`, so the logs stay in _output/apiserver/NAME/).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::repo_root;
use std::process::Command;

/// Exit status of hack/apiserver-up when the server cannot be had (no network, no cache).
const UNAVAILABLE: i32 = 75;

/// One running instance.
pub struct ApiServer {
    name: String,
    env: BTreeMap<String, String>,
}

fn hack(script: &str, args: &[&str]) -> std::process::Output {
    Command::new(repo_root().join("hack").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run hack/{script}: {e}"))
}

impl ApiServer {
    /// Starts (or reuses) instance `name`. `None` when the server cannot be built here at all:
    /// the caller skips, and this says so loudly. `NRI_ALIGN_APISERVER=required` (or
    /// `NRI_ALIGN_FORBID_SKIPS=1`, see [`crate::skip`]) turns that into a failure.
    pub fn up(name: &str, test: &str) -> Option<ApiServer> {
        let out = hack("apiserver-up", &[name]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(UNAVAILABLE) {
            let why = format!(
                "NO API SERVER: hack/apiserver-up cannot build the Kubernetes API server here \
                 (no package mirror and no cache).\n{stderr}"
            );
            if std::env::var("NRI_ALIGN_APISERVER").as_deref() == Ok("required") {
                panic!("{test}: {why}NRI_ALIGN_APISERVER=required");
            }
            // Loudly: a whole suite skips. The banner goes straight to the process's stderr
            // (libtest captures eprintln! of passing tests), as the skip line itself does.
            let banner = "!".repeat(78);
            let _ = writeln!(std::io::stderr(), "{banner}");
            crate::skip::skip(test, &why);
            let _ = writeln!(std::io::stderr(), "{banner}");
            return None;
        }
        assert!(
            out.status.success(),
            "hack/apiserver-up {name} failed ({}):\n{stderr}",
            out.status
        );
        let env_file = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let text = std::fs::read_to_string(&env_file)
            .unwrap_or_else(|e| panic!("env file {env_file}: {e}"));
        let env = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Some(ApiServer {
            name: name.into(),
            env,
        })
    }

    /// A value of the env file.
    pub fn get(&self, key: &str) -> &str {
        self.env
            .get(key)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("{key} missing from the env file"))
    }

    /// A path from the env file.
    pub fn path(&self, key: &str) -> PathBuf {
        PathBuf::from(self.get(key))
    }

    /// Stops etcd, the webhook and the server, keeping their data (a later [`ApiServer::start`]
    /// brings back the same server).
    pub fn stop(&self) {
        let out = hack("apiserver-down", &[&self.name, "--keep"]);
        assert!(
            out.status.success(),
            "hack/apiserver-down {} --keep: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the stopped instance again on its data, ports and certificates.
    pub fn start(&self) {
        let out = hack("apiserver-up", &[&self.name]);
        assert!(
            out.status.success(),
            "hack/apiserver-up {} (restart): {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The last lines of the server's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.get("APISERVER_LOG")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Writes a kubeconfig for this server with bearer token `token` into `dir`.
    pub fn token_kubeconfig(&self, dir: &Path, token: &str) -> PathBuf {
        let path = dir.join("token.kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {token}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
            self.get("APISERVER_URL"),
            self.get("APISERVER_CA"),
        );
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let keep =
            std::thread::panicking() || std::env::var("NRI_ALIGN_KEEP").as_deref() == Ok("1");
        let args: Vec<&str> = if keep {
            vec![&self.name, "--keep"]
        } else {
            vec![&self.name]
        };
        let out = hack("apiserver-down", &args);
        if keep {
            eprintln!(
                "kept the API server instance {} (logs in {})",
                self.name,
                self.get("APISERVER_DIR")
            );
        }
        if !out.status.success() {
            eprintln!(
                "hack/apiserver-down {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
