//! Ranking every GPU set of a decision, for the decisions without classes of interchangeable
//! sets to walk (DGX-1V's cube mesh has no two interchangeable GPUs, or a reduction too slight
//! to pay, or a look-ahead that is not a function of link values alone).
//!
//! Two walks, which pick the same candidate:
//! - [`Search::rank_in_turn`] and [`Search::rank_masks`] (the same with the sets as bit masks
//!   of GPU indices, where every set is enumerated), the daemon's: every set's GPU fields first
//!   (the look-ahead shared between the sets, read from the topology's tables on small hosts),
//!   then the sets in that order, best first, each with its nodes and NICs, until the next
//!   set's GPU fields lose to an admissible candidate. On an idle DGX-1V asking 2 GPUs and a
//!   NIC, 28 pairs are scored and a handful grown into candidates.
//! - [`Search::rank_every_set`], the reference the exhaustive search keeps: each set in
//!   enumeration order with the plain look-ahead, grown into a candidate unless its GPU fields
//!   already lose.
//!
//! Why the order does not change the pick: [`offer`] keeps the greatest (rank, lower GPU
//! indices on ties), a total order on the candidates, whatever order they come in; and a set
//! is left out only when its GPU fields (fewer unlinked pairs, then link score: the fields
//! that outrank all but admissibility) are below an admissible candidate's, so its rank is too.

use std::cmp::Reverse;

use super::{offer, Candidate, Grown, Rank, Search};
use crate::placement::nics;
use crate::placement::numa;
use crate::placement::ranking::gpus;
use crate::placement::ranking::lookahead::Lookahead;

/// A set with its GPU fields: fewer unlinked pairs, link score with the look-ahead, own link
/// score; the set as listed or as a bit mask.
type Scored<S> = (Reverse<usize>, u32, u32, S);

