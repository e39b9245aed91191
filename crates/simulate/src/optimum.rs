//! The offline optimum of `simulate --churn`: on the same arrival and departure sequence, the
//! most pods any placement without moves can admit, knowing the whole sequence in advance. An
//! integer program over the whole sequence decides for every pod whether it is admitted and on
//! which NUMA node (`x[pod][node]`, binary; at most one node a pod), subject to every node's
//! capacity at every step, and maximises the pods admitted.
//!
//! The rules are [`super::repack`]'s (the looser of nri-align's and the kubelet's where they
//! differ): each pod whole on one node, as single-numa-node asks; per node its exclusive-able
//! CPUs, memory and GPUs; NICs shared (a node serves a pod asking n NICs when it has n). GPUs of
//! one node are interchangeable under these rules (a GPU count per node is all single-numa-node
//! checks), so the node is the whole decision. Any run of either strategy (admitted pods
//! staying where they were put until they leave) is a solution of the program, so its
//! optimum bounds both from above: a pod refused online may be admitted here and the other way
//! round, and a refusal that saves room for later pods counts.
//!
//! Capacity only shrinks at an arrival, so the program needs one capacity constraint per node
//! and resource for each set of pods alive just before a departure (or at the end): every
//! other step's alive set is a subset of one of those. Memory counts in MiB, demands rounded
//! down and capacities up, which only loosens the program (still an upper bound; the churn's
//! pods ask whole GiB, so nothing is rounded there).
//!
//! Solved by `good_lp` with its pure-Rust `microlp` backend (branch and bound over the
//! simplex). An answer counts only when the solver proved it optimal; a solve that reaches
//! [`TIME_LIMIT_S`] is an error, never a figure.

use good_lp::{
    microlp, variable, Expression, ProblemVariables, ResolutionError, Solution, SolutionStatus,
    SolverModel, Variable, WithTimeLimit,
};

use super::repack::{demand, Amounts};
use super::Workload;

/// Seconds one sequence's solve may take before it is given up.
pub const TIME_LIMIT_S: f64 = 60.0;

const MIB: u64 = 1 << 20;

/// Why no optimum came back.
#[derive(Debug, thiserror::Error)]
pub enum OptimumError {
    /// The solver failed outright.
    #[error("the integer program failed: {0}")]
    Solver(#[from] ResolutionError),
    /// The solver stopped (time limit) before proving its incumbent optimal: no bound.
    #[error("the integer program was not solved to optimality within {TIME_LIMIT_S} s")]
    NotProven,
}

/// The optimum of one sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Optimum {
    /// Pods offered (`add` events).
    pub offered: usize,
    /// Pods admitted by the optimum.
    pub admitted: usize,
    /// Per `add` event in order: the index into `bins` of the pod's node, `None` if refused.
    pub nodes: Vec<Option<usize>>,
}

/// A pod of the sequence: what it asks and the `add` events it is alive across.
#[derive(Debug, Clone)]
struct Pod {
    demand: Amounts,
}

/// The pods in order of their `add` events, and the alive sets (indices into those pods)
/// that the capacity constraints need: each the pods alive just before a departure that
/// follows an arrival, and at the end.
fn sequence(wl: &Workload) -> (Vec<Pod>, Vec<Vec<usize>>) {
    let mut pods = Vec::new();
    let mut alive: Vec<(String, usize)> = Vec::new();
    let mut sets = Vec::new();
    let mut grown = false;
    for ev in &wl.events {
        if let Some(name) = &ev.add {
            let Some(spec) = wl.pods.iter().find(|p| &p.name == name) else {
                continue;
            };
            alive.push((name.clone(), pods.len()));
            pods.push(Pod {
                demand: demand(spec),
            });
            grown = true;
        } else if let Some(name) = &ev.remove {
            if grown {
                sets.push(alive.iter().map(|(_, i)| *i).collect());
                grown = false;
            }
            alive.retain(|(n, _)| n != name);
        }
    }
    if grown {
        sets.push(alive.iter().map(|(_, i)| *i).collect());
    }
    (pods, sets)
}

/// What `a` asks or holds in the units of the program: memory in MiB, rounded down for a
/// demand and up for a capacity (either way the program only gets looser).
fn units(a: &Amounts, capacity: bool) -> [f64; 3] {
    let mem = if capacity {
        a[1].div_ceil(MIB)
    } else {
        a[1] / MIB
    };
    [a[0] as f64, mem as f64, a[2] as f64]
}

/// Whether pod demand `d` can ever sit on node `bin` (alone, under the shared NIC rule).
fn ever_fits(bin: &Amounts, d: &Amounts) -> bool {
    d[..3].iter().zip(&bin[..3]).all(|(x, c)| x <= c) && d[3] <= bin[3]
}

