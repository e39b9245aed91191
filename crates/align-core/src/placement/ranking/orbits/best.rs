//! The best score of a set of the free GPUs from the symmetries alone, and whether what a set
//! leaves still holds such a best set: the look-ahead's ceiling (the best `2k`-set of all the
//! free GPUs) without a branch and bound over every set, and that set's search skipped for
//! the sets that leave one (on the idle 16-GPU hosts, most of the sets whose bound comes up).

use super::{Symmetry, MAX_SETS};

/// Most tied best sets [`Symmetry::best_score`] keeps the class counts of.
pub const MAX_BEST: usize = 8;

impl Symmetry<'_> {
    /// The best score of a `k`-set of the free GPUs, `pair` giving the free positions' pair
    /// scores (either orientation: the caller's table reads the same both ways), with the class
    /// counts (by class) of up to [`MAX_BEST`] sets that reach it; `None` past [`MAX_SETS`]
    /// classes of sets. The counts are scored without building a set: a class's members are
    /// interchangeable, so every pair between two classes (or within one) scores as their
    /// first members' pair.
    pub fn best_score(
        &self,
        k: usize,
        pair: impl Fn(usize, usize) -> u32,
    ) -> Option<(u32, Vec<Vec<u8>>)> {
        let c = self.classes.len();
        // Pair score between classes, and within each (a class of one never takes two).
        let mut w = vec![0u32; c * c];
        for (a, ma) in self.classes.iter().enumerate() {
            for (b, mb) in self.classes.iter().enumerate() {
                w[a * c + b] = match (a == b, ma.get(1)) {
                    (true, Some(&second)) => pair(ma[0], second),
                    (true, None) => 0,
                    (false, _) => pair(ma[0], mb[0]),
                };
            }
        }
        let mut best: Option<(u32, Vec<Vec<u8>>)> = None;
        let mut seen = 0usize;
        // The classes a set takes GPUs from, with their counts: a `2k`-set of 16 GPUs takes
        // from half the classes or fewer, and pairs of classes it does not take add nothing
        // (scoring every pair of classes was a fifth of an idle 16-GPU decision).
        let mut taken: Vec<(usize, u64)> = Vec::with_capacity(c);
        let ok = self.walk_counts(k, &mut |order, counts| {
            taken.clear();
            taken.extend(
                counts
                    .iter()
                    .zip(order)
                    .filter(|(&n, _)| n > 0)
                    .map(|(&n, s)| (s.class, n as u64)),
            );
            let mut score = 0u64;
            for (i, &(class, n)) in taken.iter().enumerate() {
                let row = &w[class * c..(class + 1) * c];
                score += n * n.saturating_sub(1) / 2 * u64::from(row[class]);
                for &(other, m) in &taken[..i] {
                    score += n * m * u64::from(row[other]);
                }
            }
            let score = u32::try_from(score).unwrap_or(u32::MAX);
            // MSRV 1.80: no `Option::is_none_or`.
            let keep = match &best {
                None => true,
                Some((b, ties)) => score > *b || (score == *b && ties.len() < MAX_BEST),
            };
            if keep {
                let mut by_class = vec![0u8; c];
                for (&n, s) in counts.iter().zip(order) {
                    by_class[s.class] = u8::try_from(n).unwrap_or(u8::MAX);
                }
                match &mut best {
                    Some((b, ties)) if *b == score => ties.push(by_class),
                    _ => best = Some((score, vec![by_class])),
                }
            }
            seen += 1;
            seen <= MAX_SETS
        });
        ok.then(|| best.unwrap_or_default())
    }

    /// Whether the free GPUs outside `taken` hold a set the symmetries map a set of class
    /// counts `counts` onto: per block, its groups' counts go to its groups one to one, each
    /// group's sorted largest first under what its classes have left sorted alike (any
    /// arrangement of a group's classes, and of a block's groups, is a symmetry).
    pub fn holds(&self, counts: &[u8], taken: &[usize]) -> bool {
        let used = self.counts(taken);
        let sorted = |g: usize, f: &dyn Fn(usize) -> u8| {
            let mut v: Vec<u8> = self.groups[g].iter().map(|&c| f(c)).collect();
            v.sort_unstable_by(|a, b| b.cmp(a));
            v
        };
        self.blocks.iter().all(|block| {
            let want: Vec<Vec<u8>> = block.iter().map(|&g| sorted(g, &|c| counts[c])).collect();
            let left: Vec<Vec<u8>> = block
                .iter()
                .map(|&g| {
                    sorted(g, &|c| {
                        u8::try_from(self.classes[c].len())
                            .unwrap_or(u8::MAX)
                            .saturating_sub(used[c])
                    })
                })
                .collect();
            let fits = |i: usize, j: usize| want[i].iter().zip(&left[j]).all(|(n, a)| n <= a);
            // Groups a block's counts go to (augmenting paths: a block has a few groups).
            let mut owner = vec![usize::MAX; block.len()];
            (0..block.len()).all(|i| augment(i, &fits, &mut owner, &mut vec![false; block.len()]))
        })
    }
}

/// Kuhn's augmenting path: gives row `i` a column it `fits`, moving earlier rows along.
fn augment(
    i: usize,
    fits: &dyn Fn(usize, usize) -> bool,
    owner: &mut [usize],
    seen: &mut [bool],
) -> bool {
    for j in 0..owner.len() {
        if seen[j] || !fits(i, j) {
            continue;
        }
        seen[j] = true;
        if owner[j] == usize::MAX || augment(owner[j], fits, owner, seen) {
            owner[j] = i;
            return true;
        }
    }
    false
}
