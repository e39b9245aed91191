use super::*;

// Each test runs the drop in its own thread: capabilities are per thread, so the rest of
// the test process keeps its own.
#[test]
fn dropping_everything_leaves_no_effective_or_permitted_capability() {
    let report = std::thread::spawn(|| {
        let r = drop_capabilities(&[]).expect("drop");
        let eff = caps::read(None, CapSet::Effective).expect("read");
        let perm = caps::read(None, CapSet::Permitted).expect("read");
        assert!(
            eff.is_empty() && perm.is_empty(),
            "eff {eff:?} perm {perm:?}"
        );
        assert!(nix::sys::prctl::get_no_new_privs().expect("prctl"));
        r
    })
    .join()
    .expect("thread");
    assert!(report.kept.is_empty());
}

#[test]
fn a_kept_capability_stays_only_if_the_thread_had_it() {
    std::thread::spawn(|| {
        let had = caps::has_cap(None, CapSet::Permitted, Capability::CAP_CHOWN).expect("read");
        let r = drop_capabilities(&[Capability::CAP_CHOWN]).expect("drop");
        let eff = caps::read(None, CapSet::Effective).expect("read");
        assert_eq!(r.kept, names(&eff));
        assert_eq!(eff.contains(&Capability::CAP_CHOWN), had);
        assert!(eff.len() <= 1);
        assert!(!r.dropped.contains(&"CAP_CHOWN".to_string()));
    })
    .join()
    .expect("thread");
}
