//! The engine on the shipped host descriptions themselves (`packaging/hosts/*.yaml` through
//! `HostDesc::to_topology`, the topology `simulate --host` and the emulated trees give), not on
//! in-memory look-alikes: every policy on every host, the cube mesh, NIC pairing on DGX H100 with
//! its storage NICs, PCIe-only GPU pairs, NPS4 distances, Grace Hopper's GPU memory node, the
//! 16-node host, and what rejections say.

use std::sync::Arc;

use align_core::placement::gpus::LinkTable;
use align_core::placement::{Allocator, GpuMode, PlacementConfig, Policy, Request};
use align_core::topology::desc::HostDesc;
use align_core::topology::{PcieLevel, Topology};
use simulate::{self, Strategy, Workload};
use test_support::requests::{annotated, guaranteed, with_gpus, GIB};

/// A Guaranteed container of `cpus` CPUs and `mem_gib` GiB (none for 0), alone in its pod.
fn req(id: &str, cpus: u64, mem_gib: u64, ann: &[(&str, &str)]) -> Request {
    annotated(
        guaranteed(id, cpus * 1000, (mem_gib > 0).then_some(mem_gib * GIB)),
        ann,
    )
}

fn host(name: &str) -> Topology {
    HostDesc::load(name)
        .unwrap_or_else(|e| panic!("shipped description {name}: {e}"))
        .to_topology()
}

fn alloc(topo: &Topology, policy: Policy, mode: GpuMode) -> Allocator {
    Allocator::new(
        Arc::new(topo.clone()),
        PlacementConfig {
            policy,
            gpu_mode: mode,
            ..PlacementConfig::default()
        },
    )
}

fn gpu_index(topo: &Topology, bus: &str) -> usize {
    topo.gpus
        .iter()
        .position(|g| g.pci_bus_id == bus)
        .expect("GPU of the topology")
}

/// Every shipped host, every policy: an admitted exclusive container sits on CPUs of its nodes,
/// never on memory-only nodes, and `aligned` means its GPUs are on those nodes.
#[test]
fn every_policy_on_every_shipped_host() {
    for name in HostDesc::shipped_names() {
        let topo = host(&name);
        for policy in ["none", "best-effort", "restricted", "single-numa-node"] {
            let mut a = alloc(&topo, Policy::BestEffort, GpuMode::Remap);
            // Up to 2 GPUs that share a node, so that every policy can admit the request.
            let n = topo
                .gpus
                .iter()
                .filter(|g| g.numa_node == topo.gpus[0].numa_node)
                .count()
                .min(2);
            // The shared pool keeps at least one CPU, so a 2-CPU host admits one exclusive CPU.
            let want = if topo.cpus.len() > 2 { 2 } else { 1 };
            let r = with_gpus(
                req("x", want, 0, &[("policy.nri-align.io/pod", policy)]),
                &topo,
                &(0..n).collect::<Vec<_>>(),
            );
            let x = a
                .place(&r)
                .unwrap_or_else(|e| panic!("{name} {policy}: {e}"));
            assert_eq!(x.cpus.len(), want as usize, "{name} {policy}");
            assert_eq!(x.gpus.len(), n, "{name} {policy}");
            for id in x.mems.iter() {
                let node = topo.node(id).expect("node");
                assert!(!node.is_memory_only(), "{name} {policy}: mems {}", x.mems);
            }
            if policy == "none" {
                assert!(!x.aligned, "{name}: policy none never claims alignment");
                continue;
            }
            for c in x.cpus.iter() {
                let cpu = topo.cpus.iter().find(|k| k.id == c).expect("cpu");
                assert!(x.numa_nodes.contains(cpu.numa_node), "{name} {policy}");
            }
            if x.aligned {
                for g in &x.gpus {
                    let node = topo.gpus[gpu_index(&topo, g)].numa_node;
                    assert!(node.is_some_and(|n| x.numa_nodes.contains(n)), "{name}");
                }
            }
        }
    }
}