/// The most pods of `wl` (its `add` and `remove` events) that nodes `bins` (from
/// [`super::repack::bins`], NICs loosened as the churn does) can admit without moving any.
pub fn solve(bins: &[Amounts], wl: &Workload) -> Result<Optimum, OptimumError> {
    let (pods, sets) = sequence(wl);
    // Every pod admitted is the most there is: no program to solve when first fit in arrival
    // order already admits them all (a host the stream never fills).
    if let Some(nodes) = first_fit_all(bins, wl) {
        return Ok(Optimum {
            offered: pods.len(),
            admitted: pods.len(),
            nodes: nodes.into_iter().map(Some).collect(),
        });
    }
    let mut vars = ProblemVariables::new();
    // x[pod][node], only where the pod could ever fit that node.
    let x: Vec<Vec<Option<Variable>>> = pods
        .iter()
        .map(|p| {
            bins.iter()
                .map(|b| ever_fits(b, &p.demand).then(|| vars.add(variable().binary())))
                .collect()
        })
        .collect();
    let objective: Expression = x.iter().flatten().flatten().copied().sum();
    let mut model = vars.maximise(objective).using(microlp);
    for row in &x {
        let one: Expression = row.iter().flatten().copied().sum();
        if row.iter().flatten().count() > 1 {
            model = model.with(one.leq(1));
        }
    }
    for set in &sets {
        for (n, bin) in bins.iter().enumerate() {
            for (k, cap) in units(bin, true).into_iter().enumerate() {
                let on: Vec<(f64, Variable)> = set
                    .iter()
                    .filter_map(|i| Some((units(&pods[*i].demand, false)[k], x[*i][n]?)))
                    .filter(|(c, _)| *c > 0.0)
                    .collect();
                // A set that fits whole needs no constraint.
                if on.iter().map(|(c, _)| c).sum::<f64>() <= cap {
                    continue;
                }
                let used: Expression = on.iter().map(|(c, v)| *c * *v).sum();
                model = model.with(used.leq(cap));
            }
        }
    }
    // Identical nodes make mirror solutions the search would otherwise visit one by one:
    // number the nodes of one kind by the arrival of their first pod, so a pod may use a
    // node only once an earlier pod uses the one before it of that kind (any solution can
    // be relabelled so).
    for (n, bin) in bins.iter().enumerate() {
        let Some(prev) = (0..n).rev().find(|m| &bins[*m] == bin) else {
            continue;
        };
        for (i, row) in x.iter().enumerate() {
            let Some(here) = row[n] else { continue };
            let before: Expression = x[..i].iter().filter_map(|r| r[prev]).sum();
            model = model.with(Expression::from(here).leq(before));
        }
    }
    let solution = model.with_time_limit(TIME_LIMIT_S).solve()?;
    if !matches!(solution.status(), SolutionStatus::Optimal) {
        return Err(OptimumError::NotProven);
    }
    let nodes: Vec<Option<usize>> = x
        .iter()
        .map(|row| {
            row.iter()
                .position(|v| v.is_some_and(|v| solution.value(v) > 0.5))
        })
        .collect();
    Ok(Optimum {
        offered: pods.len(),
        admitted: nodes.iter().flatten().count(),
        nodes,
    })
}

/// The node of every pod of `wl`, each on the first node with room when it arrives, or
/// `None` when one finds no room.
fn first_fit_all(bins: &[Amounts], wl: &Workload) -> Option<Vec<usize>> {
    let mut nodes = Vec::new();
    let n_pods = sequence(wl).0.len();
    loop {
        let mut trial: Vec<Option<usize>> = nodes.iter().copied().map(Some).collect();
        if nodes.len() == n_pods {
            return Some(nodes);
        }
        // The next pod on the first node that keeps the sequence so far feasible.
        trial.push(None);
        let at = trial.len() - 1;
        let node = (0..bins.len()).find(|n| {
            trial[at] = Some(*n);
            feasible_prefix(bins, wl, &trial)
        })?;
        nodes.push(node);
    }
}

/// Whether `nodes` (per `add` event: the node of that pod or `None`) keeps every node of
/// `bins` within its capacity at every step of `wl`, counted exactly (bytes, not MiB).
pub fn feasible(bins: &[Amounts], wl: &Workload, nodes: &[Option<usize>]) -> bool {
    nodes.len() == sequence(wl).0.len() && feasible_prefix(bins, wl, nodes)
}

/// As [`feasible`], for the first `nodes.len()` pods of `wl` only.
fn feasible_prefix(bins: &[Amounts], wl: &Workload, nodes: &[Option<usize>]) -> bool {
    let mut free = bins.to_vec();
    let mut placed: Vec<(String, usize, Amounts)> = Vec::new();
    let mut next = 0;
    for ev in &wl.events {
        if let Some(name) = &ev.add {
            if next == nodes.len() {
                break;
            }
            let Some(spec) = wl.pods.iter().find(|p| &p.name == name) else {
                continue;
            };
            let d = demand(spec);
            let node = nodes.get(next).copied().flatten();
            next += 1;
            let Some(n) = node else { continue };
            let Some(f) = free.get_mut(n) else {
                return false;
            };
            if d[..3].iter().zip(&f[..3]).any(|(x, c)| x > c) || d[3] > bins[n][3] {
                return false;
            }
            for k in 0..3 {
                f[k] -= d[k];
            }
            placed.push((name.clone(), n, d));
        } else if let Some(name) = &ev.remove {
            if let Some(at) = placed.iter().position(|(p, _, _)| p == name) {
                let (_, n, d) = placed.swap_remove(at);
                for k in 0..3 {
                    free[n][k] += d[k];
                }
            }
        }
    }
    true
}

#[cfg(test)]
#[path = "optimum_tests.rs"]
mod tests;
