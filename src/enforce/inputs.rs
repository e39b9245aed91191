//! From what NRI shows of a container (resources, device nodes, env, CDI devices) to the
//! placement [`Request`]: CPU request and limit in millicores, memory limit, and the GPUs and
//! RDMA NICs a device plugin allocated.

use crate::placement::{PodInfo, PodTotals, Request};
use crate::topology::Topology;

use crate::enforce::container::{ContainerView, PodView, ResourcesView};
use crate::host::devices::{nvidia_minor, uverbs_name};
use crate::limits::{excerpt, quoted};

/// A container whose resources or devices cannot be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A GPU reference (index, UUID, minor) matches no GPU of this host.
    #[error("container {container}: {origin} names GPU {given}, which this host does not have")]
    UnknownGpu {
        /// Container name.
        container: String,
        /// Where the reference came from (`NVIDIA_VISIBLE_DEVICES`, `device /dev/nvidia3`...).
        origin: String,
        /// The reference, quoted (cut to its start when long).
        given: String,
    },
}

/// Inverse of the kubelet's `shares = milli * 1024 / 1000` (at least 2). Rounding up makes the
/// round trip exact; 2 shares (the floor) means no request.
pub fn shares_to_milli(shares: u64) -> u64 {
    if shares <= 2 {
        return 0;
    }
    // Saturating: the runtime passes whatever the pod spec said; input never panics the daemon.
    shares.saturating_mul(1000).div_ceil(1024)
}

/// CFS quota and period to a limit in millicores; `None` when unlimited.
pub fn quota_to_milli(quota: Option<i64>, period: Option<u64>) -> Option<u64> {
    let quota = u64::try_from(quota?).ok().filter(|q| *q > 0)?;
    // The kernel's default period applies when the spec has none.
    let period = period.filter(|p| *p > 0).unwrap_or(100_000);
    Some(quota.saturating_mul(1000).div_ceil(period))
}

/// What a pod asks for in all, from its pod-level resources (the kubelet's sum over its
/// containers): exclusive CPUs by the Guaranteed rule applied to the sum, the memory limit.
/// GPUs and NICs are not in pod resources; the containers carry them.
pub fn pod_totals(r: &ResourcesView) -> PodTotals {
    let request = r.cpu_shares.map(shares_to_milli).unwrap_or(0);
    let limit = quota_to_milli(r.cpu_quota, r.cpu_period);
    let exclusive = limit == Some(request) && request > 0 && request % 1000 == 0;
    let memory = r
        .memory_limit
        .and_then(|m| u64::try_from(m).ok())
        .unwrap_or(0);
    PodTotals {
        exclusive_cpus: if exclusive {
            u32::try_from(request / 1000).unwrap_or(u32::MAX)
        } else {
            0
        },
        memory_bytes: if exclusive { memory } else { 0 },
        gpus: 0,
        nics: 0,
    }
}

/// Builds the placement request for container `c` of pod `pod`.
pub fn build_request(
    topo: &Topology,
    pod: &PodView,
    c: &ContainerView,
) -> Result<Request, RequestError> {
    let r = &c.resources;
    Ok(Request {
        container_id: c.id.clone(),
        container_name: c.name.clone(),
        pod: PodInfo {
            uid: pod.uid.clone(),
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            annotations: pod.annotations.clone(),
        },
        cpu_request_milli: r.cpu_shares.map(shares_to_milli).unwrap_or(0),
        cpu_limit_milli: quota_to_milli(r.cpu_quota, r.cpu_period),
        memory_limit_bytes: r
            .memory_limit
            .and_then(|m| u64::try_from(m).ok())
            .filter(|m| *m > 0),
        allocated_gpus: allocated_gpus(topo, c)?,
        allocated_nics: allocated_nics(topo, c),
    })
}

