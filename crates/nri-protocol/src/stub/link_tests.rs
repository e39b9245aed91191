use super::*;
use crate::api::ConfigureRequest;

fn runtime(name: &str, version: &str) -> RuntimeInfo {
    RuntimeInfo::from_configure(&ConfigureRequest {
        runtime_name: name.into(),
        runtime_version: version.into(),
        ..Default::default()
    })
}

#[test]
fn a_missing_socket_says_so_with_its_path_until_registered() {
    let t = LinkTracker::new("/var/run/nri/nri.sock".into(), false);
    let c1 = t.attempt();
    t.set_socket_missing(true);
    t.failed("no such file".into(), Duration::from_secs(5), false);
    assert_eq!(
        t.current().to_string(),
        "nri: socket missing: /var/run/nri/nri.sock (is NRI enabled in the runtime?), \
             1 failed attempt(s)"
    );
    t.registered(c1);
    assert!(!t.current().socket_missing);
}

#[test]
fn ready_only_after_synchronize_on_the_current_connection() {
    let t = LinkTracker::new("/run/nri.sock".into(), false);
    let rx = t.subscribe();
    let c1 = t.attempt();
    assert!(!rx.borrow().is_ready());
    // Configure seen before the RegisterPlugin reply: the phase still only moves forward.
    t.configured(c1, runtime("containerd", "2.1.9"));
    t.registered(c1);
    assert_eq!(rx.borrow().phase, LinkPhase::Configured);
    assert!(
        !rx.borrow().is_ready(),
        "external plugins wait for Synchronize"
    );
    t.synchronized(c1);
    assert!(rx.borrow().is_ready());
    assert_eq!(rx.borrow().registrations, 1);
    assert!(
        rx.borrow()
            .to_string()
            .starts_with("registered and synchronized with containerd 2.1.9"),
        "{}",
        *rx.borrow()
    );

    // The runtime goes away: not ready, says why and when the next try is.
    t.failed(
        "runtime closed the connection".into(),
        Duration::from_secs(4),
        true,
    );
    let s = rx.borrow().clone();
    assert!(!s.is_ready());
    let text = s.to_string();
    assert!(
        text.starts_with("connecting to /run/nri.sock, next in ")
            && text.ends_with("; last: runtime closed the connection"),
        "{text}"
    );
    let c2 = t.attempt();
    t.failed("connection refused".into(), Duration::from_secs(1), false);
    assert!(t.current().to_string().contains("1 failed attempt(s)"));
    // A late Synchronize of the old connection does not make the new one ready.
    t.synchronized(c1);
    assert!(!t.current().is_ready());
    let c3 = t.attempt();
    assert!(c3 > c2);
    t.registered(c3);
    t.configured(c3, runtime("cri-o", "1.34.11"));
    t.synchronized(c3);
    assert!(t.current().is_ready());
    assert_eq!(t.current().registrations, 2);
    assert_eq!(t.current().failed_attempts, 0);
    t.stopped("stop requested".into());
    assert!(!t.current().is_ready());
    assert_eq!(t.current().to_string(), "stopped: stop requested");
}

#[test]
fn a_plugin_launched_by_nri_v0_6_is_ready_after_configure() {
    for (version, ready) in [("1.7.24", true), ("2.1.9", false), ("1.7.27", false)] {
        let t = LinkTracker::new("inherited fd 3".into(), true);
        let c = t.attempt();
        t.registered(c);
        t.configured(c, runtime("containerd", version));
        assert_eq!(t.current().is_ready(), ready, "containerd {version}");
        if ready {
            assert!(t.current().to_string().contains("sends no Synchronize"));
        }
    }
    // The same runtime dialed by an external plugin sends Synchronize: wait for it.
    let t = LinkTracker::new("/run/nri.sock".into(), false);
    let c = t.attempt();
    t.configured(c, runtime("containerd", "1.7.24"));
    assert!(!t.current().is_ready());
}
