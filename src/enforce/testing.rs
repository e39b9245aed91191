//! Test doubles shared by the enforcement tests: an in-memory placer and a device lookup that
//! finds every NVIDIA node.

use std::collections::BTreeMap;

use crate::enforce::container::DeviceNode;
use crate::enforce::engine::{Placer, Rejection};
use crate::enforce::inputs::tests::{gpu_topology, node};
use crate::host::devices::DeviceLookup;
use crate::metrics::NodeFreeSample;
use crate::placement::{Assignment, PlacementConfig, PodTotals, Request};
use crate::topology::{Cpu, CpuSet, Topology};

/// A deliberately simple placer: exclusive integer-CPU containers get the lowest free CPUs of
/// one node (the node of their GPU when they have one), everything else the shared pool (on
/// their GPU's node when they have one).
pub(crate) struct FakePlacer {
    topo: Topology,
    cfg: PlacementConfig,
    held: BTreeMap<String, Assignment>,
    /// The GPU mode in force at each `place` call, in order.
    pub(crate) modes: Vec<crate::placement::GpuMode>,
    /// What `expect_pod` was told, in order.
    pub(crate) expected_pods: Vec<(String, PodTotals)>,
}

impl FakePlacer {
    pub(crate) fn new() -> Self {
        let mut topo = gpu_topology();
        topo.gpus[1].numa_node = Some(1);
        topo.cpus = (0..8)
            .map(|id| Cpu {
                id,
                package: 0,
                die: 0,
                core: id,
                numa_node: id / 4,
                l3_group: None,
                thread_siblings: [id].into_iter().collect(),
            })
            .collect();
        Self {
            topo,
            cfg: PlacementConfig::default(),
            held: BTreeMap::new(),
            modes: Vec::new(),
            expected_pods: Vec::new(),
        }
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
    fn place(&mut self, req: &Request) -> Result<Assignment, Rejection> {
        self.modes.push(self.cfg.gpu_mode);
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
                });
            };
            a.cpus = cpus.into_iter().collect();
            a.exclusive = true;
            a.mems = [n].into_iter().collect();
            a.numa_nodes = [n].into_iter().collect();
        }
        self.held.insert(a.container_id.clone(), a.clone());
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
            });
        }
        self.held.insert(a.container_id.clone(), a);
        Ok(())
    }
    fn shared_pool(&self) -> CpuSet {
        self.topo
            .online_cpus()
            .difference(&self.cfg.reserved_cpus)
            .difference(&self.exclusive_cpus())
    }
    fn set_config(&mut self, c: PlacementConfig) {
        self.cfg = c;
    }
    fn topology(&self) -> &Topology {
        &self.topo
    }
    fn free_by_node(&self) -> Vec<NodeFreeSample> {
        let pool = self.shared_pool();
        (0..2u32)
            .map(|n| NodeFreeSample {
                node: n,
                cpus: pool.iter().filter(|c| c / 4 == n).count() as u64,
                ..Default::default()
            })
            .collect()
    }
}

pub(crate) struct AllDevices;
impl DeviceLookup for AllDevices {
    fn lookup(&self, path: &str) -> Option<DeviceNode> {
        let minor = crate::host::devices::nvidia_minor(path)?;
        Some(node(path, 195, i64::from(minor)))
    }
}