/// GPUs the container was allocated, as PCI bus ids, from the first source that names any:
/// device nodes in the spec, CDI devices, `NVIDIA_VISIBLE_DEVICES`, `CUDA_VISIBLE_DEVICES`.
/// The device nodes come first because they are what the container will really see.
fn allocated_gpus(topo: &Topology, c: &ContainerView) -> Result<Vec<String>, RequestError> {
    // Everything here comes from the runtime: never repeat more than the start of it.
    let unknown = |origin: String, given: &str| RequestError::UnknownGpu {
        container: excerpt(&c.name),
        origin: excerpt(&origin),
        given: quoted(given),
    };
    let mut out: Vec<String> = Vec::new();
    let mut push = |bus: &str| {
        if !out.iter().any(|b| b == bus) {
            out.push(bus.to_string());
        }
    };

    let mut from_nodes = false;
    for d in &c.devices {
        let Some(minor) = nvidia_minor(&d.path) else {
            continue;
        };
        from_nodes = true;
        let gpu = topo.gpus.iter().find(|g| g.minor == Some(minor));
        match gpu {
            Some(g) => push(&g.pci_bus_id),
            None => return Err(unknown(format!("device {}", d.path), &minor.to_string())),
        }
    }
    if from_nodes {
        return Ok(out);
    }

    let cdi: Vec<&str> = c
        .cdi_devices
        .iter()
        .filter_map(|n| n.strip_prefix("nvidia.com/gpu="))
        .collect();
    let sources: [(String, Vec<&str>); 3] = [
        ("CDI device nvidia.com/gpu".into(), cdi),
        (
            "NVIDIA_VISIBLE_DEVICES".into(),
            env_list(c, "NVIDIA_VISIBLE_DEVICES"),
        ),
        (
            "CUDA_VISIBLE_DEVICES".into(),
            env_list(c, "CUDA_VISIBLE_DEVICES"),
        ),
    ];
    for (source, refs) in sources {
        if refs.is_empty() {
            continue;
        }
        for r in refs {
            match r {
                "all" => topo.gpus.iter().for_each(|g| push(&g.pci_bus_id)),
                "none" | "void" => {}
                // The volume-mounts strategy of the device plugin puts a path here; the GPUs
                // are then in the mounts, which is not a form nri-align reads.
                p if p.starts_with('/') => {}
                r => match find_gpu(topo, r) {
                    Some(bus) => push(bus),
                    None => return Err(unknown(source.clone(), r)),
                },
            }
        }
        return Ok(out);
    }
    Ok(out)
}

/// Comma-separated entries of an env var, trimmed, empty ones dropped.
fn env_list<'a>(c: &'a ContainerView, key: &str) -> Vec<&'a str> {
    c.env_var(key)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// A GPU by index, UUID (`GPU-...`, case-insensitive) or PCI bus id.
fn find_gpu<'a>(topo: &'a Topology, r: &str) -> Option<&'a str> {
    let gpu = if let Ok(idx) = r.parse::<u32>() {
        topo.gpus.iter().find(|g| g.index == idx)
    } else {
        topo.gpus.iter().find(|g| {
            g.uuid.as_deref().is_some_and(|u| u.eq_ignore_ascii_case(r))
                || g.pci_bus_id.eq_ignore_ascii_case(r)
        })
    };
    gpu.map(|g| g.pci_bus_id.as_str())
}

