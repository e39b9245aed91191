//! GPU set quality: NVLink / NVSwitch first, then the PCIe path, and candidate sets for the
//! joint choice: exact enumeration while it stays small (up to 16 free GPUs is always exact),
//! a best-link greedy growth from every seed beyond that.

use super::best_sets::BestSets;
use super::partitions::{self, NodePartitions};
use super::twins::Twins;
use crate::topology::desc::MAX_NVLINKS;
use crate::topology::{PcieLevel, Topology};

pub use super::partitions::PARTITION_EXACT_GPUS;

/// Score of one NVLink link; NVSwitch counts as the best link mesh.
const NVLINK: u32 = 100;
/// NVSwitch: every pair at full bandwidth, above any point-to-point mesh.
const NVSWITCH: u32 = 2000;
/// Most candidate sets enumerated exactly (C(16,8) = 12870 fits).
const EXACT_LIMIT: u64 = 13_000;

/// Score of the PCIe path between two devices (go-gpuallocator-like scale).
pub fn pcie_score(level: PcieLevel) -> u32 {
    match level {
        PcieLevel::Same => 60,
        PcieLevel::SingleSwitch => 50,
        PcieLevel::MultipleSwitches => 40,
        PcieLevel::HostBridge => 30,
        PcieLevel::SameNuma => 20,
        PcieLevel::CrossSocket => 10,
    }
}

/// Precomputed pair scores for the GPUs of a topology.
#[derive(Debug, Clone)]
pub struct LinkTable {
    /// GPUs in the table.
    n: usize,
    /// Pair scores, row-major (`i * n + j`): one flat array rather than a vector per row, as
    /// every search of a decision reads pairs in its innermost loop.
    score: Vec<u32>,
    /// NVLink counts, row-major as `score`.
    nvlink: Vec<u32>,
    nvswitch: bool,
    /// Each GPU's NUMA node: the look-ahead partitions what is left node by node.
    numa: Vec<Option<u32>>,
    /// Each node's best partitions, computed once for the topology (see `partitions.rs`).
    pub(super) partitions: NodePartitions,
    /// Which GPUs could swap places, for hosts of up to 64 GPUs (see `twins.rs`).
    pub(super) twins: Option<Twins>,
    /// Every subset's best set score per size, for hosts of up to 10 GPUs (see
    /// `best_sets.rs`).
    pub(super) best_sets: Option<BestSets>,
}

impl LinkTable {
    /// Scores every GPU pair of `topo`.
    pub fn new(topo: &Topology) -> Self {
        let n = topo.gpus.len();
        let links = topo.gpu_links.as_ref();
        let nvswitch = links.is_some_and(|l| l.nvswitch);
        let mut score = vec![0; n * n];
        let mut nvlink = vec![0; n * n];
        for i in 0..n {
            for j in 0..n {
                if i == j {
                    continue;
                }
                // No GPU has more than 18 links (NVML_NVLINK_MAX_LINKS); a capture that says so
                // is clamped, which also keeps every score sum far from overflowing.
                let nv = links
                    .and_then(|l| l.nvlink.get(i).and_then(|r| r.get(j)).copied())
                    .unwrap_or(0)
                    .min(MAX_NVLINKS);
                nvlink[i * n + j] = nv;
                let pcie =
                    pcie_score(topo.pcie_level(&topo.gpus[i].pci_bus_id, &topo.gpus[j].pci_bus_id));
                score[i * n + j] = if nvswitch { NVSWITCH } else { nv * NVLINK } + pcie;
            }
        }
        let numa: Vec<Option<u32>> = topo.gpus.iter().map(|g| g.numa_node).collect();
        // The relation the symmetries compare: pair score and NVLink count.
        let twins = Twins::new(topo, |a, b| {
            u64::from(score[a * n + b]) << 32 | u64::from(nvlink[a * n + b])
        });
        Self {
            n,
            twins,
            score,
            nvlink,
            nvswitch,
            partitions: NodePartitions::new(&numa),
            best_sets: BestSets::new(n),
            numa,
        }
    }