/// DGX-1V: whatever GPUs are busy, a 2-GPU request never gets a pair without NVLink while a
/// linked pair is free; on an idle host, 4 GPUs are one of the two NVLink quads.
#[test]
fn dgx1_cube_mesh_pairs_and_quads() {
    let topo = host("dgx1-v100");
    let links = LinkTable::new(&topo);
    for busy in 0u32..256 {
        let held: Vec<usize> = (0..8).filter(|g| busy & (1 << g) != 0).collect();
        let free: Vec<usize> = (0..8).filter(|g| busy & (1 << g) == 0).collect();
        if free.len() < 2 {
            continue;
        }
        let mut a = alloc(&topo, Policy::BestEffort, GpuMode::Keep);
        if !held.is_empty() {
            a.place(&with_gpus(req("hold", 0, 0, &[]), &topo, &held))
                .expect("hold");
        }
        a.set_config(PlacementConfig::default());
        let x = a
            .place(&with_gpus(req("x", 2, 1, &[]), &topo, &free[..2]))
            .expect("2 GPUs");
        let got: Vec<usize> = x.gpus.iter().map(|g| gpu_index(&topo, g)).collect();
        let linked_free = free
            .iter()
            .any(|&i| free.iter().any(|&j| i != j && links.linked(i, j)));
        if linked_free {
            assert!(
                links.linked(got[0], got[1]),
                "busy {held:?}: got unlinked {got:?}"
            );
        }
    }
    let mut a = alloc(&topo, Policy::SingleNumaNode, GpuMode::Remap);
    let x = a
        .place(&with_gpus(req("q", 8, 16, &[]), &topo, &[0, 1, 4, 5]))
        .expect("quad");
    let mut got: Vec<usize> = x.gpus.iter().map(|g| gpu_index(&topo, g)).collect();
    got.sort_unstable();
    assert!(got == [0, 1, 2, 3] || got == [4, 5, 6, 7], "{got:?}");
    assert!(x.aligned, "{}", x.reason);
}

/// DGX-1V: 1-GPU pods with a NIC fill the node already in use before they open the idle one,
/// even once every NIC of the used node is shared: an idle node's GPU for an unshared NIC
/// would break the whole node a later 4-GPU pod needs under single-numa-node.
#[test]
fn dgx1_one_gpu_pods_keep_the_idle_node_whole() {
    let topo = host("dgx1-v100");
    let mut a = alloc(&topo, Policy::SingleNumaNode, GpuMode::Remap);
    let mut nodes = Vec::new();
    for i in 0..4 {
        let mut r = req(&format!("j{i}"), 4, 16, &[]);
        r.pod.uid = format!("uid-j{i}");
        let free = a.free_by_node();
        r.allocated_gpus = vec![free
            .iter()
            .flat_map(|n| &n.gpus)
            .next()
            .expect("GPU")
            .clone()];
        r.allocated_nics = vec![free
            .iter()
            .flat_map(|n| &n.nics)
            .next()
            .expect("NIC")
            .clone()];
        let x = a.place(&r).expect("1 GPU + 1 NIC");
        assert!(x.aligned, "{}", x.reason);
        nodes.push(topo.gpus[gpu_index(&topo, &x.gpus[0])].numa_node);
    }
    assert!(nodes.iter().all(|n| *n == nodes[0]), "GPU nodes {nodes:?}");
    let quad = a
        .place(&with_gpus(req("q", 8, 16, &[]), &topo, &[0, 1, 2, 3]))
        .expect("4 GPUs on the idle node");
    assert!(quad.aligned, "{}", quad.reason);
    let mut got: Vec<usize> = quad.gpus.iter().map(|g| gpu_index(&topo, g)).collect();
    got.sort_unstable();
    assert!(got == [0, 1, 2, 3] || got == [4, 5, 6, 7], "{got:?}");
}

/// DGX H100: one GPU + one NIC per container, eight times: each gets the compute NIC under its
/// GPU's own switch (PIX), never a storage NIC of the same node.
#[test]
fn dgx_h100_nics_pair_at_the_gpu_switch() {
    let topo = host("dgx-h100");
    let mut a = alloc(&topo, Policy::SingleNumaNode, GpuMode::Remap);
    let mut r = req("j", 8, 32, &[]);
    for i in 0..8 {
        r.container_id = format!("j{i}");
        r.pod.uid = format!("uid-j{i}");
        let free = a
            .free_by_node()
            .into_iter()
            .flat_map(|n| n.gpus)
            .next()
            .expect("a free GPU");
        let nic = a
            .free_by_node()
            .into_iter()
            .flat_map(|n| n.nics)
            .next()
            .expect("a free NIC");
        r.allocated_gpus = vec![free];
        r.allocated_nics = vec![nic];
        let x = a.place(&r).expect("1 GPU + 1 NIC");
        let nic = topo.nics.iter().find(|n| n.name == x.nics[0]).expect("nic");
        let level = topo.pcie_level(nic.pci_bus_id.as_deref().expect("bus"), &x.gpus[0]);
        assert_eq!(
            level,
            PcieLevel::SingleSwitch,
            "{}: {}",
            x.gpus[0],
            nic.name
        );
        assert!(x.reason.contains("nic path PIX"), "{}", x.reason);
    }
}