impl Search<'_> {
    /// Every listed set, its GPU fields first, then grown into a candidate best GPU fields
    /// first until the next set's lose to an admissible candidate (see the module comment).
    pub(super) fn rank_in_turn(
        &self,
        sets: Vec<Vec<usize>>,
        free: &[usize],
        exact: bool,
    ) -> Option<Candidate> {
        let mut look = Lookahead::new(self.links, free, self.r.gpu_count, exact);
        let scored: Vec<Scored<Vec<usize>>> = sets
            .into_iter()
            .map(|s| self.gpu_fields(&mut look, s))
            .collect();
        self.grow_best(scored, free, |s| s)
    }

    /// [`Search::rank_in_turn`] with the sets as bit masks of GPU indices: one buffer for the
    /// set being scored, and a vector only for the sets grown into candidates.
    pub(super) fn rank_masks(
        &self,
        masks: Vec<u64>,
        free: &[usize],
        exact: bool,
    ) -> Option<Candidate> {
        let mut look = Lookahead::new(self.links, free, self.r.gpu_count, exact);
        let mut set: Vec<usize> = Vec::with_capacity(self.r.gpu_count);
        let scored: Vec<Scored<u64>> = masks
            .into_iter()
            .map(|m| {
                fill(&mut set, m);
                let (unlinked, score, own, _) = self.gpu_fields(&mut look, &set[..]);
                (unlinked, score, own, m)
            })
            .collect();
        self.grow_best(scored, free, |m| {
            let mut s = Vec::with_capacity(m.count_ones() as usize);
            fill(&mut s, m);
            s
        })
    }

    /// The GPU fields of set `s` (ascending GPU indices): its unlinked pairs and own link
    /// score in one pass over its pairs (the sums of `unlinked_pairs` and `set_score`, in
    /// their order), and the link score with the look-ahead.
    fn gpu_fields<S: AsRef<[usize]>>(&self, look: &mut Lookahead<'_>, s: S) -> Scored<S> {
        let set = s.as_ref();
        let (mut own, mut in_nodes, mut unlinked) = (0u32, 0u32, 0usize);
        for (a, &i) in set.iter().enumerate() {
            for &j in &set[a + 1..] {
                let pair = self.links.pair(i, j);
                own = own.saturating_add(pair);
                if self.links.numa_of(i) == self.links.numa_of(j) {
                    in_nodes = in_nodes.saturating_add(pair);
                }
                unlinked += usize::from(!self.links.linked(i, j));
            }
        }
        // The link field values the set per node, as the look-ahead values what it leaves.
        let score = in_nodes.saturating_add(look.exact(set));
        (Reverse(unlinked), score, own, s)
    }

    /// The sets by their GPU fields, best first, each grown into a candidate (nodes, NICs)
    /// until the next set's GPU fields lose to an admissible candidate; `gpus` lists a set.
    fn grow_best<S>(
        &self,
        mut scored: Vec<Scored<S>>,
        free: &[usize],
        gpus: impl Fn(S) -> Vec<usize>,
    ) -> Option<Candidate> {
        // Best GPU fields first; the order among equal ones does not change the pick.
        scored.sort_unstable_by_key(|s| Reverse((s.0, s.1)));
        let free_score = self.links.set_score(free);
        let to_free = self.links.to_free(free);
        // Node growth reads the seed alone, which most sets share (a socket's GPUs).
        let mut grown = Grown::new();
        let mut best: Option<(Rank, Candidate)> = None;
        for (unlinked, score, own_links, s) in scored {
            if let Some((b, _)) = &best {
                // Sorted: every later set's GPU fields lose too.
                if b.admissible && (unlinked, score) < (b.fewer_unlinked_pairs, b.link_score) {
                    break;
                }
            }
            let s = gpus(s);
            let Some(nodes) = self.nodes_around(&s, &mut grown) else {
                continue;
            };
            let nics = nics::choose(self.ledger, &s, &nodes, self.r.nic_count, &self.fixed_nics);
            let c = self.candidate(nodes, s, nics);
            let links_left = self.links.remaining_by(&to_free, free_score, &c.gpus);
            let rank = self.rank((unlinked, score, own_links), links_left, &c);
            offer(&mut best, rank, c);
        }
        best.map(|(_, c)| c)
    }

    /// The whole rank of candidate `c`, from its set's GPU fields (unlinked pairs, link score
    /// with the look-ahead, own link score) and the link score its set leaves among the free
    /// GPUs: the same fields in both walks.
    fn rank(
        &self,
        (unlinked, score, own_links): (Reverse<usize>, u32, u32),
        links_left: u32,
        c: &Candidate,
    ) -> Rank {
        Rank {
            admissible: c.admissible,
            fewer_unlinked_pairs: unlinked,
            link_score: score,
            fewer_nodes: Reverse(c.nodes.len()),
            closer_nodes: Reverse(numa::spread(self.topo(), &c.nodes)),
            keeps_idle_nodes: Reverse(numa::idle_opened(self.ledger, &self.idle_nodes, &c.gpus)),
            cheaper_nic_paths: Reverse(c.nic_cost),
            links_left,
            tightest_fit: Reverse(c.nodes.iter().map(|i| u64::from(self.caps[*i].cpu)).sum()),
            own_links,
        }
    }

    /// The set's own link score, and that plus the look-ahead (anti-fragmentation: the best
    /// sets of the same and of twice the size left after it, go-gpuallocator's partition idea
    /// one step deep).
    fn link_scores(&self, free: &[usize], set: &[usize], exact: bool) -> (u32, u32) {
        let own = self.links.set_score(set);
        let rest: Vec<usize> = free.iter().copied().filter(|g| !set.contains(g)).collect();
        (
            own,
            self.links.set_score_in_nodes(set)
                + gpus::lookahead(self.links, &rest, self.r.gpu_count, exact),
        )
    }

    /// Every set in enumeration order, each ranked in full with the plain look-ahead unless
    /// its GPU fields already lose to an admissible candidate: the reference the exhaustive
    /// search keeps (see the module comment).
    pub(super) fn rank_every_set(
        &self,
        sets: Vec<Vec<usize>>,
        free: &[usize],
        exact: bool,
    ) -> Option<Candidate> {
        let free_score = self.links.set_score(free);
        let mut best: Option<(Rank, Candidate)> = None;
        for s in sets {
            let unlinked = Reverse(gpus::unlinked_pairs(self.links, &s));
            let (own_links, score) = self.link_scores(free, &s, exact);
            if let Some((b, _)) = &best {
                if b.admissible && (unlinked, score) < (b.fewer_unlinked_pairs, b.link_score) {
                    continue;
                }
            }
            let Some(c) = self.around_gpus(s) else {
                continue;
            };
            let links_left = self.links.remaining_of(free, free_score, &c.gpus);
            let rank = self.rank((unlinked, score, own_links), links_left, &c);
            offer(&mut best, rank, c);
        }
        best.map(|(_, c)| c)
    }
}

/// Fills `set` with the GPU indices of mask `m`, ascending.
fn fill(set: &mut Vec<usize>, m: u64) {
    set.clear();
    let mut bits = m;
    while bits != 0 {
        set.push(bits.trailing_zeros() as usize);
        bits &= bits - 1;
    }
}
