use super::*;
use crate::enforce::container::{KubeletClaimDevice, PodView};
use crate::enforce::inputs::tests::gpu_topology;
use crate::enforce::inputs::{build, RequestError};

fn pci(bus: &str, node: Option<u32>) -> CdiTarget {
    CdiTarget::Pci(PciFunction {
        bus_id: bus.into(),
        numa_node: node,
        pcie_path: vec!["pci0000:90".into(), bus.into()],
    })
}

fn device(name: &str, targets: Vec<CdiTarget>) -> CdiDevice {
    CdiDevice {
        name: name.into(),
        spec: "/var/run/cdi/x.yaml".into(),
        targets,
        unmapped: Vec::new(),
        net_devices: Vec::new(),
        env: Vec::new(),
        mounts: Vec::new(),
        nodes: Vec::new(),
    }
}

#[test]
fn resolved_devices_become_gpus_nics_and_generic_devices() {
    let c = ContainerView {
        cdi_devices: vec![
            "k8s.gpu.nvidia.com/claim=u1-gpu-1".into(),
            "example.com/accel=fn0".into(),
            "example.com/nic=rdma".into(),
        ],
        cdi_resolved: vec![
            device(
                "k8s.gpu.nvidia.com/claim=u1-gpu-1",
                vec![CdiTarget::NvidiaGpu { minor: 1 }],
            ),
            device("example.com/accel=fn0", vec![pci("0000:99:00.0", Some(1))]),
            // The RDMA NIC of the topology, by its PCI function.
            device("example.com/nic=rdma", vec![pci("0000:1c:00.0", Some(0))]),
        ],
        ..Default::default()
    };
    let b = build(&gpu_topology(), &PodView::default(), &c, false).expect("built");
    assert_eq!(b.request.allocated_gpus, ["0000:3b:00.0"]);
    assert_eq!(b.devices.source, Some(super::super::GpuSource::Cdi));
    assert_eq!(b.request.allocated_nics, ["ib0"]);
    let g = &b.request.generic_devices;
    assert_eq!(g.len(), 1);
    assert_eq!(
        (g[0].pci_bus_id.as_str(), g[0].numa_node, g[0].name.as_str()),
        ("0000:99:00.0", Some(1), "example.com/accel=fn0")
    );
    assert!(b.unread.is_empty(), "{:?}", b.unread);
    // A GPU given through a resolved claim is no env-only GPU: never remapped.
    assert!(!b.devices.spec.gpus_only_by_env && !b.devices.remappable);
}

#[test]
fn a_pci_function_of_a_topology_gpu_is_that_gpu_and_mig_caps_share_it() {
    let c = ContainerView {
        cdi_devices: vec![
            "amd.com/gpu=0".into(),
            "k8s.gpu.nvidia.com/claim=u-mig".into(),
        ],
        cdi_resolved: vec![
            device("amd.com/gpu=0", vec![pci("0000:1b:00.0", Some(0))]),
            device(
                "k8s.gpu.nvidia.com/claim=u-mig",
                vec![CdiTarget::NvidiaGpu { minor: 1 }, CdiTarget::MigCapability],
            ),
        ],
        ..Default::default()
    };
    let b = build(&gpu_topology(), &PodView::default(), &c, false).expect("built");
    assert_eq!(b.request.allocated_gpus, ["0000:1b:00.0"]);
    assert_eq!(b.request.shared_gpus, ["0000:3b:00.0"]);
    assert!(b.request.generic_devices.is_empty());
}

#[test]
fn kubelet_claims_are_a_source_of_names() {
    let c = ContainerView {
        kubelet_claims: vec![KubeletClaimDevice {
            claim: "ml/gpu-claim".into(),
            driver: "gpu.nvidia.com".into(),
            pool: "node-1".into(),
            device: "gpu-0".into(),
            cdi_names: vec!["k8s.gpu.nvidia.com/claim=u2-gpu-0".into()],
        }],
        cdi_resolved: vec![device(
            "k8s.gpu.nvidia.com/claim=u2-gpu-0",
            vec![CdiTarget::NvidiaGpu { minor: 0 }],
        )],
        ..Default::default()
    };
    let b = build(&gpu_topology(), &PodView::default(), &c, false).expect("built");
    assert_eq!(b.request.allocated_gpus, ["0000:1b:00.0"]);
    // A GPU minor the host lacks, named by an authoritative claim, is refused.
    let mut bad = c.clone();
    bad.cdi_resolved[0].targets = vec![CdiTarget::NvidiaGpu { minor: 7 }];
    let e = build(&gpu_topology(), &PodView::default(), &bad, false).expect_err("unknown");
    let RequestError::UnknownGpu { origin, .. } = e;
    assert!(origin.contains("ml/gpu-claim"), "{origin}");
}

