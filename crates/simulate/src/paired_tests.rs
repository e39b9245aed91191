use super::*;

#[test]
fn equal_streams_do_not_differ() {
    let p = Paired::new(&[5, 6, 7], &[5, 6, 7]).expect("paired");
    assert_eq!(
        (p.streams, p.ahead, p.behind, p.mean, p.p_value),
        (3, 0, 0, 0.0, 1.0)
    );
    assert!(p.within_luck());
}

#[test]
fn the_p_value_is_the_exact_share_of_sign_flips() {
    // Behind by one on 5 streams and ahead by one on 1 of 40: sum -4 over 6 unit
    // differences; |sum of 6 random signs| >= 4 is 2 * (1 + 6) / 64 = 0.21875.
    let mut ours = vec![10; 40];
    let theirs = vec![10; 40];
    for o in ours.iter_mut().take(5) {
        *o = 9;
    }
    ours[5] = 11;
    let p = Paired::new(&ours, &theirs).expect("paired");
    assert_eq!((p.ahead, p.behind, p.mean), (1, 5, -0.1));
    assert!((p.p_value - 0.21875).abs() < 1e-12, "{p:?}");
    assert!(p.within_luck());
    assert_eq!(
        p.describe(),
        "-0.10 a stream (ahead on 1, behind on 5 of 40 streams; p = 0.22)"
    );
    // Behind on 8 of 8: 2 / 256, the strategies' own.
    let all = Paired::new(&[1; 8], &[2; 8]).expect("paired");
    assert!((all.p_value - 2.0 / 256.0).abs() < 1e-12, "{all:?}");
    assert!(!all.within_luck());
    assert!(all
        .describe()
        .ends_with("(ahead on 0, behind on 8 of 8 streams; p < 0.01)"));
}

#[test]
fn unequal_magnitudes_count_by_their_sums() {
    // Differences +3, -1, -1: sums over the 8 sign flips are ±3±1±1, |sum| >= 1 on all but
    // none (3-1-1 = 1): p = 1. Differences +3 alone: |sum| = 3 always: p = 1.
    assert_eq!(Paired::new(&[4, 0, 0], &[1, 1, 1]).expect("p").p_value, 1.0);
    // +2, +2, +1: sum 5; flips give 5, 3, 1, -1, 1, -1, -3, -5: |s| >= 5 on 2 of 8.
    let p = Paired::new(&[3, 3, 2], &[1, 1, 1]).expect("p");
    assert!((p.p_value - 0.25).abs() < 1e-12, "{p:?}");
}

#[test]
fn the_normal_tail_matches_known_values() {
    assert!((normal_upper(1.96) - 0.025).abs() < 1e-4);
    assert!((normal_upper(0.0) - 0.5).abs() < 1e-7);
    assert!((normal_upper(-1.0) - 0.841_344_7).abs() < 1e-6);
}

#[test]
fn no_streams_or_unequal_streams_give_nothing() {
    assert_eq!(Paired::new(&[], &[]), None);
    assert_eq!(Paired::new(&[1, 2], &[1]), None);
}