    /// Score of the pair (i, j).
    pub fn pair(&self, i: usize, j: usize) -> u32 {
        if i < self.n && j < self.n {
            self.score[i * self.n + j]
        } else {
            0
        }
    }

    /// NVLink links between GPUs i and j (0 without a direct link).
    pub fn nvlinks(&self, i: usize, j: usize) -> u32 {
        if i < self.n && j < self.n {
            self.nvlink[i * self.n + j]
        } else {
            0
        }
    }

    /// NUMA node of GPU i, when known.
    pub fn numa_of(&self, i: usize) -> Option<u32> {
        self.numa.get(i).copied().flatten()
    }

    /// Whether GPUs i and j talk over NVLink (directly or through NVSwitch).
    pub fn linked(&self, i: usize, j: usize) -> bool {
        self.nvswitch || self.nvlinks(i, j) > 0
    }

    /// Sum of the pair scores of a set's GPUs on the same NUMA node: the set's links valued
    /// as [`lookahead`] values what it leaves, whose partition is per node. Valued whole, a
    /// set across nodes gained what a pair it splits lost: on a DGX-1V with GPUs 0, 4, 5 and
    /// 6 free, a 2-GPU pod took 0 and 4 across the sockets (210) to leave 5 and 6 (230) on
    /// one node, where go-gpuallocator answers 5 and 6.
    pub fn set_score_in_nodes(&self, set: &[usize]) -> u32 {
        let mut s = 0u32;
        for (a, &i) in set.iter().enumerate() {
            for &j in &set[a + 1..] {
                if self.numa_of(i) == self.numa_of(j) {
                    s = s.saturating_add(self.pair(i, j));
                }
            }
        }
        s
    }

    /// Sum of the pair scores of a set.
    pub fn set_score(&self, set: &[usize]) -> u32 {
        // Saturating: a pair scores at most ~2,000, but a topology source may list thousands
        // of GPUs, whose pairs would pass u32.
        let mut s = 0u32;
        for (a, &i) in set.iter().enumerate() {
            for &j in &set[a + 1..] {
                s = s.saturating_add(self.pair(i, j));
            }
        }
        s
    }

    /// Connectivity left among `free` once `taken` is gone: sum of pair scores of what stays.
    /// Higher means the choice cut fewer good links (does not fragment the rest).
    pub fn remaining(&self, free: &[usize], taken: &[usize]) -> u32 {
        self.remaining_of(free, self.set_score(free), taken)
    }

    /// Per GPU index, its pair scores to the GPUs of `free`, summed (saturating, as
    /// [`LinkTable::remaining_of`] sums them): read once per decision, they make each set's
    /// [`LinkTable::remaining_by`] a sum over the set instead of over the set times the free GPUs.
    pub fn to_free(&self, free: &[usize]) -> Vec<u32> {
        (0..self.n)
            .map(|t| {
                free.iter()
                    .map(|&f| self.pair(t, f))
                    .fold(0, u32::saturating_add)
            })
            .collect()
    }

    /// [`LinkTable::remaining_of`] with each GPU's scores to the free GPUs known (`to_free`,
    /// from [`LinkTable::to_free`] of the same free GPUs): the same sums in the same order.
    pub fn remaining_by(&self, to_free: &[u32], free_score: u32, taken: &[usize]) -> u32 {
        // A GPU past the table pairs with nothing: 0, as `pair` reads it.
        let touching: u32 = taken
            .iter()
            .map(|&t| to_free.get(t).copied().unwrap_or(0))
            .fold(0, u32::saturating_add);
        free_score
            .saturating_add(self.set_score(taken))
            .saturating_sub(touching)
    }