#[test]
fn unresolved_names_of_other_vendors_are_noted_not_refused() {
    let c = ContainerView {
        cdi_devices: vec!["vendor.com/fpga=x".into(), "nvidia.com/gpu=1".into()],
        cdi_resolved: vec![CdiDevice {
            unmapped: vec!["/dev/fpga-x: no such device node on the host".into()],
            ..device("vendor.com/fpga=x", Vec::new())
        }],
        ..Default::default()
    };
    let b = build(&gpu_topology(), &PodView::default(), &c, false).expect("built");
    // The NVIDIA name no spec resolves is still read from the name.
    assert_eq!(b.request.allocated_gpus, ["0000:3b:00.0"]);
    assert!(b.request.generic_devices.is_empty());
    let whys: Vec<&str> = b.unread.iter().map(|u| u.why.as_str()).collect();
    assert!(whys.iter().any(|w| w.contains("/dev/fpga-x")), "{whys:?}");
    assert!(
        whys.iter().any(|w| w.contains("does not align")),
        "{whys:?}"
    );
}

#[test]
fn resolve_cdi_looks_up_every_source_once() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("etc/cdi")).expect("mkdir");
    std::fs::write(
        dir.path().join("etc/cdi/v.yaml"),
        "cdiVersion: 0.6.0\nkind: v.com/c\ndevices:\n- name: a\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n- name: b\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia1\n",
    )
    .expect("write");
    let s = crate::host::cdi::scan(dir.path(), &["/etc/cdi".into()]);
    let c = ContainerView {
        cdi_devices: vec!["v.com/c=a".into()],
        annotations: [(
            "cdi.k8s.io/p_x".to_string(),
            "v.com/c=a,v.com/c=b".to_string(),
        )]
        .into(),
        ..Default::default()
    };
    let names: Vec<String> = resolve_cdi(&s.index, &c, &c.kubelet_claims)
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(names, ["v.com/c=a", "v.com/c=b"]);
}

#[test]
fn devices_matched_back_from_what_the_runtime_injected_are_aligned() {
    // As containerd 2.1 passes a container whose CRI `CDI_devices` it applied: no name, the
    // spec's nodes in `linux.devices`.
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("var/run/cdi")).expect("mkdir");
    std::fs::write(
        dir.path().join("var/run/cdi/k8s.gpu.nvidia.com-claim_u1.yaml"),
        "cdiVersion: 0.5.0\nkind: k8s.gpu.nvidia.com/claim\ndevices:\n- name: u1-gpu-1\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia1\n",
    )
    .expect("write");
    let s = crate::host::cdi::scan(dir.path(), &["/var/run/cdi".into()]);
    let mut c = ContainerView {
        devices: vec![crate::enforce::inputs::tests::node("/dev/nvidia1", 195, 1)],
        ..Default::default()
    };
    c.cdi_resolved = resolve_cdi(&s.index, &c, &c.kubelet_claims);
    let got: Vec<&str> = c.cdi_resolved.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(got, ["k8s.gpu.nvidia.com/claim=u1-gpu-1"]);
    assert_eq!(matched_back(&c), got);
    // The claim's GPU is read as CDI (before the device node itself), and an accelerator
    // matched back the same way is a generic device.
    c.cdi_resolved.push(device(
        "example.com/accel=fn0",
        vec![pci("0000:99:00.0", Some(1))],
    ));
    let b = build(&gpu_topology(), &PodView::default(), &c, false).expect("built");
    assert_eq!(b.request.allocated_gpus, ["0000:3b:00.0"]);
    assert_eq!(b.devices.source, Some(super::super::GpuSource::Cdi));
    let g = &b.request.generic_devices;
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(g[0].pci_bus_id, "0000:99:00.0");
    // A device a source named is no match-back.
    c.cdi_devices = vec!["example.com/accel=fn0".into()];
    assert_eq!(matched_back(&c), ["k8s.gpu.nvidia.com/claim=u1-gpu-1"]);
}

/// 50,000 names from the runtime and the kubelet, each device named twice: deduplicated in
/// one pass (a set), each kept once in the order first named. (A scan of the names kept per
/// name took 9.3 s here, under the engine lock.)
#[test]
fn fifty_thousand_names_are_deduplicated_in_order() {
    let distinct: Vec<String> = (0..25_000)
        .map(|i| format!("example.com/accel=d{i}"))
        .collect();
    let c = ContainerView {
        cdi_devices: distinct.clone(),
        kubelet_claims: vec![KubeletClaimDevice {
            claim: "c".into(),
            driver: "example.com".into(),
            pool: "p".into(),
            device: "d".into(),
            cdi_names: distinct.iter().rev().cloned().collect(),
        }],
        ..Default::default()
    };
    let mut f = Found::default();
    let names = cdi_names(&c, &mut f);
    assert_eq!(names.len(), distinct.len());
    assert!(names
        .iter()
        .zip(&distinct)
        .all(|((origin, q), d)| origin == "CDI device" && q.to_string() == *d));
    // Through the whole source: one note per device, not per name.
    let mut f = Found::default();
    let gpus = cdi_devices(&gpu_topology(), &c, &mut f).expect("read");
    assert!(!gpus.any_gpu());
    assert_eq!(f.unread.len(), distinct.len());
}
