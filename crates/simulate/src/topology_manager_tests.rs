//! The kubelet's own merge cases, each row written from a case of kubernetes/kubernetes
//! `pkg/kubelet/cm/topologymanager/policy_test.go` (the best-effort and single-numa-node
//! `mergeTestCases`; the row's comment names the case). A kubelet `nil` affinity in an
//! expected merge is the full mask here.

use super::*;

const NP: bool = false;
const P: bool = true;

fn mask(bits: &[u32]) -> u32 {
    bits.iter().fold(0, |m, b| m | (1 << b))
}

fn merged(providers: &[Vec<Hint>], bits: usize, single: bool, closest: bool) -> Hint {
    let distances: Vec<Vec<u64>> = (0..bits)
        .map(|i| (0..bits).map(|j| if i == j { 10 } else { 20 }).collect())
        .collect();
    Merge {
        providers,
        bits,
        distances: &distances,
        single,
        prefer_closest: closest,
    }
    .best()
}

#[test]
fn best_effort_merge_rows() {
    let wide = vec![(mask(&[0, 1, 2, 3]), NP), (mask(&[0, 1]), NP)];
    let rows: [(&str, Vec<Hint>, Hint); 6] = [
        // "bestNonPreferredAffinityCount (1)"
        ("(1)", vec![(mask(&[0, 1]), NP)], (mask(&[0, 1]), NP)),
        // "bestNonPreferredAffinityCount (2)"
        ("(2)", vec![(mask(&[0, 3]), NP)], (mask(&[0, 3]), NP)),
        // "bestNonPreferredAffinityCount (3)"
        ("(3)", vec![(mask(&[1, 2]), NP)], (mask(&[1, 2]), NP)),
        // "bestNonPreferredAffinityCount (4)"
        ("(4)", vec![(mask(&[2, 3]), NP)], (mask(&[2, 3]), NP)),
        // "bestNonPreferredAffinityCount (5)" (mergeTestCasesNoPolicies)
        (
            "(5)",
            vec![(mask(&[1, 2]), NP), (mask(&[2, 3]), NP)],
            (mask(&[1, 2]), NP),
        ),
        // "bestNonPreferredAffinityCount (6)" (mergeTestCasesNoPolicies)
        (
            "(6)",
            vec![
                (mask(&[1, 2, 3]), NP),
                (mask(&[1, 2]), NP),
                (mask(&[1, 3]), NP),
                (mask(&[2, 3]), NP),
            ],
            (mask(&[1, 2]), NP),
        ),
    ];
    for (name, second, want) in rows {
        let got = merged(&[wide.clone(), second], 4, false, false);
        assert_eq!(got, want, "bestNonPreferredAffinityCount {name}");
    }
    // "Two providers, 1 hint each, 1 wider mask, both preferred 2/2": preferred hints whose
    // masks differ merge into a non-preferred one.
    let got = merged(
        &[vec![(mask(&[1]), P)], vec![(mask(&[0, 1]), P)]],
        2,
        false,
        false,
    );
    assert_eq!(got, (mask(&[1]), NP));
    // mergeTestCasesClosestNUMA "Two providers, 2 hints each, different mask": the narrower
    // preferred mask wins whatever the distances.
    let both = vec![(mask(&[4]), P), (mask(&[0, 2]), P)];
    assert_eq!(
        merged(&[both.clone(), both], 5, false, true),
        (mask(&[4]), P)
    );
}

#[test]
fn single_numa_node_merge_rows() {
    let full = mask(&[0, 1]);
    // "Two providers, 1 with 2 hints, 1 with single non-preferred hint matching"
    let got = merged(
        &[
            vec![(mask(&[0]), P), (mask(&[1]), P)],
            vec![(mask(&[0, 1]), NP)],
        ],
        2,
        true,
        false,
    );
    assert_eq!(got, (full, NP));
    // "Single NUMA hint generation"
    let got = merged(
        &[
            vec![(mask(&[0, 1]), P)],
            vec![(mask(&[0]), P), (mask(&[1]), P), (mask(&[0, 1]), NP)],
        ],
        2,
        true,
        false,
    );
    assert_eq!(got, (full, NP));
    // "One no-preference provider" (the provider without preference is left out)
    let got = merged(
        &[vec![(mask(&[0]), P), (mask(&[1]), P), (mask(&[0, 1]), NP)]],
        2,
        true,
        false,
    );
    assert_eq!(got, (mask(&[0]), P));
    // "HintProvider returns empty non-nil map[string][]TopologyHint from provider": a
    // provider with no possible affinity.
    assert_eq!(merged(&[vec![]], 2, true, false), (full, NP));
}

/// `prefer-closest-numa-nodes` changes the pick among equally wide preferred masks: the
/// narrowest rule takes the lowest mask, the option the closest nodes (the KEP's distance
/// table: nodes 0-1 and 2-3 at 11, across at 12).
#[test]
fn prefer_closest_numa_nodes_picks_the_closest_of_equal_widths() {
    let distances: Vec<Vec<u64>> = vec![
        vec![10, 11, 12, 12],
        vec![11, 10, 12, 12],
        vec![12, 12, 10, 11],
        vec![12, 12, 11, 10],
    ];
    let hints = vec![vec![(mask(&[0, 2]), P), (mask(&[2, 3]), P)]];
    let run = |prefer_closest, single| {
        Merge {
            providers: &hints,
            bits: 4,
            distances: &distances,
            single,
            prefer_closest,
        }
        .best()
    };
    assert_eq!(run(false, false), (mask(&[0, 2]), P));
    assert_eq!(run(true, false), (mask(&[2, 3]), P));
    // Not under single-numa-node (its hints are one node wide anyway).
    assert_eq!(run(true, true), (mask(&[0, 1, 2, 3]), NP));
}

#[test]
fn masks_come_in_the_kubelets_order() {
    assert_eq!(
        masks_in_kubelet_order(3),
        vec![0b001, 0b010, 0b100, 0b011, 0b101, 0b110, 0b111]
    );
}