    /// [`LinkTable::remaining`] with the score of `free` known (`free_score`), as it is for
    /// every candidate set of a decision.
    pub fn remaining_of(&self, free: &[usize], free_score: u32, taken: &[usize]) -> u32 {
        // Runs for every candidate set: the pairs of `free` minus every pair touching `taken`,
        // without building the rest. Pairs inside `taken` are counted twice by the sum over
        // its members, hence adding its own score back once.
        let touching: u32 = taken
            .iter()
            .map(|&t| {
                free.iter()
                    .map(|&f| self.pair(t, f))
                    .fold(0, u32::saturating_add)
            })
            .fold(0, u32::saturating_add);
        free_score
            .saturating_add(self.set_score(taken))
            .saturating_sub(touching)
    }
}

/// The best `k`-set among `pool` and its score: exact (branch and bound) when `exact` and the
/// enumeration stays small, else grown greedily from every seed. `None` when no pair fits.
pub fn best_set(
    table: &LinkTable,
    pool: &[usize],
    k: usize,
    exact: bool,
) -> Option<(u32, Vec<usize>)> {
    best_set_in(table, pool, k, exact, false)
}

/// The score of [`best_set`], found faster where pool GPUs are interchangeable (idle NVSwitch
/// hosts): of twins (same pair scores to the pool and to each other, either orientation) a set
/// takes the first in pool order. The set may differ from [`best_set`]'s on ties: no score.
pub fn best_set_score(table: &LinkTable, pool: &[usize], k: usize, exact: bool) -> Option<u32> {
    best_set_in(table, pool, k, exact, true).map(|(score, _)| score)
}

/// Whether swapping pool positions `a` and `b` keeps every pair score among the pool, read
/// in either orientation (so a set's score does not depend on which of the two it holds).
fn twins(table: &LinkTable, pool: &[usize], a: usize, b: usize) -> bool {
    let (ga, gb) = (pool[a], pool[b]);
    table.pair(ga, gb) == table.pair(gb, ga)
        && pool.iter().all(|&x| {
            x == ga || x == gb || {
                let v = table.pair(ga, x);
                v == table.pair(x, ga) && v == table.pair(gb, x) && v == table.pair(x, gb)
            }
        })
}

fn best_set_in(
    table: &LinkTable,
    pool: &[usize],
    k: usize,
    exact: bool,
    by_twins: bool,
) -> Option<(u32, Vec<usize>)> {
    if k < 2 || pool.len() < k {
        return None;
    }
    if !exact || binomial(pool.len() as u64, k as u64) > EXACT_LIMIT {
        return Some(greedy_best_set(table, pool, k));
    }
    // The look-ahead runs this for every candidate set of a decision, so it walks the
    // combinations in place (one set is copied per improvement), keeps each GPU's link score
    // to the set so far as it goes, and drops a branch once even its best possible additions
    // could not beat the best set found.
    let n = pool.len();
    // Each GPU's best `m` pair scores within the pool, summed (m < k): what it can add to the
    // pairs among the GPUs still to pick.
    let top: Vec<Vec<u32>> = pool
        .iter()
        .map(|&i| {
            let mut row: Vec<u32> = pool
                .iter()
                .filter(|&&j| j != i)
                // Either orientation: a table read as is need not be symmetric.
                .map(|&j| table.pair(i, j).max(table.pair(j, i)))
                .collect();
            row.sort_unstable_by(|a, b| b.cmp(a));
            let mut sums = vec![0u32; k];
            for m in 1..k {
                sums[m] = sums[m - 1].saturating_add(row.get(m - 1).copied().unwrap_or(0));
            }
            sums
        })
        .collect();
    // Per position, the one before it among its twins (twins are an equivalence: a GPU
    // joins the first class whose first member it twins with), `usize::MAX` when none.
    let mut before = vec![usize::MAX; if by_twins { n } else { 0 }];
    // (first member, last member) of each class so far.
    let mut firsts: Vec<(usize, usize)> = Vec::new();
    for (p, b) in before.iter_mut().enumerate() {
        match firsts.iter_mut().find(|(f, _)| twins(table, pool, *f, p)) {
            Some((_, last)) => {
                *b = *last;
                *last = p;
            }
            None => firsts.push((p, p)),
        }
    }
    let mut search = BestSet {
        table,
        pool,
        k,
        before,
        top,
        gain: vec![0; n],
        scratch: Vec::with_capacity(n),
        best: None,
        cur: Vec::with_capacity(k),
    };
    search.walk(0, 0);
    search.best
}

