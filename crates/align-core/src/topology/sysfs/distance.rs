//! The NUMA distance matrix from `nodeN/distance`: one row per node, one column per node in id
//! order (what the kernel prints for its online nodes, from the firmware's SLIT).
//!
//! Real machines print rows the kernel's own rules (10 on the diagonal, more than 10 off it:
//! `slit_valid()` in arch/x86/mm/numa.c) would not give: an offline node leaves its column in
//! the other rows (hwloc's `offline-cpu0-node0`: node 1 alone online, its row `21 10`), old
//! ia64 firmware gives a node `0` to itself (`8ia64-2s2c2t`), a tree gathered by hand may be
//! short or hold garbage. None of this says where the CPUs and memory are, which is what the
//! placement needs; it only says how far apart the nodes are, and there a row that cannot be
//! trusted is no better than none. So a quirky row, like a missing file, never refuses the
//! host: the whole matrix falls back, with one warning naming the file and what is wrong with
//! it, to what the kernel itself uses without a SLIT: 10 from a node to itself, 20 to the
//! others.

use std::path::Path;

use super::{read_str, shown, SysFs};

/// The kernel's local and default remote distances (LOCAL_DISTANCE, REMOTE_DISTANCE).
pub(super) const LOCAL: u32 = 10;
pub(super) const REMOTE: u32 = 20;

/// Rows of the matrix for the nodes `ids` (directories `paths`), in id order.
pub(super) fn read_matrix(fs: &SysFs, ids: &[u32], paths: &[&Path]) -> Vec<Vec<u32>> {
    let n = ids.len();
    let fallback = || -> Vec<Vec<u32>> {
        (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| if i == j { LOCAL } else { REMOTE })
                    .collect()
            })
            .collect()
    };
    let mut rows = Vec::with_capacity(n);
    for (i, (id, path)) in ids.iter().zip(paths).enumerate() {
        let file = path.join("distance");
        let Some(text) = read_str(&file) else {
            // One node alone has nothing to be far from: its row carries no information.
            if n > 1 {
                fs.warn(format!(
                    "node{id}/distance is missing or unreadable: nodes count as {LOCAL} from \
                     themselves and {REMOTE} from each other (the kernel's default without a SLIT)"
                ));
            }
            return fallback();
        };
        match check_row(&text, i, n) {
            Ok(row) => rows.push(row),
            Err(why) => {
                fs.warn(format!(
                    "node{id}/distance {why}, where the kernel prints one distance per online \
                     node ({n} here), {LOCAL} to the node itself and more to the others: nodes \
                     count as {LOCAL} from themselves and {REMOTE} from each other (the \
                     kernel's default without a SLIT)"
                ));
                return fallback();
            }
        }
    }
    rows
}

/// Row `i` of an `n`-node matrix, or why it cannot be used.
fn check_row(text: &str, i: usize, n: usize) -> Result<Vec<u32>, String> {
    let mut row = Vec::with_capacity(n);
    for tok in text.split_whitespace() {
        if row.len() > n {
            break;
        }
        match tok.parse::<u32>() {
            Ok(d) => row.push(d),
            Err(_) => {
                return Err(format!(
                    "{:?} has {:?}, not a number",
                    shown(text),
                    shown(tok)
                ))
            }
        }
    }
    if row.len() != n {
        return Err(format!(
            "{:?} has {} value(s) for {n} node(s)",
            shown(text),
            if row.len() > n {
                format!("more than {n}")
            } else {
                row.len().to_string()
            }
        ));
    }
    if row[i] != LOCAL {
        return Err(format!(
            "{:?} gives the node a distance of {} to itself, not {LOCAL}",
            shown(text),
            row[i]
        ));
    }
    if let Some((j, d)) = row.iter().enumerate().find(|(j, d)| *j != i && **d < LOCAL) {
        return Err(format!(
            "{:?} has {d} (column {j}), below the local distance {LOCAL}",
            shown(text)
        ));
    }
    Ok(row)
}

#[cfg(test)]
#[path = "distance_tests.rs"]
mod tests;
