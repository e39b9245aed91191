//! The CFS quota of a pod's cgroup (`cpu.cfs_quota_us` on v1, `cpu.max` on v2), which no NRI
//! message carries: the kubelet writes it when it makes the pod's cgroup, and nri-align lifts
//! it for a pod holding exclusive CPUs (`enforce/engine/quota.rs`). Written through
//! cgroups-rs's cpu controller, on the container's cgroup's parent, and only where that parent
//! is the pod's (its name holds the pod's UID).

use std::path::Path;

use cgroups_rs::fs::cpu::CpuController;

use super::{existing_regular_file, relative_to, CgroupError, CgroupMounts, ContainerCgroup};

/// What to make of a pod's CFS quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodQuota {
    /// None (`-1`, `max`).
    Lift,
    /// This quota (microseconds per period), only where the pod has none: the kubelet's
    /// value put back after [`PodQuota::Lift`], never over a value the kubelet wrote.
    PutBack(i64),
}

/// The components of the pod cgroup of the container at `cg`: its parent, when the parent's
/// name holds `pod_uid` (the kubelet names it `pod<UID>` with the cgroupfs driver and
/// `...-pod<UID with _ for ->.slice` with systemd's). Anything else is not written.
pub fn pod_components(cg: &ContainerCgroup, pod_uid: &str) -> Option<Vec<String>> {
    let (_, parent) = cg.components().split_last()?;
    let name = parent.last()?;
    let systemd_uid = pod_uid.replace('-', "_");
    let named = !pod_uid.is_empty()
        && (name.contains(&format!("pod{pod_uid}")) || name.contains(&format!("pod{systemd_uid}")));
    named.then(|| parent.to_vec())
}

impl CgroupMounts {
    /// Makes the CFS quota of the pod cgroup of the container at `cgroups_path` (pod `pod_uid`)
    /// what `want` says. Returns the quota it had when it changed it (`-1`: none); `Ok(None)`
    /// when nothing was to change or the pod's cgroup is not here.
    pub fn set_pod_quota(
        &self,
        cgroups_path: &str,
        pod_uid: &str,
        want: PodQuota,
    ) -> Result<Option<i64>, CgroupError> {
        let cg = ContainerCgroup::parse(cgroups_path)?;
        let (Some(mount), Some(components)) = (self.cpu(), pod_components(&cg, pod_uid)) else {
            return Ok(None);
        };
        let Some(dir) = mount
            .dir_of(&components)
            .map_err(|source| CgroupError::Io {
                path: mount.point.join(components.join("/")),
                source,
            })?
        else {
            return Ok(None);
        };
        // Only ever an existing regular file of a real cgroup (cgroups-rs opens with O_CREAT).
        let file = dir.join(if mount.v2 {
            "cpu.max"
        } else {
            "cpu.cfs_quota_us"
        });
        existing_regular_file(&file)?;
        let cgroup = mount.cpu_cgroup(&relative_to(&dir, &mount.point));
        let failed = |e: cgroups_rs::fs::error::Error| CgroupError::Cgroups {
            path: dir.clone(),
            why: e.to_string(),
        };
        let ctl = cgroup
            .controller_of::<CpuController>()
            .ok_or_else(|| CgroupError::Cgroups {
                path: dir.clone(),
                why: "no cpu controller".into(),
            })?;
        let has = ctl.cfs_quota().map_err(failed)?;
        let limited = has > 0;
        let to = match want {
            PodQuota::Lift if limited => -1,
            PodQuota::PutBack(q) if !limited && q > 0 => q,
            _ => return Ok(None),
        };
        ctl.set_cfs_quota(to).map_err(failed)?;
        Ok(Some(if limited { has } else { -1 }))
    }
}

/// [`CgroupMounts::set_pod_quota`] on the host whose `/proc` and cgroup mounts are under `root`.
pub fn set_pod_quota_under(
    root: &Path,
    cgroups_path: &str,
    pod_uid: &str,
    want: PodQuota,
) -> Result<Option<i64>, CgroupError> {
    CgroupMounts::read(root).set_pod_quota(cgroups_path, pod_uid, want)
}
