//! Which GPUs could swap places, computed once per topology: the first level of the
//! symmetries (`orbits`) without a permutation check per pair and decision.
//!
//! Swapping GPUs `a` and `b` keeps everything the decision's ranking reads among a free set
//! `F` (links alone, no NIC paths) exactly when the two are the same kind of device, their
//! pair reads the same both ways, and every other GPU `q` of `F` has the same pair score and
//! NVLink count to `a` as to `b`, in either orientation. All of that is the static topology
//! except `F`: so per pair, the GPUs `q` that tell `a` and `b` apart are a bit mask computed
//! once, and a decision's check is that mask against its free mask (one AND). Occupancy only
//! ever enters through `F`, so the table stays right however the GPUs are held.

use std::sync::Arc;

use crate::topology::Topology;

/// Per GPU pair, the GPUs that tell them apart; for hosts of at most 64 GPUs (one mask).
#[derive(Debug, Clone)]
pub struct Twins {
    n: usize,
    /// Row-major by GPU index: bit `q` of `(a, b)` set when GPU `q` tells `a` and `b` apart,
    /// every bit when nothing makes them interchangeable (another kind of device, or their
    /// pair reads differently both ways). Shared by the clones of a table.
    apart: Arc<[u64]>,
}

impl Twins {
    /// The masks of `topo`'s GPUs, `link(a, b)` giving the pair relation the ranking reads
    /// (score and NVLink count); `None` past 64 GPUs.
    pub fn new(topo: &Topology, link: impl Fn(usize, usize) -> u64) -> Option<Self> {
        let n = topo.gpus.len();
        if n > 64 {
            return None;
        }
        // The device properties the symmetries keep (NUMA node, product, MIG state); the
        // ledger's node of a GPU is a function of its NUMA node, so it needs no check here.
        let same_kind = |a: usize, b: usize| {
            let (ga, gb) = (&topo.gpus[a], &topo.gpus[b]);
            ga.numa_node == gb.numa_node
                && ga.name == gb.name
                && ga.mig_enabled == gb.mig_enabled
                && ga.mig_devices.len() == gb.mig_devices.len()
        };
        let mut apart = vec![0u64; n * n];
        for a in 0..n {
            for b in 0..n {
                if a == b {
                    continue;
                }
                apart[a * n + b] = if !same_kind(a, b) || link(a, b) != link(b, a) {
                    u64::MAX
                } else {
                    (0..n)
                        .filter(|&q| q != a && q != b)
                        .filter(|&q| link(a, q) != link(b, q) || link(q, a) != link(q, b))
                        .fold(0, |m, q| m | 1 << q)
                };
            }
        }
        Some(Self {
            n,
            apart: apart.into(),
        })
    }

    /// Whether GPUs `a` and `b` swap without changing anything the ranking reads among the
    /// GPUs of `free` (a mask that holds both). False for a GPU the table does not know.
    pub fn swap(&self, a: usize, b: usize, free: u64) -> bool {
        a < self.n && b < self.n && self.apart[a * self.n + b] & free == 0
    }
}
