//! Whether two strategies' totals over the same streams differ by more than the streams' luck.
//!
//! Both strategies replay the same seeded streams, so the test is on the per-stream
//! differences (what a stream itself holds cancels). A sum over a few dozen 30-pod streams
//! moves by several pods with the luck of a handful of decisions that cascade (one 2-GPU pod
//! admitted or refused changes what the next ten arrivals find), and most streams do not
//! differ at all: the differences are a few integers among zeros, too far from a normal
//! distribution for a t interval. The test is therefore the exact sign-flip (permutation)
//! test: with no difference between the strategies, each stream's difference is as likely
//! to have gone the other way, and the p-value is the share of the 2^n sign assignments whose
//! sum is at least as far from zero as the one observed (computed over the sums, not the
//! assignments, so it is exact at any number of streams).

/// The paired comparison of `ours` against `theirs`, stream by stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paired {
    /// Streams compared.
    pub streams: usize,
    /// Streams on which `ours` is ahead.
    pub ahead: usize,
    /// Streams on which `ours` is behind.
    pub behind: usize,
    /// Mean of `ours - theirs` a stream.
    pub mean: f64,
    /// Two-sided p-value of the sign-flip test: how often luck alone gives a gap this wide.
    pub p_value: f64,
}

/// The p-value under which a gap is taken as the strategies', not the seeds'.
pub const SIGNIFICANT: f64 = 0.05;
/// Most total absolute difference the exact test walks (its table has twice this many
/// entries); beyond, the normal approximation of the same permutation distribution.
const MAX_EXACT_SPREAD: i64 = 1 << 20;

impl Paired {
    /// Compares per-stream totals (same streams in the same order); `None` for no stream or
    /// lengths that differ.
    pub fn new(ours: &[usize], theirs: &[usize]) -> Option<Self> {
        if ours.is_empty() || theirs.len() != ours.len() {
            return None;
        }
        let d: Vec<i64> = ours
            .iter()
            .zip(theirs)
            .map(|(a, b)| *a as i64 - *b as i64)
            .collect();
        let sum: i64 = d.iter().sum();
        Some(Self {
            streams: d.len(),
            ahead: d.iter().filter(|x| **x > 0).count(),
            behind: d.iter().filter(|x| **x < 0).count(),
            mean: sum as f64 / d.len() as f64,
            p_value: sign_flip_p(&d, sum),
        })
    }

    /// Whether luck alone explains the gap (p at or over [`SIGNIFICANT`]).
    pub fn within_luck(&self) -> bool {
        self.p_value >= SIGNIFICANT
    }

    /// `-0.20 a stream (ahead on 1, behind on 5 of 40 streams; p = 0.22)`; `p < 0.01` below
    /// what two decimals show.
    pub fn describe(&self) -> String {
        let p = if self.p_value < 0.01 {
            "p < 0.01".to_string()
        } else {
            format!("p = {:.2}", self.p_value)
        };
        format!(
            "{:+.2} a stream (ahead on {}, behind on {} of {} streams; {p})",
            self.mean, self.ahead, self.behind, self.streams
        )
    }
}

/// P(|sum of ±|d_i|| >= |observed|) with every sign equally likely and independent.
fn sign_flip_p(d: &[i64], observed: i64) -> f64 {
    let magnitudes: Vec<i64> = d.iter().map(|x| x.abs()).filter(|x| *x > 0).collect();
    let spread: i64 = magnitudes.iter().sum();
    if spread == 0 {
        return 1.0;
    }
    let observed = observed.abs();
    if spread > MAX_EXACT_SPREAD {
        // Normal approximation: mean 0, variance the sum of squares.
        let sd = (magnitudes.iter().map(|m| (m * m) as f64).sum::<f64>()).sqrt();
        // Continuity correction: sums move in steps of at least one.
        return (2.0 * normal_upper((observed as f64 - 0.5) / sd)).min(1.0);
    }
    // The distribution of the sum, offset by `spread` (index 0 is -spread).
    let width = (2 * spread + 1) as usize;
    let mut dist = vec![0.0f64; width];
    dist[spread as usize] = 1.0;
    let mut reach = 0usize;
    for m in magnitudes {
        let m = m as usize;
        let mut next = vec![0.0f64; width];
        let lo = spread as usize - reach;
        let hi = spread as usize + reach;
        for (i, p) in dist.iter().enumerate().take(hi + 1).skip(lo) {
            if *p > 0.0 {
                next[i - m] += p / 2.0;
                next[i + m] += p / 2.0;
            }
        }
        reach += m;
        dist = next;
    }
    let center = spread as usize;
    let tail: f64 = dist
        .iter()
        .enumerate()
        .filter(|(i, _)| (*i as i64 - center as i64).abs() >= observed)
        .map(|(_, p)| p)
        .sum();
    tail.min(1.0)
}

/// P(Z > z) for a standard normal (Abramowitz and Stegun 26.2.17, error under 7.5e-8).
fn normal_upper(z: f64) -> f64 {
    if z < 0.0 {
        return 1.0 - normal_upper(-z);
    }
    let t = 1.0 / (1.0 + 0.231_641_9 * z);
    let poly = t
        * (0.319_381_530
            + t * (-0.356_563_782
                + t * (1.781_477_937 + t * (-1.821_255_978 + t * 1.330_274_429))));
    (-z * z / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt() * poly
}

#[cfg(test)]
#[path = "paired_tests.rs"]
mod tests;
