//! What the soak test (tests/e2e_soak.rs) needs besides the suites' harness: a small seeded
//! random generator (no crate: a seed must replay the same steps wherever it runs) and a view of
//! every running container from the host alone (/proc and its cpuset cgroup), cheap enough to
//! take after every step.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use super::align::{container_devices, container_of_cgroup, cpuset_dir};
use super::host::parse_list;
use super::status_field;

/// SplitMix64: small, fast, and the same sequence from the same seed on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// One of `items`, `None` when there is none.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len())])
    }
}

/// A seed from the clock and the process id, for a run that was given none.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    Rng::new(nanos ^ u64::from(std::process::id()).rotate_left(32)).next_u64() % 1_000_000_000
}

/// A container seen from the host: the CPUs its processes may run on, its cpuset cgroup's CPUs
/// and the GPU / RDMA nodes in its /dev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Its processes.
    pub pids: Vec<u32>,
    /// Union of its processes' `Cpus_allowed_list`.
    pub proc_cpus: Vec<u32>,
    /// `cpuset.cpus` of its cgroup (the effective set when unset).
    pub cgroup_cpus: Vec<u32>,
    /// `/dev/nvidiaN`, `/dev/infiniband/uverbsN` in its /dev.
    pub devices: Vec<String>,
}

/// Every process under `cgroup_parent`, grouped by container (or sandbox) id: what runc
/// enforces, whatever nri-align or the runtime believe.
pub fn observe(cgroup_parent: &str) -> BTreeMap<String, Observed> {
    let mut out: BTreeMap<String, Observed> = BTreeMap::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return out;
    };
    let needle = format!("{}/", cgroup_parent.trim_end_matches('/'));
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cg) = fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
            continue;
        };
        let Some(id) = cg.lines().find_map(|l| {
            let at = l.find(&needle)?;
            container_of_cgroup(l[at + needle.len()..].split('/').next()?)
        }) else {
            continue;
        };
        let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let cpus = parse_list(&status_field(&status, "Cpus_allowed_list").unwrap_or_default());
        let entry = out.entry(id).or_insert_with(|| {
            let cgroup_cpus = cpuset_dir(pid)
                .map(|d| {
                    let read = |f: &str| fs::read_to_string(d.join(f)).unwrap_or_default();
                    let mut text = read("cpuset.cpus");
                    if text.trim().is_empty() {
                        text = read("cpuset.cpus.effective");
                    }
                    parse_list(&text)
                })
                .unwrap_or_default();
            Observed {
                pids: Vec::new(),
                proc_cpus: Vec::new(),
                cgroup_cpus,
                devices: container_devices(Path::new(&format!("/proc/{pid}/root/dev"))),
            }
        });
        entry.pids.push(pid);
        entry.proc_cpus.extend(cpus);
        entry.proc_cpus.sort_unstable();
        entry.proc_cpus.dedup();
    }
    out
}
