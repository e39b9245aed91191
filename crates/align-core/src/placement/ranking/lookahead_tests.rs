use std::sync::Arc;

use super::*;
use crate::placement::ledger::Ledger;
use crate::topology::testing::fixture_or_shipped;
use crate::topology::CpuSet;

/// Every remainder of every `k`-set on the 16-GPU fixtures and the 8-GPU hosts, some of
/// their GPUs held: the shared look-ahead scores as the plain one, and bounds it, with
/// the ceiling found by the branch and bound or through the symmetries.
#[test]
fn shared_lookahead_matches_the_plain_one_and_bounds_it() {
    for name in crate::topology::testing::GPU_HOSTS {
        let topo = fixture_or_shipped(name);
        let table = LinkTable::new(&topo);
        let ledger = Ledger::new(Arc::new(topo.clone()), CpuSet::new());
        let n = topo.gpus.len();
        for held in [vec![], vec![0, 5], vec![1, 2, 4, 7, 8, 9, 13, 14]] {
            let free: Vec<usize> = (0..n).filter(|g| !held.contains(g)).collect();
            let sym = Symmetry::new(&table, &ledger, &free, false);
            for k in [2, 3, 4] {
                let mut plain_look = Lookahead::new(&table, &free, k, true);
                let mut sym_look = Lookahead::new(&table, &free, k, true).with_symmetry(&sym);
                for set in gpus::candidates(&table, &free, &[], k).iter().step_by(7) {
                    let rest: Vec<usize> =
                        free.iter().copied().filter(|g| !set.contains(g)).collect();
                    let plain = gpus::lookahead(&table, &rest, k, true);
                    for look in [&mut plain_look, &mut sym_look] {
                        let (bound, known) = look.bound(set);
                        assert!(bound >= plain, "{name} {set:?}");
                        if known {
                            assert_eq!(bound, plain, "{name} {set:?}");
                        }
                        assert_eq!(look.exact(set), plain, "{name} {set:?}");
                    }
                }
                // The ceilings agree: one set per class finds the branch and bound's best.
                assert_eq!(plain_look.ceiling(), sym_look.ceiling(), "{name} {k}");
            }
        }
    }
}

/// Node masks need every free GPU index below 64; past that the plain grouping scores.
#[test]
fn node_masks_only_for_indices_below_64() {
    let topo = fixture_or_shipped("dgx-h100");
    let table = LinkTable::new(&topo);
    assert!(Lookahead::new(&table, &[0, 3, 5], 2, true).nodes.is_some());
    assert!(Lookahead::new(&table, &[1, 64], 2, true).nodes.is_none());
}
