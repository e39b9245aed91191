//! Test doubles shared by the enforcement tests: an in-memory placer and a device lookup that
//! finds every NVIDIA node.

use std::collections::BTreeMap;

use crate::enforce::container::DeviceNode;
use crate::enforce::engine::{Placer, Rejection};
use crate::enforce::inputs::tests::{gpu_topology, node};
use crate::host::devices::DeviceLookup;
use crate::placement::{Assignment, GpuMode, NodeFree, PlacementConfig, PodTotals, Request};
use crate::topology::{Cpu, CpuSet, NodeSet, NumaNode, Topology};

/// A deliberately simple placer: exclusive integer-CPU containers get the lowest free CPUs of
/// one node (the node of their GPU when they have one), everything else the shared pool (on
/// their GPU's node when they have one).
pub(crate) struct FakePlacer {
    topo: Topology,
    cfg: PlacementConfig,
    held: BTreeMap<String, Assignment>,
    /// The GPU mode of each `plan` call, in order.
    pub(crate) modes: std::sync::Mutex<Vec<GpuMode>>,
    /// Failure injection: `plan` panics.
    pub(crate) panic_on_plan: bool,
    /// Failure injection: `commit` panics.
    pub(crate) panic_on_commit: bool,
    /// What `expect_pod` was told, in order.
    pub(crate) expected_pods: Vec<(String, PodTotals)>,
    /// Online CPUs after a hot-plug (`None`: the topology's).
    online: Option<CpuSet>,
    mem_offline: NodeSet,
}

/// CPUs 0-7, one core each, 0-3 on NUMA node 0 and 4-7 on node 1.
pub(crate) fn eight_cpus_on_two_nodes() -> Vec<Cpu> {
    (0..8)
        .map(|id| Cpu {
            id,
            package: 0,
            die: 0,
            core: id,
            numa_node: id / 4,
            l3_group: None,
            thread_siblings: [id].into_iter().collect(),
        })
        .collect()
}

