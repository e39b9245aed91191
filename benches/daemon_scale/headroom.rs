//! `daemon_scale`'s last table: each exclusive headroom measured side by side at each size.
//! With no headroom every exclusive create moves every shared container (its reply carries
//! one update per shared container) and every exclusive removal queues as many for the next
//! reply; with one, most admissions are taken from the headroom and move nobody.

use test_support::bench::quantiles;

use super::{us, Run, SizeResult};

/// p50 and p99 of `v`, formatted.
fn p50_99(mut v: Vec<f64>) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let (a, b) = quantiles(&mut v, 0.99);
    format!("{} / {}", us(a), us(b))
}

/// Mean and max of counts.
fn mean_max(v: &[usize]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let mean = v.iter().sum::<usize>() as f64 / v.len() as f64;
    format!("{mean:.1} / {}", v.iter().max().copied().unwrap_or(0))
}

/// One kind's creates: round trips, the daemon's own times, the updates each carried.
fn kind(run: &Run, r: &SizeResult, excl: bool) -> (String, String, Vec<usize>) {
    let samples: Vec<_> = r.samples.iter().filter(|s| s.exclusive == excl).collect();
    let rtt = samples.iter().map(|s| s.rtt_us).collect();
    let own = samples
        .iter()
        .filter_map(|s| run.logged.get(&s.name))
        .map(|l| l.latency_us)
        .collect();
    let updates = samples.iter().map(|s| s.updates).collect();
    (p50_99(rtt), p50_99(own), updates)
}

/// Prints the comparison table.
pub fn report(runs: &[Run]) {
    println!(
        "\n| exclusive_headroom | live | exclusive create, round trip p50 / p99 | daemon's own p50 / p99 | updates per exclusive create, mean / max | exclusive creates that moved the pool | shared create, round trip p50 / p99 | daemon's own p50 / p99 | updates per shared create, mean / max | updates per removal, mean / max | VmRSS / VmHWM after the creates |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for run in runs {
        for r in &run.results {
            let (x_rtt, x_own, x_up) = kind(run, r, true);
            let (s_rtt, s_own, s_up) = kind(run, r, false);
            // A create that moves the pool carries an update for each shared container but
            // the few a removal may have queued: count those that carry more than a tenth.
            let shared_live = r.live - r.live / 10;
            let moved = x_up
                .iter()
                .filter(|u| **u > 0 && **u * 10 >= shared_live)
                .count();
            println!(
                "| {} | {} | {x_rtt} | {x_own} | {} | {moved} of {} | {s_rtt} | {s_own} | {} | {} | {:.1} / {:.1} MiB |",
                run.headroom,
                r.live,
                mean_max(&x_up),
                x_up.len(),
                mean_max(&s_up),
                mean_max(&r.removal_updates),
                r.rss.total as f64 / 1024.0,
                r.rss.peak as f64 / 1024.0,
            );
        }
    }
}
