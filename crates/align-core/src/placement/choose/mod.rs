//! The joint choice of one decision, step by step: what the request needs from a node set and
//! how wide the policy lets that set be ([`Search::new`]), the candidates (each free GPU set
//! with the nodes grown around it and its NICs, or one node choice when no GPU is wanted), how
//! candidates rank ([`Rank`]), and the rejection when none is admissible.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::error::PlacementError;
use super::ledger::Ledger;
use super::nics;
use super::numa::{self, Cap, Need};
use super::policy::{GpuMode, PlacementConfig, Policy, Scope};
use super::ranking::gpus::{self, LinkTable};
use super::ranking::lookahead::Lookahead;
use super::ranking::orbits::{self, Symmetry};
use super::reject;
use super::request::PodTotals;
use super::resolve::Resolved;
use crate::topology::{NodeSet, Topology};

/// One candidate: node indices in the order they were chosen, GPU and NIC indices, and whether
/// the policy admits it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// NUMA node indices.
    pub nodes: Vec<usize>,
    /// GPU indices.
    pub gpus: Vec<usize>,
    /// NIC indices.
    pub nics: Vec<usize>,
    /// Admissible under the policy.
    pub admissible: bool,
    /// How well its NICs pair with its GPUs (lower is better).
    pub nic_cost: u32,
}

/// How the GPU sets of a decision are enumerated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GpuSearch {
    /// One set per class of interchangeable sets where the ranking provably cannot tell a
    /// class's sets apart (see `ranking::orbits`), else every set: the daemon's search.
    #[default]
    Reduced,
    /// Every set, with the same look-ahead as [`GpuSearch::Reduced`]: the reference the
    /// reduced search is tested against.
    Exhaustive,
}

/// How a candidate GPU set ranks; the greatest wins (field order is the order of importance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    /// Admissible under the policy.
    admissible: bool,
    /// Fewer GPU pairs without NVLink.
    fewer_unlinked_pairs: Reverse<usize>,
    /// Interconnect score of the set's GPUs on a node together plus the look-ahead of what it
    /// leaves (per node too, see `LinkTable::set_score_in_nodes`).
    link_score: u32,
    /// Fewer nodes.
    fewer_nodes: Reverse<usize>,
    /// Closer nodes (distance spread).
    closer_nodes: Reverse<u64>,
    /// The set's own link score: of sets equal above, the better linked one now rather than
    /// later, never by GPU indices (they would let the numbering, or the reduced search's
    /// representatives, pick). Above the packing: below it the churn mean link fell to 0.969.
    own_links: u32,
    /// Fewer idle GPU nodes opened: a 1-GPU pod that took an idle node's GPU for an unshared
    /// NIC broke the whole node a later 4-GPU pod needed (the look-ahead sees sets of one and
    /// two GPUs only). Below the link scores, so packing never costs links.
    keeps_idle_nodes: Reverse<usize>,
    /// Better NIC-to-GPU paths.
    cheaper_nic_paths: Reverse<u32>,
    /// More link score left among the free GPUs.
    links_left: u32,
    /// The tightest CPU fit: fewer free CPUs left on the chosen nodes.
    tightest_fit: Reverse<u64>,
}

/// Keeps `c` in `best` when it ranks higher, or ties and takes lower GPU indices: the one
/// tie-break of both the bounded and the in-turn walk.
fn offer(best: &mut Option<(Rank, Candidate)>, rank: Rank, c: Candidate) {
    let better = match best {
        None => true,
        Some((b, bc)) => rank > *b || (rank == *b && c.gpus < bc.gpus),
    };
    if better {
        *best = Some((rank, c));
    }
}

/// A set of the reduced search with the bound of its rank (its look-ahead exact or bounded),
/// best first, then in enumeration order.
type Bounded = (Rank, Reverse<usize>, bool, Vec<usize>);

