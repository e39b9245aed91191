use super::*;
use std::os::unix::fs::PermissionsExt;

fn args(config: Option<PathBuf>, state: PathBuf) -> RunArgs {
    RunArgs {
        config,
        socket: PathBuf::from("/nonexistent.sock"),
        idx: None,
        host_root: None,
        nvml_lib: None,
        state_dir: Some(state),
        log_level: Some("warn".into()),
        kubeconfig: None,
        node_name: None,
        eviction_stand_ins: false,
    }
}

#[test]
fn node_name_comes_from_the_flag_config_env_then_hostname() {
    let host = || Some("Worker-7".to_string());
    let env = || Some("from-env".to_string());
    assert_eq!(
        node_name(Some("flag"), Some("cfg"), env(), host),
        Ok("flag".into())
    );
    assert_eq!(node_name(None, Some("cfg"), env(), host), Ok("cfg".into()));
    assert_eq!(node_name(None, None, env(), host), Ok("from-env".into()));
    assert_eq!(
        node_name(None, None, Some(" ".into()), host),
        Ok("worker-7".into())
    );
    let err = node_name(None, None, None, || Some("under_score".into())).expect_err("bad");
    assert!(
        err.contains("\"under_score\" (from the hostname)") && err.contains("--node-name"),
        "{err}"
    );
    assert!(node_name(None, None, None, || None).is_err());
}

#[test]
fn publishing_is_off_without_api_access_or_when_configured_off() {
    let t = tempfile::tempdir().expect("tmp");
    let topo = Arc::new(crate::topology::testing::TopologyBuilder::new().build());
    let mut a = args(None, t.path().join("s"));
    // The test process is not in a pod (no service account token at the fixed path).
    if ApiAccess::detect(None).is_none() {
        let plan = NrtPlan::prepare(&a, &Config::default(), &topo, t.path()).expect("ok");
        assert!(plan.is_none());
    }
    a.kubeconfig = Some(t.path().join("missing.kubeconfig"));
    let off = Config::parse("nrt: {publish: false}", "t").expect("cfg");
    assert!(NrtPlan::prepare(&a, &off, &topo, t.path())
        .expect("off")
        .is_none());
    // Asked for with a kubeconfig that is not there: an error naming the file.
    let err = NrtPlan::prepare(&a, &Config::default(), &topo, t.path())
        .err()
        .expect("missing kubeconfig");
    assert!(format!("{err:#}").contains("missing.kubeconfig"), "{err:#}");
}

#[test]
fn prepare_reads_config_and_state_dir() {
    let t = tempfile::tempdir().expect("tmp");
    let cfg = t.path().join("c.yaml");
    std::fs::write(&cfg, "plugin_idx: \"07\"\npolicy: restricted\n").expect("write");
    let p = prepare(&args(Some(cfg), t.path().join("state"))).expect("prepared");
    assert_eq!(p.idx, "07");
    assert!(t.path().join("state").is_dir());
    assert_eq!(p.host_root, PathBuf::from("/"));
}

#[test]
fn a_second_daemon_on_the_same_state_dir_is_refused_at_start() {
    let t = tempfile::tempdir().expect("tmp");
    let first = prepare(&args(None, t.path().join("state"))).expect("first");
    let err = prepare(&args(None, t.path().join("state"))).expect_err("second");
    assert!(format!("{err:#}").contains("another nri-align"), "{err:#}");
    drop(first);
    assert!(prepare(&args(None, t.path().join("state"))).is_ok());
}

#[test]
fn prepare_refuses_world_writable_config_and_bad_idx() {
    let t = tempfile::tempdir().expect("tmp");
    let cfg = t.path().join("c.yaml");
    std::fs::write(&cfg, "").expect("write");
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let err = prepare(&args(Some(cfg.clone()), t.path().join("s"))).expect_err("refused");
    assert!(format!("{err:#}").contains("world-writable"), "{err:#}");
    // Group-writable too: anyone in the group could rewrite the policy.
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o664)).expect("chmod");
    let err = prepare(&args(Some(cfg), t.path().join("s"))).expect_err("refused");
    assert!(format!("{err:#}").contains("group-writable"), "{err:#}");
    let mut a = args(None, t.path().join("s"));
    a.idx = Some("100".into());
    assert!(format!("{:#}", prepare(&a).expect_err("idx")).contains("two digits"));
}