/// PCIe-only box: a pair comes from one switch; 4 GPUs never fit one node, and the message says
/// what the best node had and what to change.
#[test]
fn pcie_4gpu_pairs_and_rejection() {
    let topo = host("pcie-4gpu");
    let mut a = alloc(&topo, Policy::SingleNumaNode, GpuMode::Remap);
    let x = a
        .place(&with_gpus(req("p", 4, 8, &[]), &topo, &[1, 2]))
        .expect("pair");
    assert_eq!(
        topo.pcie_level(&x.gpus[0], &x.gpus[1]),
        PcieLevel::SingleSwitch,
        "{:?}",
        x.gpus
    );
    let mut a = alloc(&topo, Policy::SingleNumaNode, GpuMode::Remap);
    let err = a
        .place(&with_gpus(req("q", 4, 8, &[]), &topo, &[0, 1, 2, 3]))
        .expect_err("4 GPUs on one node");
    let msg = err.to_string();
    for want in [
        "under policy single-numa-node: gpus do not fit one NUMA node",
        "asked cpu 4, memory 8Gi, gpus 4, nics 0",
        "reduce gpus to 2",
        "use policy restricted or best-effort",
    ] {
        assert!(msg.contains(want), "missing {want:?} in: {msg}");
    }
}

/// EPYC NPS4: a request wider than a node spans the closest nodes of one socket (best-effort,
/// restricted), and single-numa-node says what would fit.
#[test]
fn epyc_nps4_spans_neighbours_and_explains_rejections() {
    let topo = host("epyc-nps4");
    let per_node = topo.numa_nodes[0].cpus.len() as u64;
    for policy in [Policy::BestEffort, Policy::Restricted] {
        let mut a = alloc(&topo, policy, GpuMode::Remap);
        let x = a
            .place(&req("w", per_node + 8, 8, &[]))
            .expect("spans two nodes");
        let ids: Vec<u32> = x.numa_nodes.iter().collect();
        assert_eq!(ids.len(), 2, "{policy}: {ids:?}");
        let pkg = |n: u32| {
            topo.cpus
                .iter()
                .find(|c| c.numa_node == n)
                .map(|c| c.package)
        };
        assert_eq!(pkg(ids[0]), pkg(ids[1]), "{policy}: same socket {ids:?}");
        let closest = topo.numa_nodes[0]
            .distances
            .iter()
            .filter(|d| **d > 10)
            .min()
            .copied();
        assert_eq!(Some(topo.distance(ids[0], ids[1])), closest, "{policy}");
    }
    let mut a = alloc(&topo, Policy::SingleNumaNode, GpuMode::Remap);
    let msg = a
        .place(&req("w", per_node + 8, 8, &[]))
        .expect_err("wider than a node")
        .to_string();
    assert!(msg.contains("cpu does not fit one NUMA node"), "{msg}");
    assert!(msg.contains(&format!("reduce cpu to {per_node}")), "{msg}");
}

/// Grace Hopper: the GPU memory node joins cpuset.mems only when asked for.
#[test]
fn grace_hopper_gpu_memory_only_when_asked() {
    let topo = host("grace-hopper");
    let memory_only: Vec<u32> = topo
        .numa_nodes
        .iter()
        .filter(|n| n.is_memory_only())
        .map(|n| n.id)
        .collect();
    assert!(!memory_only.is_empty());
    let mut a = alloc(&topo, Policy::SingleNumaNode, GpuMode::Remap);
    let x = a
        .place(&with_gpus(req("a", 8, 16, &[]), &topo, &[0]))
        .expect("plain");
    assert!(
        memory_only.iter().all(|m| !x.mems.contains(*m)),
        "{}",
        x.mems
    );
    let x = a
        .place(&req(
            "b",
            8,
            16,
            &[("mems.nri-align.io/pod", "with-memory-only")],
        ))
        .expect("with memory-only");
    assert!(
        memory_only.iter().all(|m| x.mems.contains(*m)),
        "{}",
        x.mems
    );
}