/// The GPU sets of a decision, as [`Search::best_with_gpus`] ranks them.
enum Sets<'f> {
    /// Every set, as bit masks of GPU indices.
    Masks(Vec<u64>),
    /// Every set, listed.
    Every(Vec<Vec<usize>>),
    /// One set per class of interchangeable sets, and the symmetries of the links.
    Classes(Vec<Vec<usize>>, Symmetry<'f>),
}

impl Sets<'_> {
    fn len(&self) -> usize {
        match self {
            Sets::Masks(m) => m.len(),
            Sets::Every(s) | Sets::Classes(s, _) => s.len(),
        }
    }
}

/// Node sets already grown in a decision, by seed.
type Grown = Vec<(Vec<usize>, Option<Vec<usize>>)>;

/// Everything one decision's search needs, computed once.
pub struct Search<'a> {
    ledger: &'a Ledger,
    links: &'a LinkTable,
    config: &'a PlacementConfig,
    r: &'a Resolved,
    allowed: &'a [bool],
    pin: Option<&'a NodeSet>,
    keep: bool,
    caps: Vec<Cap>,
    /// What the container needs from its node set, GPUs aside (they seed the set).
    need: Need,
    /// The same with the GPUs.
    full_need: Need,
    /// What the whole pod needs, for the first container of a pod in pod scope.
    pod_need: Option<Need>,
    /// Widest node set the policy admits.
    limit: usize,
    /// NICs fixed by the device plugin (`keep` mode).
    fixed_nics: Vec<usize>,
    /// How GPU sets are enumerated.
    gpu_search: GpuSearch,
    /// Nodes whose GPUs are all free, by index.
    idle_nodes: Vec<bool>,
}

impl<'a> Search<'a> {
    /// The needs and the width limit of request `r` on the `allowed` nodes; `pod_totals` sizes
    /// the node set of a pod's first container in pod scope, `pin` is the pod's node set once
    /// chosen.
    pub fn new(
        ledger: &'a Ledger,
        links: &'a LinkTable,
        config: &'a PlacementConfig,
        r: &'a Resolved,
        allowed: &'a [bool],
        pod_totals: Option<&PodTotals>,
        pin: Option<&'a NodeSet>,
    ) -> Self {
        let whole = config.full_pcpus_only;
        let keep = config.gpu_mode == GpuMode::Keep;
        let mut caps = numa::caps_for(ledger, whole, r.isolated);
        // The scheduler's exact CPUs: the only ones this container may take.
        if let Some(set) = r.choice.as_ref().and_then(|h| h.cpus.as_ref()) {
            for c in &mut caps {
                c.avail = c.avail.intersection(set);
                c.cpu = super::cpus::capacity(ledger.topo(), &c.avail, whole);
            }
        }
        let need = Need {
            cpus: if r.exclusive { r.cpus } else { 0 },
            whole,
            memory: r.memory,
            gpus: 0,
            nics: r.nic_count as u32,
            shared: !r.exclusive,
            hugepages: r.hugepages.clone(),
        };
        let full_need = Need {
            gpus: r.gpu_count as u32,
            ..need.clone()
        };
        let mut limit = match r.eff.policy {
            Policy::SingleNumaNode => 1,
            Policy::Restricted => numa::min_width(ledger, &full_need),
            _ => usize::MAX,
        };
        // The scheduler chose the nodes knowing the policy it read from NodeResourceTopology:
        // its width is admitted.
        if let Some(allowed) = r.choice.as_ref().and_then(|h| h.allowed.as_ref()) {
            limit = limit.max(allowed.iter().filter(|a| **a).count());
        }
        // The first container of a pod in pod scope pins the pod: size its node set for the
        // whole pod when the pod's totals are known (the kubelet's pod scope sums them too).
        let pod_need = (r.eff.scope == Scope::Pod && pin.is_none())
            .then_some(pod_totals)
            .flatten()
            .map(|t| Need {
                cpus: if r.exclusive {
                    need.cpus.max(t.exclusive_cpus)
                } else {
                    need.cpus
                },
                memory: need.memory.max(t.memory_bytes),
                gpus: need.gpus.max(t.gpus),
                nics: need.nics.max(t.nics),
                ..need.clone()
            })
            .filter(|p| *p != need);
        let fixed_nics = if keep || r.choice.as_ref().is_some_and(|h| !h.nics.is_empty()) {
            r.alloc_nics.clone()
        } else {
            Vec::new()
        };
        Self {
            ledger,
            links,
            config,
            r,
            allowed,
            pin,
            keep,
            caps,
            need,
            full_need,
            pod_need,
            limit,
            fixed_nics,
            gpu_search: GpuSearch::default(),
            idle_nodes: numa::idle_gpu_nodes(ledger),
        }
    }

