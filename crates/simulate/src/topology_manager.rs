//! The Topology Manager's merge of hints, for the kubelet baseline, after kubernetes/kubernetes
//! `pkg/kubelet/cm/topologymanager/policy.go` (`mergePermutation`, `HintMerger.compare`,
//! `maxOfMinAffinityCounts`), `policy_single_numa_node.go` (`filterSingleNumaHints`),
//! `numa_info.go` (`Closest`, `NUMADistances.CalculateAverageFor`) and `bitmask.go`
//! (`IsNarrowerThan`: fewer nodes, then the lower mask):
//! - every combination of one hint per provider is ANDed; it is preferred when every hint is
//!   preferred and all their masks are equal;
//! - a preferred merge beats a non-preferred one; between two preferred, the narrower (or, with
//!   `prefer-closest-numa-nodes` outside single-numa-node, among equally wide masks the one
//!   with the lower average NUMA distance) wins; between two non-preferred, the one whose width
//!   comes closest to, without passing, the widest of the providers' narrowest hints
//!   (`BestNonPreferredAffinityCount`);
//! - under single-numa-node only preferred one-node hints take part.
//!
//! The policy options are those of `policy_options.go`: `prefer-closest-numa-nodes` (beta and
//! off by default from v1.28, GA in v1.32) and `max-allowable-numa-nodes` (beta from v1.31, GA
//! in v1.35; default 8, lower values refused).

/// One hint: a mask over the baseline's CPU nodes (bit i = i-th node with CPUs) and whether it
/// is preferred (as narrow as the resource could ever be).
pub type Hint = (u32, bool);

/// The kubelet's default `max-allowable-numa-nodes`: `defaultMaxAllowableNUMANodes` in
/// `topology_manager.go`.
pub const DEFAULT_MAX_ALLOWABLE_NUMA_NODES: usize = 8;

/// The Topology Manager policy options the baseline models, with the kubelet's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopologyManagerOptions {
    /// `prefer-closest-numa-nodes`: among equally wide preferred masks, the closest.
    pub prefer_closest_numa_nodes: bool,
    /// `max-allowable-numa-nodes`: the most NUMA nodes a host may have for a policy other
    /// than `none`.
    pub max_allowable_numa_nodes: usize,
}

impl Default for TopologyManagerOptions {
    fn default() -> Self {
        Self {
            prefer_closest_numa_nodes: false,
            max_allowable_numa_nodes: DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
        }
    }
}

impl TopologyManagerOptions {
    /// The options as `topologyManagerPolicyOptions` spells them, for the headers.
    pub fn describe(&self) -> String {
        format!(
            "prefer-closest-numa-nodes={}, max-allowable-numa-nodes={}",
            self.prefer_closest_numa_nodes, self.max_allowable_numa_nodes
        )
    }
}

/// One merge: the providers' hints (an empty list is a provider with no possible affinity,
/// the kubelet's `{nil, false}`; a provider without preference is left out), over `bits`
/// nodes whose pairwise distances are `distances` (used with `prefer-closest-numa-nodes`).
#[derive(Debug)]
pub struct Merge<'a> {
    /// Hints per provider.
    pub providers: &'a [Vec<Hint>],
    /// Number of nodes (mask bits).
    pub bits: usize,
    /// `distances[i][j]` between the i-th and j-th node.
    pub distances: &'a [Vec<u64>],
    /// Whether the policy is single-numa-node.
    pub single: bool,
    /// Whether `prefer-closest-numa-nodes` is on.
    pub prefer_closest: bool,
}

/// A permutation element: a mask, or none for `{nil, false}`.
type Element = (Option<u32>, bool);

