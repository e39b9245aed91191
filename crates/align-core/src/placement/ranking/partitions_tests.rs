use super::*;
use crate::topology::Topology;

/// Pair scores over a real host's GPUs: its NVLink counts, plus a small term that differs
/// between most pairs, so that an entry read for the wrong subset or set size would not
/// happen to equal what the search finds.
fn pair_scores(topo: &Topology) -> impl Fn(usize, usize) -> u32 + '_ {
    move |i, j| {
        let nv = topo
            .gpu_links
            .as_ref()
            .and_then(|l| l.nvlink.get(i)?.get(j).copied())
            .unwrap_or(0);
        let (a, b) = (i.min(j) as u32, i.max(j) as u32);
        nv * 100 + (a * 7 + b * 13) % 17
    }
}

/// Every subset of every node of the GPU hosts, every set size: the table reads what
/// the search over the subset finds, and pools it cannot answer are left to the caller.
#[test]
fn node_table_matches_the_search_on_every_subset() {
    for name in crate::topology::testing::GPU_HOSTS {
        let topo = crate::topology::testing::fixture_or_shipped(name);
        let numa: Vec<Option<u32>> = topo.gpus.iter().map(|g| g.numa_node).collect();
        let parts = NodePartitions::new(&numa);
        let pair = pair_scores(&topo);
        for node in &parts.nodes {
            for k in 2..=PARTITION_EXACT_GPUS {
                for m in 0..1u32 << node.len() {
                    let pool: Vec<usize> = (0..node.len())
                        .filter(|p| m & (1 << p) != 0)
                        .map(|p| node[p])
                        .collect();
                    let want = best_partition(&pair, &pool, k);
                    assert_eq!(parts.get(&pair, &pool, k), Some(want), "{name} {pool:?}");
                }
            }
        }
        // Descending, or over two nodes: not the table's to answer.
        if parts.nodes.len() > 1 && parts.nodes[0].len() > 1 {
            let (a, b) = (parts.nodes[0][0], parts.nodes[0][1]);
            assert_eq!(parts.get(&pair, &[b, a], 2), None, "{name}");
            assert_eq!(parts.get(&pair, &[a, parts.nodes[1][0]], 2), None, "{name}");
        }
    }
}