/// Depth-first search for the best-scoring `k`-subset of `pool` (branch and bound).
struct BestSet<'a> {
    table: &'a LinkTable,
    pool: &'a [usize],
    k: usize,
    /// Per pool position, the twin before it (empty when twins are not used).
    before: Vec<usize>,
    /// Per pool position, the sum of its best `m` pair scores within the pool, by `m`.
    top: Vec<Vec<u32>>,
    /// Per pool position, its pair scores to the set so far, summed.
    gain: Vec<u32>,
    scratch: Vec<u32>,
    best: Option<(u32, Vec<usize>)>,
    cur: Vec<usize>,
}

impl BestSet<'_> {
    fn walk(&mut self, start: usize, score: u32) {
        let have = self.cur.len();
        let best = self.best.as_ref().map(|(s, _)| *s);
        if have == self.k {
            // The first set reaching a score keeps it: ties go to the lowest indices.
            if !best.is_some_and(|b| score <= b) {
                self.best = Some((score, self.cur.clone()));
            }
            return;
        }
        // What the `r` GPUs still to pick can add: each its links to the set so far plus at
        // most its best `r - 1` pairs (a pair among them counted from both ends, hence
        // doubling the links to the set and halving the total), the `r` best of those. On
        // NVSwitch hosts, where every pair scores within 3% of the best, a bound of the best
        // pair score per pair still to add pruned almost nothing.
        let r = self.k - have;
        if let Some(b) = best {
            self.scratch.clear();
            for j in start..self.pool.len() {
                let v = self.gain[j]
                    .saturating_mul(2)
                    .saturating_add(self.top[j][r - 1]);
                self.scratch.push(v);
            }
            if self.scratch.len() >= r {
                self.scratch.select_nth_unstable_by(r - 1, |x, y| y.cmp(x));
            }
            let twice: u32 = self
                .scratch
                .iter()
                .take(r)
                .fold(0, |s, v| s.saturating_add(*v));
            let bound = score.saturating_add(twice.div_ceil(2));
            if bound <= b {
                return;
            }
        }
        let last = self.pool.len() - r;
        for i in start..=last {
            // The twin before i left out: the set with it instead of i scores the same and
            // comes first (so every class's GPUs are taken in pool order).
            if self
                .before
                .get(i)
                .is_some_and(|&b| b != usize::MAX && !self.cur.contains(&self.pool[b]))
            {
                continue;
            }
            let g = self.pool[i];
            let add = self.gain[i];
            for (j, &h) in self.pool.iter().enumerate() {
                self.gain[j] += self.table.pair(g, h);
            }
            self.cur.push(g);
            self.walk(i + 1, score + add);
            self.cur.pop();
            for (j, &h) in self.pool.iter().enumerate() {
                self.gain[j] -= self.table.pair(g, h);
            }
        }
    }
}

/// Whether an exact look-ahead over `n_sets` candidates among `free` GPUs stays cheap (a few
/// milliseconds); beyond, the look-ahead grows its sets greedily.
pub fn lookahead_exact(n_sets: usize, free: usize, k: usize) -> bool {
    let rest = free.saturating_sub(k) as u64;
    let k = k.max(1) as u64;
    // One best-set search per round of the partition, plus the double-size search.
    let partition: u64 = (0..=rest / k)
        .map(|round| binomial(rest - round * k, k).min(EXACT_LIMIT))
        .sum();
    let per = partition + binomial(rest, 2 * k).min(EXACT_LIMIT);
    (n_sets as u64).saturating_mul(per) <= 300_000
}