impl Merge<'_> {
    fn full(&self) -> u32 {
        if self.bits >= 32 {
            u32::MAX
        } else {
            (1u32 << self.bits) - 1
        }
    }

    /// The merged hint the policy admits or refuses.
    pub fn best(&self) -> Hint {
        let lists: Vec<Vec<Element>> = self
            .providers
            .iter()
            .map(|hints| {
                let mut list: Vec<Element> = if hints.is_empty() {
                    vec![(None, false)]
                } else {
                    hints.iter().map(|(m, p)| (Some(*m), *p)).collect()
                };
                if self.single {
                    list.retain(|(m, p)| *p && m.map_or(true, |m| m.count_ones() == 1));
                }
                list
            })
            .collect();
        // maxOfMinAffinityCounts: the widest of each provider's narrowest mask.
        let target = lists
            .iter()
            .filter_map(|l| {
                l.iter()
                    .filter_map(|(m, _)| *m)
                    .min_by_key(|m| (m.count_ones(), *m))
            })
            .map(u32::count_ones)
            .max()
            .unwrap_or(0);
        let mut best = None;
        self.walk(&lists, (self.full(), None, true), target, &mut best);
        best.unwrap_or((self.full(), false))
    }

    fn walk(
        &self,
        lists: &[Vec<Element>],
        acc: (u32, Option<u32>, bool),
        target: u32,
        best: &mut Option<Hint>,
    ) {
        let (mask, first, preferred) = acc;
        // Neither an empty mask nor a non-preferred one after a preferred best can win.
        if mask == 0 || (!preferred && best.is_some_and(|b| b.1)) {
            return;
        }
        let Some((list, rest)) = lists.split_first() else {
            *best = Some(self.compare(*best, (mask, preferred), target));
            return;
        };
        for (m, p) in list {
            let next = match m {
                Some(m) => (
                    mask & m,
                    first.or(Some(*m)),
                    preferred && *p && first.map_or(true, |f| f == *m),
                ),
                None => (mask, first, preferred && *p),
            };
            self.walk(rest, next, target, best);
        }
    }

    /// `HintMerger.compare`.
    fn compare(&self, current: Option<Hint>, candidate: Hint, target: u32) -> Hint {
        let Some(current) = current else {
            return candidate;
        };
        if current.1 != candidate.1 {
            return if candidate.1 { candidate } else { current };
        }
        if current.1 {
            return self.fitter(current, candidate);
        }
        let (cur, cand) = (current.0.count_ones(), candidate.0.count_ones());
        if cur > target {
            return self.fitter(current, candidate);
        }
        if cur == target {
            return if cand == target {
                self.fitter(current, candidate)
            } else {
                current
            };
        }
        match (cand.cmp(&target), cand.cmp(&cur)) {
            (std::cmp::Ordering::Greater, _) => current,
            (std::cmp::Ordering::Equal, _) => candidate,
            (_, std::cmp::Ordering::Greater) => candidate,
            (_, std::cmp::Ordering::Less) => current,
            _ => self.fitter(current, candidate),
        }
    }

    /// `CompareNUMAAffinityMasks`: the current hint unless the candidate's mask is narrower
    /// (or closer).
    fn fitter(&self, current: Hint, candidate: Hint) -> Hint {
        let (a, b) = (current.0, candidate.0);
        if a == b {
            return current;
        }
        let narrower = |x: u32, y: u32| (x.count_ones(), x) < (y.count_ones(), y);
        let current_wins =
            if self.prefer_closest && !self.single && a.count_ones() == b.count_ones() {
                // Same width: the average distance compares as the sum over the same count.
                let (da, db) = (self.distance_sum(a), self.distance_sum(b));
                if da == db {
                    a < b
                } else {
                    da < db
                }
            } else {
                narrower(a, b)
            };
        if current_wins {
            current
        } else {
            candidate
        }
    }

    fn distance_sum(&self, mask: u32) -> u64 {
        let on: Vec<usize> = (0..self.bits).filter(|b| mask & (1 << b) != 0).collect();
        on.iter()
            .flat_map(|i| on.iter().map(move |j| (*i, *j)))
            .map(|(i, j)| {
                self.distances
                    .get(i)
                    .and_then(|r| r.get(j))
                    .copied()
                    .unwrap_or(0)
            })
            .fold(0, u64::saturating_add)
    }
}

/// Every mask over `bits` nodes in the order the kubelet enumerates them
/// (`bitmask.IterateBitMasks`): by width, then lexicographically by node ids.
pub fn masks_in_kubelet_order(bits: usize) -> Vec<u32> {
    let mut out = Vec::new();
    for width in 1..=bits {
        let mut pick: Vec<usize> = (0..width).collect();
        loop {
            out.push(pick.iter().fold(0u32, |m, b| m | (1 << b)));
            if !super::device_plugin::next_combination(&mut pick, bits) {
                break;
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "topology_manager_tests.rs"]
mod tests;
