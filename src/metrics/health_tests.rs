use super::*;

#[test]
fn liveness_follows_the_heartbeat_and_says_why_it_stalled() {
    let h = Health::new(Duration::from_millis(50));
    assert_eq!(h.liveness(), Ok("ok".into()), "the start counts as a beat");
    std::thread::sleep(Duration::from_millis(80));
    let err = h.liveness().expect_err("stalled");
    assert!(
        err.starts_with("no heartbeat for ") && err.ends_with("the event loop did not run"),
        "{err}"
    );
    h.missed_beat("engine lock held for more than 2s".into());
    assert!(h
        .liveness()
        .expect_err("stalled")
        .ends_with("engine lock held for more than 2s"));
    h.beat();
    assert_eq!(h.liveness(), Ok("ok".into()));
    assert!(h.since_last_beat() < Duration::from_millis(50));
}

#[test]
fn readiness_starts_false_and_carries_its_reason() {
    let h = Health::default();
    assert_eq!(h.readiness(), Err("starting".into()));
    h.set_readiness(
        true,
        "registered and synchronized with containerd 2.1.9".into(),
    );
    assert!(h.readiness().is_ok());
    h.set_readiness(false, "connecting to /run/nri.sock".into());
    assert_eq!(h.readiness(), Err("connecting to /run/nri.sock".into()));
}

#[test]
fn degraded_parts_are_listed_by_name_one_line_each_and_cleared() {
    let h = Health::default();
    assert!(h.degraded().is_empty());
    h.set_degraded("state", Some("writes failing\nsince 12:00".into()));
    h.set_degraded("nrt", Some("left alone".into()));
    assert_eq!(
        h.degraded(),
        vec!["nrt: left alone", "state: writes failing since 12:00"]
    );
    h.set_degraded("state", None);
    assert_eq!(h.degraded(), vec!["nrt: left alone"]);
}
