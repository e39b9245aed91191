//! Requests and the replay of random steps that the placement unit tests share.

use super::allocator::Allocator;
use super::assignment::Assignment;
use super::request::{PodInfo, Request};
use crate::topology::{CpuSet, NodeSet};

/// Container `c{n}` of pod `pod{n}`: Guaranteed with `cpus` whole CPUs and 1 GiB (exclusive),
/// or, with 0, a shared container without limits.
pub(crate) fn request(n: usize, cpus: u64) -> Request {
    Request {
        container_id: format!("c{n}"),
        container_name: "main".into(),
        pod: PodInfo {
            uid: format!("uid{n}"),
            namespace: "default".into(),
            name: format!("pod{n}"),
            ..PodInfo::default()
        },
        cpu_request_milli: cpus * 1000,
        cpu_limit_milli: (cpus > 0).then_some(cpus * 1000),
        memory_limit_bytes: (cpus > 0).then_some(1 << 30),
        ..Request::default()
    }
}

/// One step of a random sequence of creations, removals and CPU hot-plug that the allocator's
/// property tests replay.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// A container asking for this many whole CPUs (0: a shared one).
    Create(u64),
    /// Removes the live container at this position (modulo how many live).
    Remove(usize),
    /// Takes this CPU offline (never the last one: the kernel keeps one).
    Offline(u32),
    /// Brings this CPU back.
    Online(u32),
}

/// What a replay keeps between steps: the online CPUs and the live containers.
pub(crate) struct Replay {
    pub(crate) online: CpuSet,
    pub(crate) live: Vec<String>,
    next: usize,
}

impl Replay {
    pub(crate) fn new(a: &Allocator) -> Self {
        Self {
            online: a.topology().online_cpus(),
            live: Vec::new(),
            next: 0,
        }
    }

    /// Applies `step` to `a` (then hands it the online CPUs) and returns what a creation
    /// placed, with the shared pool just before it.
    pub(crate) fn apply(&mut self, a: &mut Allocator, step: Step) -> Option<(Assignment, CpuSet)> {
        let mut placed = None;
        match step {
            Step::Create(cpus) => {
                self.next += 1;
                let before = a.shared_pool();
                if let Ok(x) = a.place(&request(self.next, cpus)) {
                    self.live.push(x.container_id.clone());
                    placed = Some((x, before));
                }
            }
            Step::Remove(i) if !self.live.is_empty() => {
                let id = self.live.remove(i % self.live.len());
                assert!(a.release(&id).is_some(), "{id} was live");
            }
            Step::Remove(_) => {}
            Step::Offline(cpu) if self.online.len() > 1 => {
                self.online.remove(cpu);
            }
            Step::Offline(_) => {}
            Step::Online(cpu) => {
                self.online.insert(cpu);
            }
        }
        let unknown = a.set_online(&self.online, &NodeSet::new());
        assert!(unknown.is_empty(), "unknown CPUs {unknown}");
        placed
    }
}