/// What a choice leaves for later: how well the rest of each NUMA node splits into sets of the
/// same size (go-gpuallocator's partition idea) plus the best set of twice the size. The
/// partition keeps a choice from stranding a weakly linked remainder (DGX-1: taking the NV2
/// pair that leaves an NV1 pair behind when two NV2 pairs were possible); it is counted per
/// node because a later aligned request takes its GPUs from one node, so a cross-socket pair
/// is no consolation. The double-size term keeps larger groups (an NVLink quad, a switch's
/// GPUs) whole instead of taking one pair from each.
pub fn lookahead(table: &LinkTable, rest: &[usize], k: usize, exact: bool) -> u32 {
    // A stable sort keeps each node's GPUs in pool order (ties in the partition go the same way).
    let mut by_node = rest.to_vec();
    by_node.sort_by_key(|&g| table.numa_of(g));
    let partitions: u32 = by_node
        .chunk_by(|&a, &b| table.numa_of(a) == table.numa_of(b))
        .map(|group| partition_score(table, group, k, exact))
        .sum();
    partitions + best_set(table, rest, 2 * k, exact).map_or(0, |(score, _)| score)
}

/// Best total score of disjoint `k`-sets carved out of `pool`: exact for small pools (a node's
/// GPUs), else successive greedy best sets.
pub fn partition_score(table: &LinkTable, pool: &[usize], k: usize, exact: bool) -> u32 {
    if k < 2 || pool.len() < k {
        return 0;
    }
    if exact && pool.len() <= PARTITION_EXACT_GPUS {
        // A node's remainder (ascending) is read from the topology's table; anything else
        // is searched as it always was.
        let pair = |i, j| table.pair(i, j);
        return table
            .partitions
            .get(pair, pool, k)
            .unwrap_or_else(|| partitions::best_partition(pair, pool, k));
    }
    let mut left = pool.to_vec();
    let mut total = 0;
    while let Some((score, set)) = best_set(table, &left, k, exact) {
        total += score;
        left.retain(|g| !set.contains(g));
    }
    total
}

/// The best `k`-set among `pool` grown greedily from every seed (each step adds the GPU with
/// the best links to the set so far); a lower bound of the exact search in O(|pool|^2 k).
fn greedy_best_set(table: &LinkTable, pool: &[usize], k: usize) -> (u32, Vec<usize>) {
    let mut best: Option<(u32, Vec<usize>)> = None;
    let mut gain = vec![0u32; pool.len()];
    let mut inside = vec![false; pool.len()];
    for seed in 0..pool.len() {
        gain.iter_mut().for_each(|g| *g = 0);
        inside.iter_mut().for_each(|x| *x = false);
        let mut score = 0;
        let mut add = seed;
        for _ in 0..k {
            inside[add] = true;
            score += gain[add];
            for (j, g) in gain.iter_mut().enumerate() {
                *g += table.pair(pool[add], pool[j]);
            }
            // Next: the outside GPU with the most link score to the set (lowest on ties).
            let next = (0..pool.len())
                .filter(|j| !inside[*j])
                .max_by_key(|j| (gain[*j], std::cmp::Reverse(*j)));
            match next {
                Some(j) => add = j,
                None => break,
            }
        }
        if !best.as_ref().is_some_and(|(b, _)| score <= *b) {
            let set = (0..pool.len())
                .filter(|j| inside[*j])
                .map(|j| pool[j])
                .collect();
            best = Some((score, set));
        }
    }
    best.unwrap_or_default()
}