/// RDMA NICs whose uverbs device node is in the spec.
fn allocated_nics(topo: &Topology, c: &ContainerView) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for d in &c.devices {
        let Some(uverbs) = uverbs_name(&d.path) else {
            continue;
        };
        if let Some(nic) = topo
            .nics
            .iter()
            .find(|n| n.uverbs.iter().any(|u| u == uverbs))
        {
            if !out.contains(&nic.name) {
                out.push(nic.name.clone());
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::enforce::container::{DeviceNode, ResourcesView};
    use crate::topology::{Gpu, Nic};

    /// Two GPUs (minors 0 and 1) and one RDMA NIC.
    pub(crate) fn gpu_topology() -> Topology {
        let gpu = |index: u32, bus: &str| Gpu {
            index,
            pci_bus_id: bus.into(),
            numa_node: Some(0),
            uuid: Some(format!("GPU-{index}aaa")),
            minor: Some(index),
            name: None,
            mig_enabled: None,
        };
        Topology {
            gpus: vec![gpu(0, "0000:1b:00.0"), gpu(1, "0000:3b:00.0")],
            nics: vec![Nic {
                name: "ib0".into(),
                pci_bus_id: Some("0000:1c:00.0".into()),
                numa_node: Some(0),
                rdma_device: Some("mlx5_0".into()),
                uverbs: vec!["uverbs0".into()],
            }],
            ..Default::default()
        }
    }

    pub(crate) fn node(path: &str, major: i64, minor: i64) -> DeviceNode {
        DeviceNode {
            path: path.into(),
            kind: "c".into(),
            major,
            minor,
            file_mode: Some(0o666),
            uid: Some(0),
            gid: Some(0),
        }
    }

    #[test]
    fn shares_round_trip_through_the_kubelet_formula() {
        for milli in [10u64, 100, 250, 333, 999, 1000, 1500, 64_000] {
            let shares = (milli * 1024 / 1000).max(2);
            assert_eq!(shares_to_milli(shares), milli, "milli {milli}");
        }
        assert_eq!(shares_to_milli(2), 0);
        assert_eq!(quota_to_milli(Some(200_000), Some(100_000)), Some(2000));
        assert_eq!(quota_to_milli(Some(-1), Some(100_000)), None);
        assert_eq!(quota_to_milli(Some(50_000), None), Some(500));
    }

    #[test]
    fn absurd_shares_and_quota_saturate_instead_of_panicking() {
        assert!(shares_to_milli(u64::MAX) > 0);
        assert!(quota_to_milli(Some(i64::MAX), Some(1)).is_some_and(|m| m > 1_000_000));
        assert_eq!(
            quota_to_milli(Some(i64::MAX), Some(0)),
            quota_to_milli(Some(i64::MAX), None)
        );
    }

    #[test]
    fn resources_become_a_request() {
        let c = ContainerView {
            id: "c1".into(),
            name: "app".into(),
            resources: ResourcesView {
                cpu_shares: Some(2048),
                cpu_quota: Some(200_000),
                cpu_period: Some(100_000),
                memory_limit: Some(1 << 30),
                ..Default::default()
            },
            ..Default::default()
        };
        let pod = PodView {
            uid: "u".into(),
            namespace: "ns".into(),
            ..Default::default()
        };
        let r = build_request(&gpu_topology(), &pod, &c).expect("ok");
        assert_eq!((r.cpu_request_milli, r.cpu_limit_milli), (2000, Some(2000)));
        assert_eq!(r.memory_limit_bytes, Some(1 << 30));
        assert_eq!(r.pod.namespace, "ns");
        assert!(r.allocated_gpus.is_empty() && r.allocated_nics.is_empty());
    }

    #[test]
    fn gpus_come_from_device_nodes_before_env() {
        let c = ContainerView {
            devices: vec![
                node("/dev/nvidia1", 195, 1),
                node("/dev/nvidiactl", 195, 255),
            ],
            env: vec!["NVIDIA_VISIBLE_DEVICES=all".into()],
            ..Default::default()
        };
        let r = build_request(&gpu_topology(), &PodView::default(), &c).expect("ok");
        assert_eq!(r.allocated_gpus, vec!["0000:3b:00.0"]);
    }

    #[test]
    fn gpus_from_cdi_env_uuid_index_all_and_none() {
        let topo = gpu_topology();
        let pod = PodView::default();
        let with = |env: &[&str], cdi: &[&str]| ContainerView {
            env: env.iter().map(|s| s.to_string()).collect(),
            cdi_devices: cdi.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let gpus = |c: &ContainerView| build_request(&topo, &pod, c).expect("ok").allocated_gpus;
        assert_eq!(
            gpus(&with(&[], &["nvidia.com/gpu=1"])),
            vec!["0000:3b:00.0"]
        );
        assert_eq!(
            gpus(&with(&["NVIDIA_VISIBLE_DEVICES=gpu-1AAA, 0"], &[])),
            vec!["0000:3b:00.0", "0000:1b:00.0"]
        );
        assert_eq!(gpus(&with(&["NVIDIA_VISIBLE_DEVICES=all"], &[])).len(), 2);
        assert!(gpus(&with(&["NVIDIA_VISIBLE_DEVICES=none"], &[])).is_empty());
        assert_eq!(
            gpus(&with(&["CUDA_VISIBLE_DEVICES=0"], &[])),
            vec!["0000:1b:00.0"]
        );
        let err = build_request(&topo, &pod, &with(&["NVIDIA_VISIBLE_DEVICES=7"], &[]))
            .expect_err("unknown");
        assert!(
            err.to_string()
                .contains("NVIDIA_VISIBLE_DEVICES names GPU \"7\""),
            "{err}"
        );
    }

    #[test]
    fn rdma_nics_come_from_uverbs_nodes() {
        let c = ContainerView {
            devices: vec![
                node("/dev/infiniband/uverbs0", 231, 192),
                node("/dev/infiniband/rdma_cm", 10, 58),
            ],
            ..Default::default()
        };
        let r = build_request(&gpu_topology(), &PodView::default(), &c).expect("ok");
        assert_eq!(r.allocated_nics, vec!["ib0"]);
        assert_eq!(uverbs_name("/dev/infiniband/uverbs"), None);
        assert_eq!(nvidia_minor("/dev/nvidia-uvm"), None);
    }
}