/// The 16-node host: a node-sized request stays on one node; a 4-node-wide one stays in one
/// socket; the kubelet strategy refuses the host with its own limit named.
#[test]
fn numa16_stays_narrow_and_the_kubelet_refuses_it() {
    let topo = host("numa16-1024");
    assert_eq!(topo.numa_nodes.len(), 16);
    assert_eq!(topo.cpus.len(), 1024);
    let mut a = alloc(&topo, Policy::Restricted, GpuMode::Remap);
    let x = a.place(&req("a", 48, 16, &[])).expect("one node");
    assert_eq!(x.numa_nodes.len(), 1);
    let x = a.place(&req("b", 200, 64, &[])).expect("four nodes");
    assert_eq!(x.numa_nodes.len(), 4, "{}", x.numa_nodes);
    let packages: std::collections::BTreeSet<u32> = x
        .cpus
        .iter()
        .filter_map(|c| topo.cpus.iter().find(|k| k.id == c).map(|k| k.package))
        .collect();
    assert_eq!(packages.len(), 1, "one socket: {}", x.numa_nodes);
    let wl = Workload::parse("pods: [{name: p, containers: [{name: c, cpu: 1}]}]").expect("wl");
    let err = simulate::replay(
        Arc::new(topo),
        PlacementConfig::default(),
        &wl,
        Strategy::Kubelet,
    )
    .expect_err("kubelet limit");
    assert!(
        err.to_string().contains("max-allowable-numa-nodes"),
        "{err}"
    );
}

/// A workload file as users write it (inline comments, optional fields), on each GPU host
/// through both strategies: a device shortage is a rejection naming it, never a silently
/// smaller allocation.
#[test]
fn commented_workload_replays_and_device_shortage_is_a_rejection() {
    let text = r#"
pods:
  - name: train-a
    namespace: default                              # optional
    annotations: {policy.nri-align.io/pod: single-numa-node}
    containers:
      - name: trainer
        cpu: "16"          # request; `cpu_limit` defaults to it (equal and integer -> exclusive)
        memory: 64Gi       # limit
        gpus: 4            # allocated by a device plugin
        nics: 1
events:                    # optional; default: add every pod in order
  - add: train-a
  - remove: train-a
"#;
    let wl = Workload::parse(text).expect("the workload form");
    for (name, admitted) in [
        ("dgx-h100", true),
        ("dgx1-v100", true),
        ("pcie-4gpu", false),
        ("epyc-nps4", false),
    ] {
        for strategy in [Strategy::NriAlign, Strategy::Kubelet] {
            let topo = Arc::new(host(name));
            let report =
                simulate::replay(topo, PlacementConfig::default(), &wl, strategy).expect("replay");
            let d = &report.decisions[0];
            assert_eq!(d.admitted, admitted, "{name} {strategy}: {}", d.reason);
            assert_eq!(report.summary.strategy, strategy.to_string());
            if admitted {
                assert_eq!(d.gpus.len(), 4, "{name} {strategy}");
                // nri-align gives the one NIC asked; the kubelet baseline's default RDMA
                // plugin (the shared one) hands the container every RDMA NIC of the host.
                let want = match strategy {
                    Strategy::NriAlign => 1,
                    Strategy::Kubelet => host(name)
                        .nics
                        .iter()
                        .filter(|n| n.rdma_device.is_some())
                        .count(),
                };
                assert_eq!(d.nics.len(), want, "{name} {strategy}");
            }
            if name == "epyc-nps4" {
                assert!(
                    d.reason.contains("cannot allocate 4 GPUs: 0 free"),
                    "{strategy}: {}",
                    d.reason
                );
            }
            // After the removal every node is as free as before the add.
            let total: usize = report.steps[1].free.iter().map(|n| n.cpus.len()).sum();
            assert_eq!(total, host(name).cpus.len(), "{name} {strategy}");
        }
    }
}

