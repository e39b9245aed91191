use super::*;

#[test]
fn parses_crictl_yaml() {
    let text = "runtime-endpoint: unix:///tmp/c.sock\nimage-endpoint: unix:///tmp/i.sock\ntimeout: 30\ndebug: false\npull-image-on-create: false\n";
    let cfg = FileConfig::parse(text, Path::new("x.yaml")).expect("parse");
    assert_eq!(cfg.runtime_endpoint.as_deref(), Some("unix:///tmp/c.sock"));
    assert_eq!(cfg.image_endpoint.as_deref(), Some("unix:///tmp/i.sock"));
    assert_eq!(cfg.timeout, Some(Duration::from_secs(30)));
}

#[test]
fn empty_and_bad_yaml() {
    assert_eq!(
        FileConfig::parse("", Path::new("x")).expect("empty"),
        FileConfig::default()
    );
    assert!(matches!(
        FileConfig::parse("- a\n- b\n", Path::new("x")),
        Err(ConfigError::Parse { .. })
    ));
    assert!(matches!(
        FileConfig::parse("timeout: [1]\n", Path::new("x")),
        Err(ConfigError::Parse { message, .. }) if message.contains("timeout")
    ));
    assert!(matches!(
        FileConfig::parse("runtime-endpoint: 3\n", Path::new("x")),
        Err(ConfigError::Parse { message, .. }) if message.contains("runtime-endpoint")
    ));
}

#[test]
fn timeouts() {
    assert_eq!(parse_timeout("2").expect("2"), Duration::from_secs(2));
    assert_eq!(
        parse_timeout("500ms").expect("ms"),
        Duration::from_millis(500)
    );
    assert_eq!(
        parse_timeout("1.5s").expect("s"),
        Duration::from_millis(1500)
    );
    assert_eq!(parse_timeout("2m").expect("m"), Duration::from_secs(120));
    assert!(parse_timeout("soon").is_err());
    assert!(parse_timeout("5d").is_err());
}

#[test]
fn endpoints() {
    assert_eq!(
        socket_path("unix:///run/c.sock").expect("u3"),
        PathBuf::from("/run/c.sock")
    );
    assert_eq!(
        socket_path("unix:/run/c.sock").expect("u1"),
        PathBuf::from("/run/c.sock")
    );
    assert_eq!(
        socket_path("/run/c.sock").expect("plain"),
        PathBuf::from("/run/c.sock")
    );
    assert!(socket_path("tcp://127.0.0.1:1234").is_err());
    assert!(socket_path("unix://").is_err());
}

#[test]
fn precedence_flag_over_file_over_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("crictl.yaml");
    std::fs::write(
        &cfg,
        "runtime-endpoint: unix:///from/file.sock\ntimeout: 7\n",
    )
    .expect("write");

    let file_only = Settings::resolve(&Overrides {
        config: Some(cfg.clone()),
        ..Default::default()
    })
    .expect("file");
    assert_eq!(file_only.runtime_socket, PathBuf::from("/from/file.sock"));
    assert_eq!(file_only.image_socket, PathBuf::from("/from/file.sock"));
    assert_eq!(file_only.timeout, Duration::from_secs(7));

    let flagged = Settings::resolve(&Overrides {
        config: Some(cfg),
        runtime_endpoint: Some("unix:///from/flag.sock".into()),
        timeout: Some("3s".into()),
        ..Default::default()
    })
    .expect("flag");
    assert_eq!(flagged.runtime_socket, PathBuf::from("/from/flag.sock"));
    assert_eq!(flagged.timeout, Duration::from_secs(3));
}

#[test]
fn named_config_must_exist() {
    let missing = Overrides {
        config: Some(PathBuf::from("/nonexistent/crictl.yaml")),
        ..Default::default()
    };
    assert!(matches!(
        Settings::resolve(&missing),
        Err(ConfigError::Read { .. })
    ));
}
