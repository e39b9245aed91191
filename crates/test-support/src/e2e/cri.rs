//! The CRI client as the tests drive it: one instance's endpoint and config, exec, inspect.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

use super::{describe, err, parse_env_file, run_cmd, HResult, HarnessError};

/// Output of a command run in a container.
#[derive(Debug, Clone)]
pub struct ExecResult {
    /// The command's exit code.
    pub code: i32,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

/// The CRI client bound to one instance.
#[derive(Debug, Clone)]
pub struct Cri {
    pub(super) bin: PathBuf,
    pub(super) config: PathBuf,
    pub(super) endpoint: String,
}

impl Cri {
    /// Runs the client with `args`; returns the raw output whatever the exit status.
    pub fn run(&self, args: &[&str]) -> HResult<Output> {
        run_cmd(
            Command::new(&self.bin)
                .arg("--config")
                .arg(&self.config)
                .arg("--runtime-endpoint")
                .arg(&self.endpoint)
                .args(args)
                .env_remove("CONTAINER_RUNTIME_ENDPOINT")
                .env_remove("CRI_CONFIG_FILE"),
            &format!("{} {}", self.bin.display(), args.join(" ")),
        )
    }

    /// Runs the client and returns trimmed stdout; a failure carries stdout and stderr.
    pub fn ok(&self, args: &[&str]) -> HResult<String> {
        let out = self.run(args)?;
        if !out.status.success() {
            // The real crictl logs the runtime's error Go-quoted (`\"lots\"`); unquoted, it
            // reads as the runtime wrote it, whichever client ran.
            return err(format!(
                "crictl {} failed: {}",
                args.join(" "),
                describe(&out).replace("\\\"", "\"")
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Runs `cmd` in container `id` (exec -s); a non-zero exit is not an error.
    pub fn exec(&self, id: &str, cmd: &[&str]) -> HResult<ExecResult> {
        let mut args = vec!["exec", "-s", id];
        args.extend_from_slice(cmd);
        let out = self.run(&args)?;
        let mut r = ExecResult {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        // The real crictl exits 1 when the command fails and reports "... command 'CMD'
        // exited with N: STDERR" (without the command's stdout); take N and STDERR from it.
        if let Some((code, stderr)) = crictl_exec_failure(&r.stderr) {
            r.code = code;
            r.stderr = stderr;
        }
        Ok(r)
    }

    /// `/proc/self/status` of a fresh process in the container.
    pub fn proc_status(&self, id: &str) -> HResult<String> {
        let r = self.exec(id, &["cat", "/proc/self/status"])?;
        if r.code != 0 {
            return err(format!(
                "cat /proc/self/status in {id}: exit {} {}",
                r.code, r.stderr
            ));
        }
        Ok(r.stdout)
    }

    /// The container's environment (as `env` prints it).
    pub fn env(&self, id: &str) -> HResult<BTreeMap<String, String>> {
        let r = self.exec(id, &["env"])?;
        if r.code != 0 {
            return err(format!("env in {id}: exit {} {}", r.code, r.stderr));
        }
        Ok(parse_env_file(&r.stdout))
    }

    /// `inspect` JSON (status + info, with info.runtimeSpec).
    pub fn inspect(&self, id: &str) -> HResult<Value> {
        let text = self.ok(&["inspect", id])?;
        serde_json::from_str(&text)
            .map_err(|e| HarnessError(format!("inspect {id}: bad JSON: {e}")))
    }

    /// `inspectp` JSON.
    pub fn inspectp(&self, id: &str) -> HResult<Value> {
        let text = self.ok(&["inspectp", id])?;
        serde_json::from_str(&text)
            .map_err(|e| HarnessError(format!("inspectp {id}: bad JSON: {e}")))
    }

    /// IDs of all containers (any state).
    pub fn containers(&self) -> HResult<Vec<String>> {
        Ok(self
            .ok(&["ps", "-a", "-q"])?
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// IDs of all pods.
    pub fn pods(&self) -> HResult<Vec<String>> {
        Ok(self
            .ok(&["pods", "-q"])?
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// Stops and removes a pod with its containers. As the kubelet does, the containers are
    /// stopped first (here without a grace period): CRI-O would give each one the rest of the
    /// StopPodSandbox deadline to exit on TERM.
    pub fn remove_pod(&self, pod: &Pod) -> HResult<()> {
        self.remove_pod_id(&pod.id)
    }

    /// [`Cri::remove_pod`] by sandbox id (pods found by listing them).
    pub fn remove_pod_id(&self, id: &str) -> HResult<()> {
        let running = self.ok(&["ps", "-q", "--pod", id])?;
        let ids: Vec<&str> = running.lines().filter(|l| !l.is_empty()).collect();
        if !ids.is_empty() {
            let mut args = vec!["stop", "--timeout", "0"];
            args.extend(ids);
            self.ok(&args)?;
        }
        self.ok(&["stopp", id])?;
        self.ok(&["rmp", id])?;
        Ok(())
    }
}

/// The exit status and stderr of a command in crictl's exec failure message.
fn crictl_exec_failure(message: &str) -> Option<(i32, String)> {
    let rest = &message[message.find("' exited with ")? + "' exited with ".len()..];
    let (code, stderr) = rest.split_once(": ")?;
    let stderr = stderr.strip_suffix('\n').unwrap_or(stderr);
    Some((code.parse().ok()?, stderr.to_string()))
}

/// A running pod sandbox.
#[derive(Debug, Clone)]
pub struct Pod {
    /// Sandbox ID.
    pub id: String,
    /// Its config file (needed again by `create`).
    pub config_path: PathBuf,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod UID.
    pub uid: String,
}
