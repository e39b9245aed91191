//! NRI plugin processes started by the test harness (external plugins dialling the instance's
//! private NRI socket).

use std::fs;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{wait_until, HResult, HarnessError};

/// An NRI plugin process started by the harness; killed (by PID) on drop.
pub struct PluginProcess {
    pub(super) child: Child,
    /// Its combined stdout/stderr.
    pub log: PathBuf,
}

impl PluginProcess {
    /// Starts `cmd` (any `nri-align` invocation, possibly behind a wrapper such as `prlimit`)
    /// with stdin closed and stdout and stderr appended to `log`.
    pub fn spawn_logged(mut cmd: Command, log: PathBuf) -> HResult<Self> {
        let file = fs::File::create(&log)
            .map_err(|e| HarnessError(format!("create {}: {e}", log.display())))?;
        let file2 = file.try_clone().map_err(|e| HarnessError(e.to_string()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(file2)
            .spawn()
            .map_err(|e| HarnessError(format!("start {cmd:?}: {e}")))?;
        Ok(PluginProcess { child, log })
    }

    /// PID of the plugin.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The plugin's output so far.
    pub fn output(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// Waits until the plugin's output contains `needle`.
    pub fn wait_for_output(&self, needle: &str, timeout: Duration) -> bool {
        wait_until(timeout, || self.output().contains(needle))
    }

    /// `Some(status)` once the plugin has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends `signal` and reaps the process.
    pub fn stop(&mut self, signal: nix::sys::signal::Signal) {
        if self.exited().is_some() {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
        if !wait_until(Duration::from_secs(5), || {
            self.child.try_wait().ok().flatten().is_some()
        }) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        self.stop(nix::sys::signal::Signal::SIGTERM);
    }
}
