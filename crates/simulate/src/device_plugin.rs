//! The GPU choice of the kubelet baseline: the kubelet device manager's split of the free GPUs
//! by the Topology Manager's hint, and the answer the NVIDIA device plugin gives to its
//! GetPreferredAllocation call (go-gpuallocator's "best effort" policy), written from their
//! public behaviour:
//! - the kubelet sorts free devices into those on the hint's NUMA nodes (aligned), those on
//!   other nodes, and those without a node. When it needs fewer than the aligned ones it asks the
//!   plugin to choose among the aligned ones; otherwise it takes every aligned one and asks the
//!   plugin to complete the set from all free devices, with the aligned ones as must-include.
//!   Whatever the plugin leaves short is filled from the aligned, then the other, then the
//!   node-less devices.
//! - the plugin scores a pair of GPUs by its NVLinks (100 a link) plus its PCIe path, a set by
//!   the sum of its pairs, and does not simply take the best set: it partitions every available
//!   GPU into groups of the asked size (padding the last), keeps the partition with the highest
//!   total score that has a padding-free group holding every must-include GPU, and answers that
//!   partition's best such group. This keeps the rest of the node in good groups too.
//!
//! The pair scores are nri-align's [`LinkTable`]'s, which use the same scale (NVSwitch, which
//! NVML reports as many NVLinks per pair, is one high constant there).

use align_core::placement::gpus::LinkTable;

/// Most available GPUs the plugin's partition search runs on here. The plugin has no limit,
/// but the partitions of 16 GPUs into triples number in the hundreds of millions; beyond this
/// the best single set stands in (the same answer whenever the best set's group is part of the
/// best partition, which holds on every shipped host: none has more than 8 GPUs).
pub const PARTITION_LIMIT: usize = 12;

/// How the kubelet baseline's device plugin picks GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuChoice {
    /// The NVIDIA device plugin's GetPreferredAllocation (link-aware, within the hint).
    #[default]
    Preferred,
    /// A plugin without GetPreferredAllocation: the lowest-index free GPUs of the hint first.
    Lowest,
}

impl GpuChoice {
    /// The `--device-plugin` spelling.
    pub fn name(self) -> &'static str {
        match self {
            GpuChoice::Preferred => "preferred",
            GpuChoice::Lowest => "lowest",
        }
    }

    /// What the model is, for the headers of `simulate` and `--churn`.
    pub fn describe(self) -> &'static str {
        match self {
            GpuChoice::Preferred => {
                "preferred (the NVIDIA device plugin's GetPreferredAllocation, go-gpuallocator's \
                 best effort)"
            }
            GpuChoice::Lowest => "lowest (a plugin without GetPreferredAllocation: lowest index)",
        }
    }

    /// Parses the `--device-plugin` spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "preferred" => Some(GpuChoice::Preferred),
            "lowest" => Some(GpuChoice::Lowest),
            _ => None,
        }
    }
}

/// The GPUs the kubelet allocates: `needed` of `free` (GPU indices, ascending), where
/// `in_hint(i)` says whether GPU i's NUMA node is in the Topology Manager's hint, `None` when
/// the GPU has no node. Fewer than `needed` when not enough are free.
pub fn kubelet_gpus(
    links: &LinkTable,
    free: &[usize],
    in_hint: impl Fn(usize) -> Option<bool>,
    needed: usize,
    choice: GpuChoice,
) -> Vec<usize> {
    let aligned: Vec<usize> = free
        .iter()
        .copied()
        .filter(|g| in_hint(*g) == Some(true))
        .collect();
    let unaligned: Vec<usize> = free
        .iter()
        .copied()
        .filter(|g| in_hint(*g) == Some(false))
        .collect();
    let no_node: Vec<usize> = free
        .iter()
        .copied()
        .filter(|g| in_hint(*g).is_none())
        .collect();
    let mut out: Vec<usize> = Vec::with_capacity(needed);
    let take_from = |out: &mut Vec<usize>, from: &[usize]| {
        for g in from {
            if out.len() >= needed {
                break;
            }
            if !out.contains(g) {
                out.push(*g);
            }
        }
    };
    let ask = |available: &[usize], must: &[usize]| match choice {
        GpuChoice::Preferred => best_effort(links, available, must, needed),
        GpuChoice::Lowest => Vec::new(),
    };
    if needed < aligned.len() {
        let preferred = ask(&aligned, &[]);
        let inside: Vec<usize> = preferred
            .into_iter()
            .filter(|g| aligned.contains(g))
            .collect();
        take_from(&mut out, &inside);
        take_from(&mut out, &aligned);
        return out;
    }
    take_from(&mut out, &aligned);
    if out.len() < needed {
        let preferred = ask(free, &out.clone());
        take_from(&mut out, &preferred);
        take_from(&mut out, &unaligned);
        take_from(&mut out, &no_node);
    }
    out
}

