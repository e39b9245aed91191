use std::time::{Duration, Instant};

use super::{PodRef, Tracker, MAX_TRACKED};

fn pod(name: &str, uid: &str) -> PodRef {
    PodRef {
        namespace: "ns".into(),
        name: name.into(),
        uid: uid.into(),
    }
}

const W: Duration = Duration::from_secs(60);

#[test]
fn a_pod_is_due_after_a_window_of_refusals_and_then_once_per_window() {
    let t0 = Instant::now();
    let mut t = Tracker::new(W);
    t.refused(pod("a", "u1"), t0);
    // Later refusals do not restart the clock.
    t.refused(pod("a", "u1"), t0 + Duration::from_secs(30));
    assert!(t.take_due(t0 + Duration::from_secs(59)).is_empty());
    assert_eq!(t.next_due(), Some(t0 + W));
    assert_eq!(t.take_due(t0 + W), vec![pod("a", "u1")]);
    // Still refused (a PDB blocked it): not again within the window.
    assert!(t.take_due(t0 + W + Duration::from_secs(59)).is_empty());
    assert_eq!(t.next_due(), Some(t0 + W * 2));
    assert_eq!(t.take_due(t0 + W * 2), vec![pod("a", "u1")]);
}

#[test]
fn an_admission_or_a_removal_breaks_the_refusals() {
    let t0 = Instant::now();
    let mut t = Tracker::new(W);
    t.refused(pod("a", "u1"), t0);
    t.refused(pod("b", "u2"), t0);
    t.admitted("ns", "a");
    t.removed("ns", "b");
    assert!(t.is_empty());
    assert!(t.take_due(t0 + W * 10).is_empty());
    // Refused again later: a new clock.
    t.refused(pod("a", "u1"), t0 + W * 10);
    assert!(t.take_due(t0 + W * 10).is_empty());
    assert_eq!(t.take_due(t0 + W * 11), vec![pod("a", "u1")]);
}

#[test]
fn a_recreated_pod_of_the_same_name_starts_its_own_clock() {
    let t0 = Instant::now();
    let mut t = Tracker::new(W);
    t.refused(pod("a", "old"), t0);
    t.refused(pod("a", "new"), t0 + Duration::from_secs(50));
    assert!(t.take_due(t0 + W).is_empty());
    assert_eq!(
        t.take_due(t0 + Duration::from_secs(110)),
        vec![pod("a", "new")]
    );
}

#[test]
fn restarting_the_clocks_delays_every_pod_by_a_window() {
    let t0 = Instant::now();
    let mut t = Tracker::new(W);
    t.refused(pod("a", "u1"), t0);
    t.restart_all(t0 + Duration::from_secs(50));
    assert!(t.take_due(t0 + W).is_empty());
    assert_eq!(t.take_due(t0 + Duration::from_secs(110)).len(), 1);
}

#[test]
fn the_number_of_pods_tracked_is_bounded() {
    let t0 = Instant::now();
    let mut t = Tracker::new(W);
    for i in 0..MAX_TRACKED + 10 {
        t.refused(pod(&format!("p{i}"), "u"), t0);
    }
    assert_eq!(t.len(), MAX_TRACKED);
}
