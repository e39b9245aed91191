//! Each source of GPUs and NICs, as the kubelet and the device plugins really fill them.

use super::*;
use crate::enforce::container::{KubeletDevices, MountView};
use crate::enforce::inputs::tests::{gpu_topology, node};

const BUS0: &str = "0000:1b:00.0";
const BUS1: &str = "0000:3b:00.0";

fn env(vars: &[&str]) -> ContainerView {
    ContainerView {
        name: "c".into(),
        env: vars.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn kubelet(resource: &str, ids: &[&str]) -> Option<Vec<KubeletDevices>> {
    Some(vec![KubeletDevices {
        resource: resource.into(),
        ids: ids.iter().map(|s| s.to_string()).collect(),
    }])
}

fn found(c: &ContainerView) -> Found {
    find(&gpu_topology(), c, false).expect("readable")
}

#[test]
fn cuda_visible_devices_is_never_an_allocation_in_any_form() {
    for v in ["-1", "0", "0,1", "GPU-1aaa", "", "none", "all", "7"] {
        let f = found(&env(&[&format!("CUDA_VISIBLE_DEVICES={v}")]));
        assert_eq!(f, Found::default(), "CUDA_VISIBLE_DEVICES={v}");
    }
}

#[test]
fn all_none_void_empty_and_the_volume_mounts_marker_are_not_allocations() {
    for v in [
        "all",
        "none",
        "void",
        "",
        " ",
        "/var/run/nvidia-container-devices",
    ] {
        let f = found(&env(&[&format!("NVIDIA_VISIBLE_DEVICES={v}")]));
        assert!(
            f.gpus.is_empty() && f.shared_gpus.is_empty(),
            "{v:?}: {f:?}"
        );
        assert!(f.unread.is_empty(), "{v:?} is understood, not unread");
    }
}

#[test]
fn an_env_list_alone_is_aligned_to_as_shared_never_held() {
    let f = found(&env(&["NVIDIA_VISIBLE_DEVICES=GPU-1aaa, 0"]));
    assert!(f.gpus.is_empty());
    assert_eq!(f.shared_gpus, vec![BUS1, BUS0]);
    assert_eq!(f.source, Some(GpuSource::Env));
    assert!(!GpuSource::Env.is_authoritative());
}

#[test]
fn what_the_env_names_wrongly_is_noted_not_refused() {
    for v in [
        "7",
        "GPU-nope",
        "MIG-4f1e5b7a-0000-0000-0000-000000000000",
        "0,,1",
        "bogus!",
    ] {
        let f = found(&env(&[&format!("NVIDIA_VISIBLE_DEVICES={v}")]));
        assert!(f.gpus.is_empty() && f.shared_gpus.is_empty(), "{v}");
        assert_eq!(f.unread.len(), 1, "{v}: {f:?}");
        assert_eq!(f.unread[0].origin, "NVIDIA_VISIBLE_DEVICES");
    }
}

#[test]
fn the_kubelet_is_authoritative_and_silences_the_env() {
    let mut c = env(&["NVIDIA_VISIBLE_DEVICES=0"]);
    c.kubelet_devices = kubelet("nvidia.com/gpu", &["GPU-1aaa"]);
    let f = found(&c);
    assert_eq!(f.gpus, vec![BUS1]);
    assert_eq!(f.source, Some(GpuSource::Kubelet));
    // The kubelet listed the container without GPUs: a forged env grants nothing.
    c.kubelet_devices = Some(Vec::new());
    assert_eq!(found(&c), Found::default());
}

#[test]
fn kubelet_replicas_and_shared_resources_are_shared_gpus() {
    let mut c = env(&[]);
    c.kubelet_devices = kubelet("nvidia.com/gpu", &["GPU-0aaa::3"]);
    let f = found(&c);
    assert!(f.gpus.is_empty());
    assert_eq!(f.shared_gpus, vec![BUS0]);
    c.kubelet_devices = kubelet("nvidia.com/gpu.shared", &["GPU-0aaa"]);
    assert_eq!(found(&c).shared_gpus, vec![BUS0]);
}

#[test]
fn an_unknown_gpu_from_an_authoritative_source_is_an_error_naming_it() {
    let mut c = env(&[]);
    c.kubelet_devices = kubelet("nvidia.com/gpu", &["GPU-nothere"]);
    let e = find(&gpu_topology(), &c, false).expect_err("unknown");
    assert!(
        e.to_string()
            .contains("kubelet PodResources nvidia.com/gpu names GPU \"GPU-nothere\""),
        "{e}"
    );
    let c = ContainerView {
        devices: vec![node("/dev/nvidia7", 195, 7)],
        ..env(&[])
    };
    let e = find(&gpu_topology(), &c, false).expect_err("unknown minor");
    assert!(e.to_string().contains("device /dev/nvidia7"), "{e}");
}

#[test]
fn mig_devices_align_to_their_parent_and_are_shared() {
    // MIG index form (deviceIDStrategy index) and the legacy form name the parent.
    let mut c = env(&[]);
    c.kubelet_devices = kubelet("nvidia.com/mig-1g.10gb", &["1:0"]);
    assert_eq!(found(&c).shared_gpus, vec![BUS1]);
    c.kubelet_devices = kubelet("nvidia.com/gpu", &["MIG-GPU-0aaa/1/0"]);
    assert_eq!(found(&c).shared_gpus, vec![BUS0]);
    // A MIG UUID alone: the parent comes from the device nodes the plugin passes.
    let c = ContainerView {
        devices: vec![
            node("/dev/nvidia1", 195, 1),
            node("/dev/nvidia-caps/nvidia-cap12", 511, 12),
        ],
        kubelet_devices: kubelet(
            "nvidia.com/gpu",
            &["MIG-4f1e5b7a-0000-0000-0000-000000000000"],
        ),
        ..env(&[])
    };
    let f = found(&c);
    assert!(f.gpus.is_empty());
    assert_eq!(f.shared_gpus, vec![BUS1]);
    assert_eq!(f.unread.len(), 1, "the MIG UUID itself is noted");
}

#[test]
fn cdi_field_and_annotations_name_gpus_and_rdma_nics() {
    let c = ContainerView {
        cdi_devices: vec!["nvidia.com/gpu=1".into()],
        ..env(&["NVIDIA_VISIBLE_DEVICES=0"])
    };
    let f = found(&c);
    assert_eq!(
        (f.gpus.clone(), f.source),
        (vec![BUS1.to_string()], Some(GpuSource::Cdi))
    );
    let mut c = env(&[]);
    c.annotations.insert(
        "cdi.k8s.io/nvidia-device-plugin_abc".into(),
        "nvidia.com/gpu=GPU-0aaa,nvidia.com/gpu=GPU-1aaa".into(),
    );
    c.annotations.insert(
        "cdi.k8s.io/nvidia.com_net-rdma".into(),
        "nvidia.com/net-rdma=0000:1c:00.0".into(),
    );
    let f = found(&c);
    assert_eq!(f.gpus, vec![BUS0, BUS1]);
    assert_eq!(f.nics, vec!["ib0"]);
    // `all` through CDI is no allocation either; a malformed annotation is noted.
    let c = ContainerView {
        cdi_devices: vec!["nvidia.com/gpu=all".into(), "not a name".into()],
        ..env(&[])
    };
    let f = found(&c);
    assert!(f.gpus.is_empty() && f.unread.len() == 2, "{f:?}");
}

#[test]
fn cdi_devices_of_other_kinds_are_noted_never_allocations() {
    let mut c = ContainerView {
        cdi_devices: vec![
            "vendor.com/fpga=x".into(),
            "nvidia.com/nvswitch=0".into(),
            "nvidia.com/net-rdma=0000:99:00.0".into(),
        ],
        ..env(&[])
    };
    c.annotations.insert(
        "cdi.k8s.io/fpga-plugin_1".into(),
        "vendor.com/fpga=y".into(),
    );
    let f = found(&c);
    assert!(f.gpus.is_empty() && f.shared_gpus.is_empty() && f.nics.is_empty());
    assert_eq!(f.source, None);
    let why: Vec<&str> = f.unread.iter().map(|u| u.why.as_str()).collect();
    assert_eq!(why.len(), 4, "{why:?}");
    assert!(
        why.iter()
            .any(|w| w.starts_with("vendor.com/fpga=y: CDI device of a kind")),
        "{why:?}"
    );
    // Beside an NVIDIA GPU, the other kind changes nothing the GPU gets.
    c.cdi_devices.push("nvidia.com/gpu=GPU-1aaa".into());
    let f = found(&c);
    assert_eq!(
        (f.gpus, f.source),
        (vec![BUS1.to_string()], Some(GpuSource::Cdi))
    );
}

#[test]
fn volume_mounts_name_gpus_by_container_path() {
    let c = ContainerView {
        mounts: vec![
            MountView {
                destination: "/var/run/nvidia-container-devices/GPU-1aaa".into(),
                source: "/dev/null".into(),
            },
            MountView {
                destination: "/etc/hosts".into(),
                source: "/x".into(),
            },
        ],
        ..env(&["NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"])
    };
    let f = found(&c);
    assert_eq!(f.gpus, vec![BUS1]);
    assert_eq!(f.source, Some(GpuSource::VolumeMounts));
}

#[test]
fn device_nodes_come_before_mounts_and_env() {
    let c = ContainerView {
        devices: vec![
            node("/dev/nvidia0", 195, 0),
            node("/dev/nvidiactl", 195, 255),
        ],
        mounts: vec![MountView {
            destination: "/var/run/nvidia-container-devices/1".into(),
            source: "/dev/null".into(),
        }],
        ..env(&["NVIDIA_VISIBLE_DEVICES=1"])
    };
    let f = found(&c);
    assert_eq!(
        (f.gpus, f.source),
        (vec![BUS0.to_string()], Some(GpuSource::DeviceNodes))
    );
}

#[test]
fn rdma_shared_plugin_nodes_give_the_nic_whatever_the_kubelet_counters_say() {
    let c = ContainerView {
        devices: vec![
            node("/dev/infiniband/uverbs0", 231, 192),
            node("/dev/infiniband/rdma_cm", 10, 58),
        ],
        kubelet_devices: kubelet("rdma/hca_shared_devices_a", &["3"]),
        ..env(&[])
    };
    let f = found(&c);
    assert_eq!(f.nics, vec!["ib0"]);
    assert!(f.gpus.is_empty() && f.unread.is_empty(), "{f:?}");
}

#[test]
fn a_trusted_env_list_is_an_allocation_but_all_and_cuda_still_are_not() {
    let topo = gpu_topology();
    let f = find(&topo, &env(&["NVIDIA_VISIBLE_DEVICES=1"]), true).expect("ok");
    assert_eq!(
        (f.gpus, f.source),
        (vec![BUS1.to_string()], Some(GpuSource::TrustedEnv))
    );
    for v in ["NVIDIA_VISIBLE_DEVICES=all", "CUDA_VISIBLE_DEVICES=0"] {
        assert_eq!(
            find(&topo, &env(&[v]), true).expect("ok"),
            Found::default(),
            "{v}"
        );
    }
}

/// `gpu_topology` with MIG on GPU 1 and two MIG devices listed by NVML.
fn mig_topology() -> crate::topology::Topology {
    let mut t = gpu_topology();
    t.gpus[1].mig_enabled = Some(true);
    t.gpus[1].mig_devices = ["MIG-11111111-2222-3333-4444-555555555555", "MIG-aaaa"]
        .iter()
        .enumerate()
        .map(|(i, u)| crate::topology::MigDevice {
            index: i as u32,
            uuid: u.to_string(),
            profile: Some("1g.10gb".into()),
        })
        .collect();
    t
}

#[test]
fn a_mig_uuid_nvml_lists_resolves_to_its_parent_from_every_source() {
    let topo = mig_topology();
    let mig = "MIG-11111111-2222-3333-4444-555555555555";
    let mut by_kubelet = env(&[]);
    by_kubelet.kubelet_devices = kubelet("nvidia.com/mig-1g.10gb", &[mig]);
    let by_cdi = ContainerView {
        cdi_devices: vec![format!("nvidia.com/gpu={mig}")],
        ..env(&[])
    };
    let by_env = env(&[&format!("NVIDIA_VISIBLE_DEVICES={mig}")]);
    for (c, source) in [
        (by_kubelet, GpuSource::Kubelet),
        (by_cdi, GpuSource::Cdi),
        (by_env, GpuSource::Env),
    ] {
        let f = find(&topo, &c, false).expect("readable");
        assert!(f.gpus.is_empty(), "{source:?}: a MIG parent is never held");
        assert_eq!(f.shared_gpus, vec![BUS1], "{source:?}");
        assert_eq!(f.source, Some(source));
        assert!(f.unread.is_empty(), "{source:?}: {:?}", f.unread);
    }
    // Case does not matter; two slices of one GPU both name it, as a shared GPU.
    let mut c = env(&[]);
    c.kubelet_devices = kubelet("nvidia.com/mig-1g.10gb", &["MIG-AAAA", mig]);
    let f = find(&topo, &c, false).expect("readable");
    assert_eq!(f.shared_gpus, vec![BUS1]);
}

#[test]
fn a_mig_uuid_nvml_does_not_list_is_noted_never_refused() {
    let topo = mig_topology();
    let other = "MIG-99999999-0000-0000-0000-000000000000";
    let mut c = env(&[]);
    c.kubelet_devices = kubelet("nvidia.com/mig-1g.10gb", &[other]);
    let f = find(&topo, &c, false).expect("an unknown MIG device is no error");
    assert!(f.gpus.is_empty() && f.shared_gpus.is_empty(), "{f:?}");
    assert_eq!(f.unread.len(), 1);
    assert!(f.unread[0].why.contains(other), "{:?}", f.unread);
    let f = find(
        &topo,
        &env(&[&format!("NVIDIA_VISIBLE_DEVICES={other}")]),
        true,
    )
    .expect("not even from a trusted env");
    assert!(f.shared_gpus.is_empty() && f.unread.len() == 1, "{f:?}");
}

#[test]
fn the_device_plugins_own_cdi_vendor_names_gpus() {
    // NVIDIA device plugin v0.15+: `k8s.device-plugin.nvidia.com/gpu=<id>` in both CDI
    // strategies; nvidia-ctk's `nvidia.com/gpu` is read the same way.
    let c = ContainerView {
        cdi_devices: vec!["k8s.device-plugin.nvidia.com/gpu=GPU-1aaa".into()],
        ..env(&[])
    };
    let f = found(&c);
    assert_eq!(
        (f.gpus.clone(), f.source),
        (vec![BUS1.to_string()], Some(GpuSource::Cdi))
    );
    let mut c = env(&[]);
    c.annotations.insert(
        "cdi.k8s.io/nvidia-device-plugin_abc".into(),
        "k8s.device-plugin.nvidia.com/gpu=1".into(),
    );
    assert_eq!(found(&c).gpus, vec![BUS1.to_string()]);
    assert!(!crate::enforce::inputs::SpecDevices::read(&c).gpus_only_by_env);
    // A look-alike vendor is not NVIDIA's.
    let c = ContainerView {
        cdi_devices: vec!["evil.nvidia.com/gpu=1".into()],
        ..env(&[])
    };
    assert!(found(&c).gpus.is_empty());
}