    /// The same search with GPU sets enumerated by `mode`.
    pub fn with_gpu_search(mut self, mode: GpuSearch) -> Self {
        self.gpu_search = mode;
        self
    }

    /// The GPU sets to rank and whether the look-ahead is exact. Where the exact look-ahead is
    /// a function of link values only (so interchangeable sets tie on every rank field but the
    /// NIC ones) and affordable for one set per class, one set per class of the symmetries of
    /// the links (or, for the reference, every set) with the exact look-ahead; else every set
    /// with the look-ahead the budget allows.
    fn gpu_sets<'f>(&self, free: &'f [usize], must: &[usize], k: usize) -> (Sets<'f>, bool) {
        // `keep` fixes GPUs and NICs by index: no two sets are interchangeable then. Every
        // host size: finding the classes checks two rows per swap, a few µs on 8 GPUs, and a
        // DGX H100's 70 4-GPU sets are 3 classes (how many of the 4 come from each socket).
        // No two GPUs interchangeable (DGX-1V's cube mesh), as the topology's table of twins
        // tells at once: every set is its own class, and the symmetries are not built.
        if must.is_empty()
            && !self.keep
            && orbits::lookahead_invariant(self.links, free, k)
            && !orbits::none_interchangeable(self.links, free)
        {
            // The links alone: NICs (one per PCIe switch on a DGX-2) would set every switch
            // apart, and the search pairs them with each set of a winning class instead.
            let sym = Symmetry::new(self.links, self.ledger, free, false);
            let reps = sym.reduces().then(|| sym.representatives(k)).flatten();
            if let Some(reps) = reps.filter(|s| gpus::lookahead_exact(s.len(), free.len(), k)) {
                // A reduction that keeps more than half the sets saves less than the class
                // walk and the orbits cost (DGX-1V idle, 4 GPUs: twice the plain search's
                // time in the placement bench): every set then, with the same exact look-ahead.
                let slight = 2 * reps.len() as u64 > gpus::binomial(free.len() as u64, k as u64);
                if self.gpu_search == GpuSearch::Exhaustive || slight {
                    return (self.every_set(free, must, k), true);
                }
                return (Sets::Classes(reps, sym), true);
            }
        }
        let sets = self.every_set(free, must, k);
        let exact = gpus::lookahead_exact(sets.len(), free.len(), k);
        (sets, exact)
    }

    /// Every `k`-set of `free` holding `must`: as bit masks for the reduced search when the
    /// sets are all enumerated and the GPU indices fit a mask (no vector per set), else listed.
    fn every_set<'f>(&self, free: &[usize], must: &[usize], k: usize) -> Sets<'f> {
        let masks = (self.gpu_search == GpuSearch::Reduced && must.is_empty())
            .then(|| gpus::candidate_masks(free, k))
            .flatten();
        match masks {
            Some(masks) => Sets::Masks(masks),
            None => Sets::Every(gpus::candidates(self.links, free, must, k)),
        }
    }

    /// Free capacity per node at the start of the decision.
    pub fn caps(&self) -> &[Cap] {
        &self.caps
    }

    /// The whole request, GPUs included.
    pub fn full_need(&self) -> &Need {
        &self.full_need
    }

    fn topo(&self) -> &Topology {
        self.ledger.topo()
    }

    /// Whether the host's CPU nodes together hold the request. Kept GPUs are not free by
    /// definition, so with `keep` and GPUs the answer is left to the search.
    pub fn host_has_enough(&self) -> bool {
        let cpu_nodes: Vec<usize> = (0..self.caps.len())
            .filter(|i| self.caps[*i].has_cpus)
            .collect();
        numa::fits(&self.caps, &cpu_nodes, &self.full_need) || (self.r.gpu_count > 0 && self.keep)
    }

    /// Whether every GPU (shared ones included) and NIC of `c` sits on its nodes.
    pub fn devices_inside(&self, c: &Candidate) -> bool {
        let on = |node: Option<usize>| node.is_some_and(|i| c.nodes.contains(&i));
        c.gpus.iter().all(|g| on(self.ledger.gpu_node(*g)))
            && self
                .r
                .shared_gpus
                .iter()
                .all(|g| on(self.ledger.gpu_node(*g)))
            && c.nics.iter().all(|n| on(self.ledger.nic_node(*n)))
            && self.r.device_nodes.iter().all(|i| c.nodes.contains(i))
    }

    /// A candidate on `nodes` with `gpus` and `nics`, judged by the policy.
    fn candidate(
        &self,
        nodes: Vec<usize>,
        gpus: Vec<usize>,
        (nics, nic_cost): (Vec<usize>, u32),
    ) -> Candidate {
        let mut c = Candidate {
            nodes,
            gpus,
            nics,
            admissible: false,
            nic_cost,
        };
        c.admissible = self.r.eff.policy == Policy::BestEffort
            || (self.devices_inside(&c) && c.nodes.len() <= self.limit);
        c
    }

    /// Nodes for the pod when they stay within the policy's width, else for the container.
    fn sized(
        &self,
        for_pod: Option<Vec<usize>>,
        own: impl FnOnce() -> Option<Vec<usize>>,
    ) -> Option<Vec<usize>> {
        match for_pod {
            Some(n) if n.len() <= self.limit => Some(n),
            _ => own(),
        }
    }

    /// No GPU wanted: the best node set, and the NICs on it. GPUs used in shared mode and
    /// generic devices seed the set, as whole GPUs do in [`Search::best_with_gpus`].
    pub fn best_without_gpus(&self) -> Option<Candidate> {
        // NICs the device plugin or a CDI spec gave (kept, `fixed_nics`) seed the set too:
        // chosen by amounts alone, the set could land on another node with a free NIC of its
        // own, where the container's NIC is not.
        if !self.r.shared_gpus.is_empty()
            || !self.r.device_nodes.is_empty()
            || !self.fixed_nics.is_empty()
        {
            return self.around_gpus(Vec::new());
        }
        let topo = self.topo();
        let for_pod = self
            .pod_need
            .as_ref()
            .and_then(|p| numa::choose(topo, &self.caps, self.allowed, p, self.r.eff.numa_choice));
        let nodes = self.sized(for_pod, || {
            numa::choose(
                topo,
                &self.caps,
                self.allowed,
                &self.need,
                self.r.eff.numa_choice,
            )
        })?;
        let nics = nics::choose(self.ledger, &[], &nodes, self.r.nic_count, &self.fixed_nics);
        Some(self.candidate(nodes, Vec::new(), nics))
    }

    /// The GPUs the search must take: the device plugin's under `keep`, a scheduler's choice.
    fn fixed_gpus(&self) -> Vec<usize> {
        if self.keep || self.r.choice.as_ref().is_some_and(|h| !h.gpus.is_empty()) {
            self.r.alloc_gpus.clone()
        } else {
            Vec::new()
        }
    }

    /// GPUs wanted: every candidate GPU set with the nodes grown around it and its NICs; the
    /// best by [`Rank`], ties to the lowest GPU indices. `Err` when no GPU set exists at all.
    pub fn best_with_gpus(&self) -> Result<Option<Candidate>, PlacementError> {
        let r = self.r;
        let must = self.fixed_gpus();
        // GPUs the device plugin gave are kept whatever their mode; others only when
        // choosable (never one in MIG mode).
        let free: Vec<usize> = self
            .ledger
            .free_gpus()
            .into_iter()
            .filter(|g| must.contains(g) || self.ledger.gpu_choosable(*g))
            .collect();
        let (sets, exact) = self.gpu_sets(&free, &must, r.gpu_count);
        let (sets, sym) = match sets {
            Sets::Masks(masks) if !masks.is_empty() => {
                return Ok(self.rank_masks(masks, &free, exact));
            }
            Sets::Every(sets) if !sets.is_empty() => {
                return Ok(match self.gpu_search {
                    GpuSearch::Reduced => self.rank_in_turn(sets, &free, exact),
                    GpuSearch::Exhaustive => self.rank_every_set(sets, &free, exact),
                });
            }
            Sets::Classes(sets, sym) if !sets.is_empty() => (sets, sym),
            _ => {
                return Err(reject::insufficient(
                    self.ledger,
                    self.config,
                    r,
                    &self.caps,
                ))
            }
        };
        // The GPU-only fields first, every other field at the best it could be (admissible,
        // on no node, no NIC cost), and the look-ahead at its bound until the set comes up:
        // a bound of the set's rank whatever the field order.
        let mut look = Lookahead::new(self.links, &free, r.gpu_count, exact).with_symmetry(&sym);
        let mut bounds = self.bounds(sets, &free, &mut look);
        // Best bound first (equal bounds in enumeration order). A set whose look-ahead is only
        // bounded gets it computed and goes back in; once a candidate ranks above the next
        // bound no later set can win: their exact look-ahead, node growth and NIC pairing
        // (most of an idle 16-GPU decision) are skipped.
        let mut grown = Grown::new();
        let mut best: Option<(Rank, Candidate)> = None;
        while let Some((bound, order, known, s)) = bounds.pop() {
            if best.as_ref().is_some_and(|(b, _)| bound < *b) {
                break;
            }
            if !known {
                let ahead = look.exact(&s);
                let bound = Rank {
                    link_score: self.links.set_score_in_nodes(&s).saturating_add(ahead),
                    ..bound
                };
                bounds.push((bound, order, true, s));
                continue;
            }
            let Some(nodes) = self.nodes_around(&s, &mut grown) else {
                continue;
            };
            // The node fields now; the NIC ones stay at their best.
            let bound = Rank {
                fewer_nodes: Reverse(nodes.len()),
                closer_nodes: Reverse(numa::spread(self.topo(), &nodes)),
                tightest_fit: Reverse(nodes.iter().map(|i| u64::from(self.caps[*i].cpu)).sum()),
                ..bound
            };
            if best.as_ref().is_some_and(|(b, _)| bound < *b) {
                continue;
            }
            self.offer_orbit(s, bound, &sym, &mut grown, &mut best);
        }
        Ok(best.map(|(_, c)| c))
    }

    /// Each GPU set with a bound of its rank: the GPU-only fields, every other field at the
    /// best it could be, the look-ahead at `look`'s bound until the set comes up.
    fn bounds(
        &self,
        sets: Vec<Vec<usize>>,
        free: &[usize],
        look: &mut Lookahead<'_>,
    ) -> BinaryHeap<Bounded> {
        let mut bounds: BinaryHeap<Bounded> = BinaryHeap::with_capacity(sets.len());
        let free_score = self.links.set_score(free);
        // Each GPU's links to the free ones, summed once: the links left by each set are then
        // a sum over its GPUs (a tenth of an idle 16-GPU decision went to summing them again).
        let to_free = self.links.to_free(free);
        for (order, s) in sets.into_iter().enumerate() {
            let own_links = self.links.set_score(&s);
            let (ahead, known) = look.bound(&s);
            let bound = Rank {
                admissible: true,
                fewer_unlinked_pairs: Reverse(gpus::unlinked_pairs(self.links, &s)),
                link_score: self.links.set_score_in_nodes(&s).saturating_add(ahead),
                fewer_nodes: Reverse(0),
                closer_nodes: Reverse(0),
                keeps_idle_nodes: Reverse(numa::idle_opened(self.ledger, &self.idle_nodes, &s)),
                cheaper_nic_paths: Reverse(0),
                links_left: self.links.remaining_by(&to_free, free_score, &s),
                tightest_fit: Reverse(0),
                own_links,
            };
            bounds.push((bound, Reverse(order), known, s));
        }
        bounds
    }

    /// Offers GPU set `s` (its rank `bound` with the NIC fields still at their best) with its
    /// NICs. One set per class of the links: the sets of its orbit tie on every field but the
    /// NIC ones, which the symmetries do not keep, so NICs are paired with each of them.
    fn offer_orbit(
        &self,
        s: Vec<usize>,
        bound: Rank,
        sym: &Symmetry<'_>,
        grown: &mut Grown,
        best: &mut Option<(Rank, Candidate)>,
    ) {
        let r = self.r;
        let members = if r.nic_count > 0 {
            sym.orbit(&s)
        } else {
            vec![s]
        };
        for gpus in members {
            let Some(nodes) = self.nodes_around(&gpus, grown) else {
                continue;
            };
            let nics = nics::choose(self.ledger, &gpus, &nodes, r.nic_count, &self.fixed_nics);
            let c = self.candidate(nodes, gpus, nics);
            let rank = Rank {
                admissible: c.admissible,
                cheaper_nic_paths: Reverse(c.nic_cost),
                ..bound
            };
            offer(best, rank, c);
        }
    }

    /// The nodes for GPU set `gpus`: the allowed nodes of its GPUs (shared ones too), grown
    /// until they hold the pod (when sized for it) or the container. The growth reads the seed
    /// alone, which many sets share (a socket's GPUs): `grown` keeps each seed's outcome.
    fn nodes_around(&self, gpus: &[usize], grown: &mut Grown) -> Option<Vec<usize>> {
        let mut seed: Vec<usize> = Vec::new();
        for g in gpus.iter().chain(&self.r.shared_gpus) {
            if let Some(i) = self.ledger.gpu_node(*g) {
                if self.allowed[i] && !seed.contains(&i) {
                    seed.push(i);
                }
            }
        }
        // Without GPUs, the fixed NICs' nodes are the seed's too (with GPUs the NICs pair
        // with the GPU set, `nics::choose`, and the GPUs' nodes lead).
        let fixed_nics = gpus
            .is_empty()
            .then(|| {
                self.fixed_nics
                    .iter()
                    .filter_map(|n| self.ledger.nic_node(*n))
            })
            .into_iter()
            .flatten();
        for i in self.r.device_nodes.iter().copied().chain(fixed_nics) {
            if self.allowed[i] && !seed.contains(&i) {
                seed.push(i);
            }
        }
        if let Some((_, nodes)) = grown.iter().find(|(s, _)| *s == seed) {
            return nodes.clone();
        }
        let topo = self.topo();
        let for_pod = self
            .pod_need
            .as_ref()
            .and_then(|p| numa::grow(topo, &self.caps, self.allowed, seed.clone(), p));
        let nodes = self.sized(for_pod, || {
            numa::grow(topo, &self.caps, self.allowed, seed.clone(), &self.need)
        });
        grown.push((seed, nodes.clone()));
        nodes
    }

    /// The candidate for GPU set `gpus`: its nodes and the NICs that pair best with the set.
    fn around_gpus(&self, gpus: Vec<usize>) -> Option<Candidate> {
        let nodes = self.nodes_around(&gpus, &mut Grown::new())?;
        let nics = nics::choose(
            self.ledger,
            &gpus,
            &nodes,
            self.r.nic_count,
            &self.fixed_nics,
        );
        Some(self.candidate(nodes, gpus, nics))
    }

    /// Why no candidate was admissible: what was asked, the best node, what to change.
    pub fn unalignable(&self) -> PlacementError {
        reject::unalignable(
            self.ledger,
            self.r,
            &self.caps,
            self.allowed,
            &reject::Shape {
                pin: self.pin,
                limit: self.limit,
            },
            &self.full_need,
            &super::reject::given::Fixed {
                gpus: &self.fixed_gpus(),
                nics: &self.fixed_nics,
                keep: self.keep,
            },
        )
    }
}

mod in_turn;
