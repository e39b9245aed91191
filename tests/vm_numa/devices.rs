//! Device access as a container's cgroup grants it: probes from inside the container (a node
//! it makes itself with mknod) and, in the systemd guest, what systemd was told about the
//! container's scope (`DevicePolicy=`, `DeviceAllow=`), so a failing check can say which layer
//! lost a device rule.

use crate::guest::Guest;
use test_support::e2e::Runtime;

impl Guest {
    /// Whether the device cgroup of container `id` lets it open a character device of major
    /// 195 (NVIDIA) and `minor` that it makes itself with mknod in its /tmp: the filter's
    /// verdict on a node the runtime did not give it. `Ok(true)`: opened or failed only for
    /// want of a driver (ENXIO); `Ok(false)`: denied (EPERM, at mknod or open); `Err`: anything
    /// else, with the output.
    pub fn may_open_char(&self, id: &str, minor: u32) -> Result<bool, String> {
        let script = format!(
            "rm -f /tmp/probe; mknod /tmp/probe c 195 {minor} 2>&1 && head -c0 /tmp/probe 2>&1; \
             echo rc=$?"
        );
        let r = self
            .ctrd
            .cri()
            .exec(id, &["sh", "-c", &script])
            .map_err(|e| e.to_string())?;
        let out = r.stdout;
        if out.contains("not permitted") {
            Ok(false)
        } else if out.contains("rc=0") || out.contains("No such device") {
            Ok(true)
        } else {
            Err(format!("probe of 195:{minor} in {id}: {out} {}", r.stderr))
        }
    }

    /// What systemd was told about the device access of container `id`'s scope
    /// (`DevicePolicy`, `DeviceAllow`), for messages; empty outside the systemd guest.
    pub fn scope_devices(&self, id: &str) -> String {
        if !self.systemd {
            return String::new();
        }
        let out = std::process::Command::new("systemctl")
            .args(["show", "-p", "DevicePolicy", "-p", "DeviceAllow"])
            .arg(match self.ctrd.runtime {
                Runtime::Crio => format!("crio-{id}.scope"),
                _ => format!("cri-containerd-{id}.scope"),
            })
            .output();
        match out {
            Ok(o) => String::from_utf8_lossy(&o.stdout).replace('\n', "; "),
            Err(e) => format!("systemctl show: {e}"),
        }
    }
}
