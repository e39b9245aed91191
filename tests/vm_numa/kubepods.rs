//! Where the kubelet puts a pod's cgroup, for both cgroup drivers, and where a container's
//! cgroup is on the unified hierarchy given its OCI `linux.cgroupsPath`.
//!
//! The kubelet names a pod's cgroup after its QoS class and UID (`pkg/kubelet/cm`,
//! `qos_container_manager_linux.go` and `cgroup_manager_linux.go`): with cgroupfs
//! `/kubepods/burstable/pod<uid>` (Guaranteed pods directly under `/kubepods`), with systemd the
//! same names as nested slices, `kubepods-burstable-pod<uid>.slice`, where each `-` of a name
//! part is escaped to `_` because systemd reads `-` as the slice hierarchy separator. The
//! kubelet hands the runtime the expanded form as the sandbox's `cgroup_parent`
//! (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`, what
//! `CgroupName.ToSystemd` returns); containerd keeps its last element and runc's systemd driver
//! puts each container in `<prefix>-<id>.scope` under it (cgroupsPath `slice:prefix:id`).
//! Where that scope is comes from nri-align itself (`host::cgroup::ContainerCgroup`, what its
//! repair and `verify` use), so the suite proves the product's mapping against real runc.

use std::path::PathBuf;

use nri_align::host::cgroup::{expand_slice, ContainerCgroup};

/// The pod's QoS class, which picks its cgroup under `kubepods`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    /// Every container has CPU and memory limits equal to its requests.
    Guaranteed,
    /// Some request or limit, not Guaranteed.
    Burstable,
    /// No requests or limits at all.
    BestEffort,
}

impl Qos {
    /// The QoS level's cgroup name part (`None`: Guaranteed pods sit directly in kubepods).
    fn part(self) -> Option<&'static str> {
        match self {
            Qos::Guaranteed => None,
            Qos::Burstable => Some("burstable"),
            Qos::BestEffort => Some("besteffort"),
        }
    }
}

/// A pod UID shaped like the API server's (a version-4-looking UUID), derived from `seed` so a
/// run is reproducible.
pub fn pod_uid(seed: &str) -> String {
    // FNV-1a over the seed, twice with different offsets: 128 bits of hex.
    let fnv = |basis: u64| {
        seed.bytes().fold(basis, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let hex = format!(
        "{:016x}{:016x}",
        fnv(0xcbf2_9ce4_8422_2325),
        fnv(0x6c62_272e_07bb_0142)
    );
    format!(
        "{}-{}-4{}-8{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

/// The pod's cgroup parent as the kubelet hands it to the runtime: a slice name for the systemd
/// driver, a path below `cgroupfs_root` (the harness instance's own parent) for cgroupfs.
pub fn pod_cgroup_parent(systemd: bool, cgroupfs_root: &str, qos: Qos, uid: &str) -> String {
    let mut parts = vec!["kubepods".to_string()];
    parts.extend(qos.part().map(str::to_string));
    parts.push(format!("pod{uid}"));
    if systemd {
        let escaped: Vec<String> = parts.iter().map(|p| p.replace('-', "_")).collect();
        let slice = format!("{}.slice", escaped.join("-"));
        let expanded = slice_path(&slice).unwrap_or_default();
        format!("/{}", expanded.display())
    } else {
        format!(
            "{}/{}",
            cgroupfs_root.trim_end_matches('/'),
            parts.join("/")
        )
    }
}

/// The slice names from the root down to `slice` (`a-b.slice` -> `a.slice`, `a-b.slice`), as
/// systemd nests them in the cgroup tree; `None` for a name that is not a slice.
pub fn slice_path(slice: &str) -> Option<PathBuf> {
    expand_slice(slice).ok().map(|parts| parts.iter().collect())
}

/// A container's cgroup directory, relative to the unified hierarchy's mount, from its OCI
/// `linux.cgroupsPath`, as nri-align maps it; `None` for a path it refuses.
pub fn container_cgroup(cgroups_path: &str) -> Option<PathBuf> {
    ContainerCgroup::parse(cgroups_path)
        .ok()
        .map(|c| c.relative())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_parents_follow_the_kubelets_names_for_both_drivers() {
        let uid = "6f1f5a2e-0c1b-4d2a-9b1e-2f3a4b5c6d7e";
        // The kubelet's own example (cgroup_manager_linux.go, ToSystemd).
        assert_eq!(
            pod_cgroup_parent(true, "", Qos::Burstable, "1234-abcd-5678-efgh"),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice"
        );
        assert_eq!(
            pod_cgroup_parent(true, "", Qos::Guaranteed, uid),
            "/kubepods.slice/kubepods-pod6f1f5a2e_0c1b_4d2a_9b1e_2f3a4b5c6d7e.slice"
        );
        assert_eq!(
            pod_cgroup_parent(true, "", Qos::BestEffort, "u"),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu.slice"
        );
        assert_eq!(
            pod_cgroup_parent(false, "/nri-align-x/", Qos::Burstable, uid),
            format!("/nri-align-x/kubepods/burstable/pod{uid}")
        );
        assert_eq!(
            pod_cgroup_parent(false, "/p", Qos::Guaranteed, "u"),
            "/p/kubepods/podu"
        );
    }

    #[test]
    fn systemd_cgroups_paths_expand_into_nested_slices_and_a_scope() {
        assert_eq!(
            container_cgroup("kubepods-burstable-podab_cd.slice:cri-containerd:0123"),
            Some(PathBuf::from(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podab_cd.slice/\
                 cri-containerd-0123.scope"
            ))
        );
        assert_eq!(
            container_cgroup("kubepods-podu.slice:crio:9"),
            Some(PathBuf::from(
                "kubepods.slice/kubepods-podu.slice/crio-9.scope"
            ))
        );
        // runc's default slice for an empty one.
        assert_eq!(
            container_cgroup(":cri-containerd:1"),
            Some(PathBuf::from("system.slice/cri-containerd-1.scope"))
        );
        assert_eq!(
            container_cgroup("/nri-align-x/kubepods/podu/0123"),
            Some(PathBuf::from("nri-align-x/kubepods/podu/0123"))
        );
        assert_eq!(container_cgroup("kubepods--x.slice:p:1"), None);
        assert_eq!(container_cgroup("notaslice:p:1"), None);
        assert_eq!(container_cgroup("/../../tmp/x"), None);
        assert_eq!(slice_path("-.slice"), Some(PathBuf::new()));
    }

    #[test]
    fn pod_uids_look_like_uuids_and_are_reproducible() {
        let a = pod_uid("gpu-a");
        assert_eq!(a, pod_uid("gpu-a"));
        assert_ne!(a, pod_uid("gpu-b"));
        let groups: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(groups, vec![8, 4, 4, 4, 12], "{a}");
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()), "{a}");
    }
}