/// Pairs of a set without NVLink between them.
pub fn unlinked_pairs(table: &LinkTable, set: &[usize]) -> usize {
    let mut n = 0;
    for (a, &i) in set.iter().enumerate() {
        for &j in &set[a + 1..] {
            if !table.linked(i, j) {
                n += 1;
            }
        }
    }
    n
}

/// Whether the `k`-subsets of `n` GPUs are few enough for [`best_set`] to search them all.
pub fn exact_enumeration(n: u64, k: u64) -> bool {
    binomial(n, k) <= EXACT_LIMIT
}

pub(in crate::placement) fn binomial(n: u64, k: u64) -> u64 {
    let k = k.min(n.saturating_sub(k));
    let mut r: u64 = 1;
    for i in 0..k {
        r = r.saturating_mul(n - i) / (i + 1);
    }
    r
}

/// Candidate sets of `k` GPUs among `free` that contain every GPU of `must`.
pub fn candidates(table: &LinkTable, free: &[usize], must: &[usize], k: usize) -> Vec<Vec<usize>> {
    let pool: Vec<usize> = free.iter().copied().filter(|g| !must.contains(g)).collect();
    if must.len() >= k {
        return vec![must.to_vec()];
    }
    let extra = k - must.len();
    if extra > pool.len() {
        return Vec::new();
    }
    if binomial(pool.len() as u64, extra as u64) <= EXACT_LIMIT {
        let mut out = Vec::new();
        let mut cur = must.to_vec();
        combos(&pool, extra, 0, &mut cur, &mut out);
        return out;
    }
    // Too many to enumerate: grow from each seed by the best link to the set so far.
    let mut out: Vec<Vec<usize>> = Vec::new();
    for &seed in &pool {
        let mut set = must.to_vec();
        set.push(seed);
        while set.len() < k {
            let next = pool
                .iter()
                .copied()
                .filter(|g| !set.contains(g))
                .max_by_key(|g| {
                    (
                        set.iter().map(|s| table.pair(*s, *g)).sum::<u32>(),
                        std::cmp::Reverse(*g),
                    )
                });
            match next {
                Some(g) => set.push(g),
                None => break,
            }
        }
        set.sort_unstable();
        if set.len() == k && !out.contains(&set) {
            out.push(set);
        }
    }
    out
}

/// Every `k`-set of `free` as a bit mask of GPU indices, when they are all enumerated (as
/// [`candidates`] lists them without GPUs it must hold) and every index fits a mask: `None`
/// otherwise, and when `free` holds fewer than `k` (no set, as [`candidates`] finds none).
pub fn candidate_masks(free: &[usize], k: usize) -> Option<Vec<u64>> {
    if k == 0 || k > free.len() || free.iter().any(|&g| g >= 64) {
        return None;
    }
    let count = binomial(free.len() as u64, k as u64);
    if count > EXACT_LIMIT {
        return None;
    }
    let mut out = Vec::with_capacity(count as usize);
    mask_combos(free, k, 0, 0, &mut out);
    Some(out)
}

fn mask_combos(pool: &[usize], left: usize, start: usize, cur: u64, out: &mut Vec<u64>) {
    if left == 0 {
        out.push(cur);
        return;
    }
    for (i, &g) in pool
        .iter()
        .enumerate()
        .take(pool.len() - left + 1)
        .skip(start)
    {
        mask_combos(pool, left - 1, i + 1, cur | 1 << g, out);
    }
}

fn combos(
    pool: &[usize],
    left: usize,
    start: usize,
    cur: &mut Vec<usize>,
    out: &mut Vec<Vec<usize>>,
) {
    if left == 0 {
        let mut s = cur.clone();
        s.sort_unstable();
        out.push(s);
        return;
    }
    for i in start..pool.len() {
        if pool.len() - i < left {
            break;
        }
        cur.push(pool[i]);
        combos(pool, left - 1, i + 1, cur, out);
        cur.pop();
    }
}

#[cfg(test)]
#[path = "gpus_tests.rs"]
mod tests;