impl FakePlacer {
    pub(crate) fn new() -> Self {
        let mut topo = gpu_topology();
        topo.gpus[1].numa_node = Some(1);
        topo.cpus = eight_cpus_on_two_nodes();
        // Nodes 0 and 1 with four CPUs each, as the CPUs above say.
        topo.numa_nodes = (0..2u32)
            .map(|n| NumaNode {
                id: n,
                cpus: (n * 4..n * 4 + 4).collect(),
                memory_bytes: 0,
                hugepages: Vec::new(),
                distances: vec![if n == 0 { 10 } else { 21 }, if n == 0 { 21 } else { 10 }],
                memory_kind: None,
            })
            .collect();
        Self {
            topo,
            cfg: PlacementConfig::default(),
            held: BTreeMap::new(),
            modes: Default::default(),
            panic_on_plan: false,
            panic_on_commit: false,
            expected_pods: Vec::new(),
            online: None,
            mem_offline: NodeSet::new(),
        }
    }
    /// The GPU mode of each `plan` call so far.
    pub(crate) fn modes(&self) -> Vec<GpuMode> {
        self.modes.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    fn exclusive_cpus(&self) -> CpuSet {
        let mut s = CpuSet::new();
        self.held
            .values()
            .filter(|a| a.exclusive)
            .for_each(|a| s.extend_from(&a.cpus));
        s
    }
}

impl Placer for FakePlacer {
    fn expect_pod(&mut self, uid: &str, totals: PodTotals) {
        self.expected_pods.push((uid.to_string(), totals));
    }
    type Plan = Assignment;
    fn planned(plan: &Assignment) -> &Assignment {
        plan
    }
    fn commit(&mut self, a: Assignment) -> Result<Assignment, Rejection> {
        if self.panic_on_commit {
            panic!("injected: placer panics while recording {}", a.container_id);
        }
        self.held.insert(a.container_id.clone(), a.clone());
        Ok(a)
    }
    fn held(&self) -> Vec<Assignment> {
        self.held.values().cloned().collect()
    }
    fn plan(&self, req: &Request, mode: GpuMode) -> Result<Assignment, Rejection> {
        self.modes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(mode);
        if self.panic_on_plan {
            panic!(
                "injected: placer panics while deciding {}",
                req.container_id
            );
        }
        let gpu_node = req
            .allocated_gpus
            .first()
            .and_then(|b| self.topo.gpus.iter().find(|g| &g.pci_bus_id == b))
            .and_then(|g| g.numa_node);
        let mut a = Assignment {
            container_id: req.container_id.clone(),
            container_name: req.container_name.clone(),
            gpus: req.allocated_gpus.clone(),
            nics: req.allocated_nics.clone(),
            policy: self.cfg.policy,
            aligned: true,
            reason: "fake".into(),
            ..Default::default()
        };
        let want = match req.cpu_limit_milli {
            Some(l) if l == req.cpu_request_milli && l % 1000 == 0 => (l / 1000) as usize,
            _ => 0,
        };
        if want == 0 {
            // Shared CPUs; with a GPU, those of the GPU's node (as the real allocator does).
            a.cpus = self.shared_pool();
            a.mems = "0-1".parse().expect("set");
            if let Some(n) = gpu_node {
                a.cpus = a.cpus.iter().filter(|c| c / 4 == n).collect();
                a.mems = [n].into_iter().collect();
                a.numa_nodes = [n].into_iter().collect();
            }
        } else {
            let free = self.shared_pool();
            let nodes: Vec<u32> = match gpu_node {
                Some(n) => vec![n],
                None => vec![0, 1],
            };
            let pick = nodes.iter().find_map(|n| {
                let on: Vec<u32> = free.iter().filter(|c| c / 4 == *n).take(want).collect();
                (on.len() == want).then_some((*n, on))
            });
            let Some((n, cpus)) = pick else {
                return Err(Rejection {
                    reason: "unalignable".into(),
                    message: format!("{} CPUs do not fit on one NUMA node", want),
                    another_holds: false,
                });
            };
            a.cpus = cpus.into_iter().collect();
            a.exclusive = true;
            a.mems = [n].into_iter().collect();
            a.numa_nodes = [n].into_iter().collect();
        }
        Ok(a)
    }
    fn release(&mut self, id: &str) -> Option<Assignment> {
        self.held.remove(id)
    }
    fn restore(&mut self, a: Assignment) -> Result<(), Rejection> {
        if a.exclusive && !a.cpus.is_disjoint(&self.exclusive_cpus()) {
            return Err(Rejection {
                reason: "conflict".into(),
                message: format!("cpus {} taken", a.cpus),
                another_holds: true,
            });
        }
        self.held.insert(a.container_id.clone(), a);
        Ok(())
    }
    fn shared_pool(&self) -> CpuSet {
        self.online()
            .difference(&self.cfg.reserved_cpus)
            .difference(&self.exclusive_cpus())
    }
    fn set_config(&mut self, c: PlacementConfig) {
        self.cfg = c;
    }
    fn set_online(&mut self, cpus: &CpuSet, mem_offline: &NodeSet) -> CpuSet {
        let known = self.topo.online_cpus();
        self.online = Some(cpus.intersection(&known));
        self.mem_offline = mem_offline.clone();
        cpus.difference(&known)
    }
    fn online(&self) -> CpuSet {
        self.online
            .clone()
            .unwrap_or_else(|| self.topo.online_cpus())
    }
    fn mem_offline(&self) -> NodeSet {
        self.mem_offline.clone()
    }
    fn topology(&self) -> &Topology {
        &self.topo
    }
    fn free_by_node(&self) -> Vec<NodeFree> {
        let pool = self.shared_pool();
        (0..2u32)
            .map(|n| NodeFree {
                node: n,
                cpus: pool.iter().filter(|c| c / 4 == n).collect(),
                memory_bytes: 0,
                gpus: Vec::new(),
                nics: Vec::new(),
                offline_cpus: CpuSet::new(),
                memory_offline: false,
                headroom_cpus: CpuSet::new(),
                hugepages: Vec::new(),
            })
            .collect()
    }
}

pub(crate) struct AllDevices;
impl DeviceLookup for AllDevices {
    fn lookup(&self, path: &str) -> Option<DeviceNode> {
        if let Some(minor) = crate::host::devices::nvidia_minor(path) {
            return Some(node(path, 195, i64::from(minor)));
        }
        // `/dev/infiniband/uverbsN` is char 231:(192 + N) on Linux.
        let n: i64 = crate::host::devices::uverbs_name(path)?
            .strip_prefix("uverbs")?
            .parse()
            .ok()?;
        Some(node(path, 231, 192 + n))
    }
}

/// Gives `c` the DRA CPU driver's claim `uid` of `cpus` as a real node hands it: the claim's
/// CDI device named by the kubelet's PodResources answer, its spec's env edit resolved, and the
/// entry the runtime injected into the container's env.
pub(crate) fn dra_cpu_claim(
    c: &mut crate::enforce::container::ContainerView,
    uid: &str,
    cpus: &str,
) {
    let name = format!("dra.k8s.io/cpu={uid}");
    let entry = format!("DRA_CPUSET_{uid}={cpus}");
    c.kubelet_claims
        .push(crate::enforce::container::KubeletClaimDevice {
            claim: format!("default/{uid}"),
            driver: "dra.cpu".into(),
            pool: "node".into(),
            device: format!("cpudev-{uid}"),
            cdi_names: vec![name.clone()],
        });
    c.cdi_resolved.push(crate::host::cdi::CdiDevice {
        name,
        spec: "/var/run/cdi/dra.cpu.json".into(),
        targets: Vec::new(),
        unmapped: Vec::new(),
        net_devices: Vec::new(),
        env: vec![entry.clone()],
        mounts: Vec::new(),
        nodes: Vec::new(),
    });
    c.env.push(entry);
}

/// Log lines written through a test's tracing subscriber (`with_writer(move || lines.clone())`).
#[derive(Clone, Default)]
pub(crate) struct LogLines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogLines {
    /// What was written, as text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}
