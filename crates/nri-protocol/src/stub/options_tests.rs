use super::*;

fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn env_switches_to_launched_mode() {
    let opts = StubOptions::new("nri-align", "90")
        .from_env_with(env(&[
            (ENV_PLUGIN_SOCKET, "3"),
            (ENV_PLUGIN_IDX, "07"),
            (ENV_PLUGIN_NAME, "nri-align"),
        ]))
        .unwrap();
    assert_eq!(opts.endpoint, Endpoint::InheritedFd(3));
    assert_eq!(opts.index, "07");
    assert!(opts.is_launched());
    opts.validate().unwrap();
}

#[test]
fn without_socket_env_options_stay_in_dial_mode() {
    let opts = StubOptions::new("nri-align", "90")
        .socket("/tmp/x.sock")
        .from_env_with(env(&[(ENV_PLUGIN_IDX, "07")]))
        .unwrap();
    assert_eq!(opts.endpoint, Endpoint::Socket("/tmp/x.sock".into()));
    assert_eq!(opts.index, "90");
}

#[test]
fn bad_env_and_identity_are_rejected() {
    let err = StubOptions::new("a", "10").from_env_with(env(&[(ENV_PLUGIN_SOCKET, "three")]));
    assert!(matches!(
        err,
        Err(StubError::InvalidEnv {
            var: ENV_PLUGIN_SOCKET,
            ..
        })
    ));
    for idx in ["1", "100", "a1", ""] {
        let err = StubOptions::new("nri-align", idx).validate();
        assert!(matches!(err, Err(StubError::InvalidIndex(_))), "{idx:?}");
    }
    for name in ["", "a b", "x/y"] {
        let err = StubOptions::new(name, "10").validate();
        assert!(matches!(err, Err(StubError::InvalidName(_))), "{name:?}");
    }
}