/// go-gpuallocator's best-effort answer: `size` GPUs of `available` holding every GPU of
/// `required`, or nothing when impossible.
pub fn best_effort(
    links: &LinkTable,
    available: &[usize],
    required: &[usize],
    size: usize,
) -> Vec<usize> {
    if size == 0
        || available.len() < size
        || required.len() > size
        || !required.iter().all(|r| available.contains(r))
    {
        return Vec::new();
    }
    if size == 1 || available.len() > PARTITION_LIMIT {
        return best_single_set(links, available, required, size);
    }
    // Padding (None) makes the pool divisible into groups of `size`; a group holds either all
    // of it or none, as the plugin requires.
    let mut pool: Vec<Option<usize>> = available.iter().copied().map(Some).collect();
    let padding = (size - available.len() % size) % size;
    pool.extend(std::iter::repeat(None).take(padding));
    let mut search = Search {
        links,
        size,
        padding,
        required,
        best: None,
    };
    search.walk(&pool, &mut Vec::new());
    let Some((_, partition)) = search.best else {
        return Vec::new();
    };
    // The partition's best padding-free group with every required GPU; the first on ties.
    let mut answer: Option<(u32, Vec<usize>)> = None;
    for group in partition {
        let Some(set) = group.iter().copied().collect::<Option<Vec<usize>>>() else {
            continue;
        };
        if !required.iter().all(|r| set.contains(r)) {
            continue;
        }
        let score = links.set_score(&set);
        if answer.as_ref().map_or(true, |(s, _)| score > *s) {
            answer = Some((score, set));
        }
    }
    answer.map(|(_, s)| s).unwrap_or_default()
}

/// The partition walk: groups are built with the pool's first member plus `size - 1` of the
/// rest, so each partition is visited once.
struct Search<'a> {
    links: &'a LinkTable,
    size: usize,
    padding: usize,
    required: &'a [usize],
    best: Option<(u32, Vec<Vec<Option<usize>>>)>,
}

impl Search<'_> {
    fn walk(&mut self, pool: &[Option<usize>], acc: &mut Vec<Vec<Option<usize>>>) {
        if pool.len() <= self.size {
            acc.push(pool.to_vec());
            self.consider(acc);
            acc.pop();
            return;
        }
        let first = pool[0];
        let rest = &pool[1..];
        let mut pick: Vec<usize> = (0..self.size - 1).collect();
        loop {
            let mut group = vec![first];
            group.extend(pick.iter().map(|i| rest[*i]));
            let pads = group.iter().filter(|g| g.is_none()).count();
            if pads == 0 || pads == self.padding {
                let remaining: Vec<Option<usize>> = rest
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !pick.contains(i))
                    .map(|(_, g)| *g)
                    .collect();
                acc.push(group);
                self.walk(&remaining, acc);
                acc.pop();
            }
            if !next_combination(&mut pick, rest.len()) {
                break;
            }
        }
    }

    fn consider(&mut self, partition: &[Vec<Option<usize>>]) {
        let usable = partition.iter().any(|g| {
            g.iter().all(Option::is_some) && self.required.iter().all(|r| g.contains(&Some(*r)))
        });
        if !usable {
            return;
        }
        let score: u32 = partition
            .iter()
            .map(|g| {
                let set: Vec<usize> = g.iter().flatten().copied().collect();
                self.links.set_score(&set)
            })
            .fold(0, u32::saturating_add);
        if self.best.as_ref().map_or(true, |(s, _)| score > *s) {
            self.best = Some((score, partition.to_vec()));
        }
    }
}

/// Advances `pick` (ascending indices below `n`) to the next combination in lexicographic
/// order; false after the last.
pub(crate) fn next_combination(pick: &mut [usize], n: usize) -> bool {
    let k = pick.len();
    for i in (0..k).rev() {
        if pick[i] < n - k + i {
            pick[i] += 1;
            for j in i + 1..k {
                pick[j] = pick[j - 1] + 1;
            }
            return true;
        }
    }
    false
}

/// The best-scoring single set of `size` holding `required` (the stand-in beyond
/// [`PARTITION_LIMIT`], and the plugin's own answer for one GPU: the first available).
fn best_single_set(
    links: &LinkTable,
    available: &[usize],
    required: &[usize],
    size: usize,
) -> Vec<usize> {
    let mut pick: Vec<usize> = (0..size).collect();
    let mut best: Option<(u32, Vec<usize>)> = None;
    loop {
        let set: Vec<usize> = pick.iter().map(|i| available[*i]).collect();
        if required.iter().all(|r| set.contains(r)) {
            let score = links.set_score(&set);
            if best.as_ref().map_or(true, |(s, _)| score > *s) {
                best = Some((score, set));
            }
        }
        if !next_combination(&mut pick, available.len()) {
            break;
        }
    }
    best.map(|(_, s)| s).unwrap_or_default()
}

#[cfg(test)]
#[path = "device_plugin_tests.rs"]
mod tests;
