//! The static CPU manager's packed take (`takeByTopologyNUMAPacked` and its `cpuAccumulator` in
//! kubernetes/kubernetes `pkg/kubelet/cm/cpumanager/cpu_assignment.go`), for the kubelet
//! baseline, in the kubelet's order:
//! 1. whole free NUMA nodes and whole free sockets the request covers: NUMA nodes first where
//!    a NUMA node holds whole sockets (sockets >= NUMA nodes), sockets first where a socket
//!    holds several NUMA nodes;
//! 2. whole free cores;
//! 3. single threads, partly used cores first (the cores with the fewest free threads).
//!
//! Every ordering is the accumulator's: by free CPUs ascending (the fullest first, so packing
//! fills what is started), then by id; cores nested in the NUMA node (or socket) order, so a
//! single thread comes from the fullest node's fullest core. A core's id is its lowest CPU id
//! (the kubelet's unique core id). A NUMA node, socket or core is free when every one of its
//! CPUs is in the set taken from: a node holding a reserved CPU is never free.

use std::collections::BTreeMap;

use align_core::topology::{CpuSet, Topology};

/// `k` CPUs of `avail` in the kubelet's packed order, or `None` when `avail` has fewer.
pub fn take_packed(topo: &Topology, avail: &CpuSet, k: u32) -> Option<CpuSet> {
    let k = k as usize;
    if avail.len() < k {
        return None;
    }
    let mut acc = Accumulator::new(topo, avail, k);
    if acc.needed == 0 {
        return Some(acc.result);
    }
    let (first, second) = if acc.numa_first {
        (Level::Numa, Level::Socket)
    } else {
        (Level::Socket, Level::Numa)
    };
    for level in [first, second, Level::Core] {
        acc.take_whole(level);
        if acc.needed == 0 {
            return Some(acc.result);
        }
    }
    for cpu in acc.cpus_in_order() {
        acc.take(&CpuSet::from_iter([cpu]));
        if acc.needed == 0 {
            break;
        }
    }
    Some(acc.result)
}

/// A grouping of CPUs the accumulator takes whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Numa,
    Socket,
    Core,
}

/// Where one CPU sits.
#[derive(Debug, Clone, Copy)]
struct Place {
    numa: u32,
    socket: u32,
    core: u32,
}

struct Accumulator {
    places: BTreeMap<u32, Place>,
    /// Every CPU of each group, free or not.
    all: BTreeMap<(u8, u32), CpuSet>,
    avail: CpuSet,
    result: CpuSet,
    needed: usize,
    numa_first: bool,
}

fn key(level: Level, id: u32) -> (u8, u32) {
    (level as u8, id)
}

impl Accumulator {
    fn new(topo: &Topology, avail: &CpuSet, needed: usize) -> Self {
        let mut places = BTreeMap::new();
        let mut all: BTreeMap<(u8, u32), CpuSet> = BTreeMap::new();
        for c in &topo.cpus {
            let core = c.thread_siblings.first().unwrap_or(c.id).min(c.id);
            let place = Place {
                numa: c.numa_node,
                socket: c.package,
                core,
            };
            places.insert(c.id, place);
            for (level, id) in [
                (Level::Numa, place.numa),
                (Level::Socket, place.socket),
                (Level::Core, place.core),
            ] {
                all.entry(key(level, id)).or_default().insert(c.id);
            }
        }
        let count = |level: Level| all.keys().filter(|(l, _)| *l == level as u8).count();
        let numa_first = count(Level::Socket) >= count(Level::Numa);
        Self {
            places,
            all,
            avail: avail.clone(),
            result: CpuSet::new(),
            needed,
            numa_first,
        }
    }

    fn take(&mut self, cpus: &CpuSet) {
        self.result.extend_from(cpus);
        self.avail.subtract(cpus);
        self.needed = self.needed.saturating_sub(cpus.len());
    }

    fn id_of(&self, cpu: u32, level: Level) -> Option<u32> {
        let p = self.places.get(&cpu)?;
        Some(match level {
            Level::Numa => p.numa,
            Level::Socket => p.socket,
            Level::Core => p.core,
        })
    }

    /// Free CPUs of each group of `level` within `within` (a group of `parent`), or of every
    /// group with free CPUs, sorted by free CPUs ascending, then id.
    fn sorted(&self, level: Level, within: Option<(Level, u32)>) -> Vec<u32> {
        let mut free: BTreeMap<u32, usize> = BTreeMap::new();
        for cpu in self.avail.iter() {
            if let Some((parent, pid)) = within {
                if self.id_of(cpu, parent) != Some(pid) {
                    continue;
                }
            }
            if let Some(id) = self.id_of(cpu, level) {
                *free.entry(id).or_default() += 1;
            }
        }
        let mut ids: Vec<(usize, u32)> = free.into_iter().map(|(id, n)| (n, id)).collect();
        ids.sort_unstable();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// `level`'s groups in the accumulator's order: the upper level's order first, then
    /// sorted within each (`sortAvailableNUMANodes`, `sortAvailableSockets`,
    /// `sortAvailableCores`).
    fn order(&self, level: Level) -> Vec<u32> {
        let parent = match (level, self.numa_first) {
            (Level::Numa, true) | (Level::Socket, false) => return self.sorted(level, None),
            (Level::Socket, true) => Level::Numa,
            (Level::Numa, false) => Level::Socket,
            (Level::Core, true) => Level::Socket,
            (Level::Core, false) => Level::Numa,
        };
        let mut out = Vec::new();
        for p in self.order(parent) {
            for id in self.sorted(level, Some((parent, p))) {
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        }
        out
    }

    /// Takes each free group of `level` the request still covers whole.
    fn take_whole(&mut self, level: Level) {
        for id in self.order(level) {
            let Some(cpus) = self.all.get(&key(level, id)).cloned() else {
                continue;
            };
            if cpus.is_subset(&self.avail) && self.needed >= cpus.len() {
                self.take(&cpus);
            }
        }
    }

    /// Free CPUs core by core in core order, each core's ascending.
    fn cpus_in_order(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for core in self.order(Level::Core) {
            if let Some(cpus) = self.all.get(&key(Level::Core, core)) {
                out.extend(cpus.intersection(&self.avail).iter());
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "kubelet_cpus_tests.rs"]
pub(crate) mod tests;