/// Pod scope: when the pod's totals are known (simulate knows them; the plugin can read the
/// pod's resources), the first container's node set is chosen to hold the whole pod, so a
/// small first container does not pin the pod where its large second one cannot fit. Both
/// strategies, as the kubelet's pod scope sums the requests too.
#[test]
fn pod_scope_sizes_the_first_container_for_the_whole_pod() {
    let text = r#"
pods:
  - name: fill
    containers:
      - {name: a, cpu: 100, memory: 8Gi}
  - name: pinned
    annotations: {policy.nri-align.io/pod: restricted, scope.nri-align.io/pod: pod}
    containers:
      - {name: a, cpu: 4, memory: 8Gi}
      - {name: b, cpu: 30, memory: 8Gi}
"#;
    let wl = Workload::parse(text).expect("workload");
    for strategy in [Strategy::NriAlign, Strategy::Kubelet] {
        let report = simulate::replay(
            Arc::new(host("dgx-h100")),
            PlacementConfig::default(),
            &wl,
            strategy,
        )
        .expect("replay");
        let pinned: Vec<_> = report
            .decisions
            .iter()
            .filter(|d| d.pod == "default/pinned")
            .collect();
        assert!(
            pinned.iter().all(|d| d.admitted),
            "{strategy}: {:?}",
            pinned.iter().map(|d| &d.reason).collect::<Vec<_>>()
        );
        assert_eq!(pinned[0].mems, pinned[1].mems, "{strategy}: one node set");
    }

    // The engine alone: without the totals, best fit pins the pod on the tight node 0 and the
    // second container is refused, saying what to change; with them, both land on node 1.
    let topo = host("dgx-h100");
    let ann = [
        ("policy.nri-align.io/pod", "restricted"),
        ("scope.nri-align.io/pod", "pod"),
    ];
    let mut a = alloc(&topo, Policy::BestEffort, GpuMode::Remap);
    a.place(&req("fill", 100, 8, &[])).expect("fill");
    let mut first = req("a", 4, 8, &ann);
    let mut second = req("b", 30, 8, &ann);
    for r in [&mut first, &mut second] {
        r.pod.uid = "uid-pod".into();
        r.pod.name = "pod".into();
    }
    let mut blind = a.clone();
    blind.place(&first).expect("first");
    let msg = blind
        .place(&second)
        .expect_err("pinned to node 0")
        .to_string();
    assert!(msg.contains("the pod's NUMA node 0"), "{msg}");
    assert!(msg.contains("use scope container"), "{msg}");
    a.expect_pod(
        "uid-pod",
        align_core::placement::PodTotals::of(&[first.clone(), second.clone()]),
    );
    let x = a.place(&first).expect("first");
    let y = a.place(&second).expect("second");
    assert_eq!(x.numa_nodes, y.numa_nodes);
    assert_eq!(x.numa_nodes.to_string(), "1");
}

/// GB200 tray in NUMA mode: the default keeps cpuset.mems on the Grace node; `with-memory-only`
/// adds the HBM nodes of the GPUs on that Grace and never the empty MIG placeholder nodes (the
/// kernel refuses a cpuset.mems naming a node without memory). Under CDMM there is no GPU
/// memory node to add.
#[test]
fn gb200_hbm_nodes_only_when_asked_and_never_the_empty_ones() {
    let topo = host("gb200-nvl4-numa");
    assert_eq!(topo.numa_nodes.len(), 34);
    assert_eq!(topo.cpu_nodes().len(), 2);
    let hbm: Vec<u32> = topo
        .numa_nodes
        .iter()
        .filter(|n| n.is_memory_only() && n.memory_bytes > 0)
        .map(|n| n.id)
        .collect();
    assert_eq!(hbm, vec![2, 10, 18, 26]);
    let mut a = alloc(&topo, Policy::SingleNumaNode, GpuMode::Remap);
    let x = a
        .place(&with_gpus(req("a", 8, 16, &[]), &topo, &[0]))
        .expect("plain");
    assert_eq!(x.mems.to_string(), "0");
    let asked = [("mems.nri-align.io/pod", "with-memory-only")];
    let x = a
        .place(&with_gpus(req("b", 8, 16, &asked), &topo, &[1]))
        .expect("with memory-only");
    assert_eq!(
        x.mems.to_string(),
        "0,2,10",
        "GPU0's and GPU1's HBM, no placeholders"
    );

    let cdmm = host("gb200-nvl4-cdmm");
    assert_eq!(cdmm.numa_nodes.len(), 2);
    let mut a = alloc(&cdmm, Policy::SingleNumaNode, GpuMode::Remap);
    let x = a
        .place(&with_gpus(req("c", 8, 16, &asked), &cdmm, &[0]))
        .expect("cdmm");
    assert_eq!(x.mems.to_string(), "0");
}
