use super::*;

#[test]
fn numa_choice_defaults_to_best_fit() {
    let c = Config::parse("numa_choice: least-allocated\n", "t").expect("valid");
    assert_eq!(c.placement.numa_choice, NumaChoice::LeastAllocated);
    let c = Config::parse("", "t").expect("empty");
    assert_eq!(c.placement.numa_choice, NumaChoice::BestFit);
    let err = Config::parse("numa_choice: spread\n", "t")
        .expect_err("unknown value")
        .to_string();
    assert!(err.contains("most-allocated"), "{err}");
}

#[test]
fn exclusive_headroom_defaults_to_off_and_is_bounded() {
    let c = Config::parse("", "t").expect("empty");
    assert_eq!(c.placement.exclusive_headroom, 0);
    let c = Config::parse("exclusive_headroom: 8\n", "t").expect("valid");
    assert_eq!(c.placement.exclusive_headroom, 8);
    let err = Config::parse("exclusive_headroom: 5000\n", "t")
        .expect_err("too large")
        .to_string();
    assert!(err.contains("exclusive_headroom 5000"), "{err}");
    assert!(Config::parse("exclusive_headroom: -1\n", "t").is_err());
}

#[test]
fn scheduler_choice_defaults_to_required_and_names_a_bad_value() {
    let c = Config::parse("scheduler_choice: preferred\n", "t").expect("valid");
    assert_eq!(c.placement.scheduler_choice, SchedulerChoiceMode::Preferred);
    let c = Config::parse("", "t").expect("empty");
    assert_eq!(c.placement.scheduler_choice, SchedulerChoiceMode::Required);
    let err = Config::parse("scheduler_choice: maybe\n", "t")
        .expect_err("unknown value")
        .to_string();
    assert!(
        err.contains("scheduler_choice") && err.contains("preferred"),
        "{err}"
    );
}

#[test]
fn empty_file_is_all_defaults_with_nothing_reserved() {
    let c = Config::parse("", "t").expect("empty ok");
    assert_eq!(c, Config::default());
    assert!(c.placement.reserved_cpus.is_empty());
    assert_eq!(c.placement.policy, Policy::BestEffort);
    assert_eq!(c.metrics_address, None);
    // GPUs are kept as the kubelet allocated them unless remapping is asked for.
    assert_eq!(c.placement.gpu_mode, GpuMode::Keep);
    let remap = Config::parse("gpu_mode: remap\n", "t").expect("remap ok");
    assert_eq!(remap.placement.gpu_mode, GpuMode::Remap);
}

#[test]
fn every_key_is_read() {
    let text = "policy: single-numa-node\nscope: pod\nreserved_cpus: \"0-1\"\ngpu_mode: remap\n\
            allow_device_annotations: true\nfull_pcpus_only: true\nexempt_namespaces: [kube-system]\n\
            state_dir: /tmp/s\nmetrics_address: \"127.0.0.1:9464\"\nlog_format: json\n\
            log_level: debug\nplugin_idx: \"07\"\ncreate_dev_char_links: false\n";
    let c = Config::parse(text, "t").expect("valid");
    assert_eq!(c.placement.policy, Policy::SingleNumaNode);
    assert_eq!(c.placement.scope, Scope::Pod);
    assert_eq!(c.placement.reserved_cpus.to_string(), "0-1");
    assert_eq!(c.placement.gpu_mode, GpuMode::Remap);
    assert!(c.placement.allow_device_annotations && c.placement.full_pcpus_only);
    assert!(c.is_exempt("kube-system") && !c.is_exempt("default"));
    assert_eq!(c.state_dir, Some(PathBuf::from("/tmp/s")));
    assert_eq!(c.metrics_address.map(|a| a.port()), Some(9464));
    assert_eq!(c.log_format, LogFormat::Json);
    assert_eq!(c.plugin_idx.as_deref(), Some("07"));
    assert!(!c.create_dev_char_links);
    assert!(
        Config::default().create_dev_char_links,
        "links are made by default"
    );
}

#[test]
fn the_cri_socket_is_absolute_or_turned_off() {
    assert_eq!(Config::parse("", "t").expect("ok").cri_socket, None);
    let c = Config::parse("cri_socket: /run/k3s/containerd/containerd.sock\n", "t");
    assert_eq!(
        c.expect("ok").cri_socket,
        Some(PathBuf::from("/run/k3s/containerd/containerd.sock"))
    );
    let off = Config::parse("cri_socket: \"\"\n", "t").expect("ok");
    assert_eq!(off.cri_socket, Some(PathBuf::new()));
    let err = Config::parse("cri_socket: run/containerd.sock\n", "f.yaml").expect_err("rel");
    assert!(
        err.to_string()
            .contains("cri_socket run/containerd.sock must be an absolute path"),
        "{err}"
    );
}

#[test]
fn unknown_keys_and_bad_values_are_named() {
    let err = Config::parse("polcy: none\n", "f.yaml").expect_err("typo");
    let msg = err.to_string();
    assert!(
        msg.contains("f.yaml") && msg.contains("unknown field `polcy`"),
        "{msg}"
    );
    let err = Config::parse("policy: single-numa\n", "f.yaml").expect_err("bad value");
    assert!(err.to_string().contains("single-numa"), "{err}");
    let err = Config::parse("plugin_idx: \"7\"\n", "f").expect_err("idx");
    assert!(err.to_string().contains("two digits"), "{err}");
    let err = Config::parse("metrics_address: localhost\n", "f").expect_err("addr");
    assert!(err.to_string().contains("HOST:PORT"), "{err}");
}

#[test]
fn huge_files_and_values_are_refused_and_never_echoed_whole() {
    // Half a megabyte: under the file limit, so parsing and validation see it.
    let big = "z".repeat(1 << 19);
    for text in [
        format!("policy: {big}\n"),
        format!("metrics_address: \"{big}\"\n"),
        format!("plugin_idx: \"{big}\"\n"),
        format!("{big}: 1\n"),
    ] {
        let msg = Config::parse(&text, "f.yaml").expect_err("bad").to_string();
        assert!(msg.len() < 700, "{} bytes: {}", msg.len(), &msg[..300]);
    }
    let msg = Config::parse(&format!("policy: {big}\n"), "f.yaml")
        .expect_err("bad")
        .to_string();
    assert!(msg.contains("expected one of"), "{msg}");
    let msg = Config::parse(&format!("plugin_idx: \"{big}\"\n"), "f")
        .expect_err("bad")
        .to_string();
    assert!(
        msg.contains("(524288 bytes) must be exactly two digits"),
        "{msg}"
    );

    // Over the size limit: refused before parsing, from a file or from the runtime.
    let huge = format!("# {}\n", "c".repeat(untrusted::MAX_CONFIG_BYTES as usize));
    let msg = Config::from_dropin(&huge, false)
        .expect_err("huge")
        .to_string();
    assert!(msg.contains("more than the 1048576-byte limit"), "{msg}");
    let t = tempfile::tempdir().expect("tmp");
    let path = t.path().join("c.yaml");
    std::fs::write(&path, &huge).expect("write");
    let msg = Config::load(&path).expect_err("huge file").to_string();
    assert!(msg.contains("larger than 1048576 bytes"), "{msg}");
}

#[test]
fn reserved_cpus_must_exist_and_leave_some() {
    let topo = Topology {
        cpus: (0..4)
            .map(|id| crate::topology::Cpu {
                id,
                package: 0,
                die: 0,
                core: id,
                numa_node: 0,
                l3_group: None,
                thread_siblings: [id].into_iter().collect(),
            })
            .collect(),
        ..Default::default()
    };
    let ok = Config::parse("reserved_cpus: \"0\"", "t").expect("p");
    assert!(ok.validate_for(&topo).is_ok());
    let all = Config::parse("reserved_cpus: \"0-3\"", "t").expect("p");
    assert!(all.validate_for(&topo).is_err());
    let missing = Config::parse("reserved_cpus: \"6\"", "t").expect("p");
    let msg = missing
        .validate_for(&topo)
        .expect_err("offline")
        .to_string();
    assert!(msg.contains("not online (6)"), "{msg}");
}

#[test]
fn dropin_applies_only_without_a_file_and_is_still_checked() {
    let c = Config::from_dropin("policy: restricted", false).expect("ok");
    assert_eq!(c.map(|c| c.placement.policy), Some(Policy::Restricted));
    assert_eq!(
        Config::from_dropin("policy: restricted", true).expect("ok"),
        None
    );
    assert!(Config::from_dropin("bogus: 1", true).is_err());
    assert_eq!(Config::from_dropin("", false).expect("ok"), None);
}

#[test]
fn cdi_spec_dirs_default_to_the_cdi_dirs_and_must_be_absolute() {
    let d = Config::parse("", "t").expect("ok").cdi_spec_dirs;
    assert_eq!(
        d,
        [PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")]
    );
    let c = Config::parse("cdi_spec_dirs: [/run/cdi]\n", "t").expect("ok");
    assert_eq!(c.cdi_spec_dirs, [PathBuf::from("/run/cdi")]);
    let off = Config::parse("cdi_spec_dirs: []\n", "t").expect("ok");
    assert!(off.cdi_spec_dirs.is_empty());
    assert!(Config::parse("cdi_spec_dirs: [etc/cdi]\n", "t").is_err());
    assert_eq!(
        Config::default().restart_only_changes(&off),
        vec!["cdi_spec_dirs"]
    );
}

#[test]
fn restart_only_keys_are_reported() {
    let a = Config::default();
    let b = Config::parse("policy: none\nmetrics_address: \"127.0.0.1:1\"", "t").expect("p");
    assert_eq!(a.restart_only_changes(&b), vec!["metrics_address"]);
}

#[test]
fn evict_refused_after_is_off_by_default_read_as_a_duration_and_bounded() {
    assert_eq!(
        Config::parse("", "t").expect("ok").evict_refused_after,
        None
    );
    let c = Config::parse("evict_refused_after: 10m\n", "t").expect("ok");
    assert_eq!(
        c.evict_refused_after,
        Some(std::time::Duration::from_secs(600))
    );
    assert_eq!(
        Config::default().restart_only_changes(&c),
        vec!["evict_refused_after"]
    );
    for (text, why) in [
        ("evict_refused_after: 600\n", "without a unit"),
        ("evict_refused_after: 500ms\n", "from 1s to 30d"),
        ("evict_refused_after: 31d\n", "from 1s to 30d"),
    ] {
        let err = Config::parse(text, "t").expect_err(text).to_string();
        assert!(
            err.contains("evict_refused_after") && err.contains(why),
            "{err}"
        );
    }
}

#[test]
fn cpu_spread_defaults_to_by_device_and_names_the_valid_values() {
    use crate::placement::CpuSpread;
    let c = Config::parse("", "t").expect("empty");
    assert_eq!(c.placement.cpu_spread, CpuSpread::ByDevice);
    let c = Config::parse("cpu_spread: even\n", "t").expect("valid");
    assert_eq!(c.placement.cpu_spread, CpuSpread::Even);
    assert!(c.to_yaml().contains("cpu_spread: even"), "{}", c.to_yaml());
    let err = Config::parse("cpu_spread: sideways\n", "t")
        .expect_err("unknown value")
        .to_string();
    assert!(
        err.contains("by-device") && err.contains("even") && err.contains("pack"),
        "{err}"
    );
}

/// Both shapes of alias bomb in a configuration file, under the 1 MiB cap: refused with the
/// file named, before anything is expanded (the daemon aborted at ~2.9 GiB on the first).
#[test]
fn a_config_file_whose_aliases_expand_beyond_its_size_is_refused() {
    let t = tempfile::tempdir().expect("tmp");
    let mut long = format!("x: &s \"{}\"\nexempt_namespaces:\n", "n".repeat(256 << 10));
    for _ in 0..50_000 {
        long.push_str("- *s\n");
    }
    let mut laughs = format!("exempt_namespaces: &l0 [{}]\n", ["\"lol\""; 10].join(", "));
    for i in 1..=9 {
        let row = vec![format!("*l{}", i - 1); 10].join(", ");
        laughs.push_str(&format!("x{i}: &l{i} [{row}]\n"));
    }
    for (name, text) in [("long.yaml", long), ("laughs.yaml", laughs)] {
        assert!(text.len() as u64 <= crate::untrusted::MAX_CONFIG_BYTES);
        let path = t.path().join(name);
        std::fs::write(&path, &text).expect("write");
        let err = Config::load(&path).expect_err("a bomb").to_string();
        assert!(err.contains(name) && err.contains("YAML aliases"), "{err}");
        assert!(!err.contains('\n'), "{err}");
        // As the runtime's drop-in too.
        assert!(Config::from_dropin(&text, false).is_err());
    }
}

#[test]
fn resize_shrink_defaults_to_admitted_and_names_the_valid_values() {
    use crate::placement::ResizeShrink;
    let c = Config::parse("", "t").expect("empty");
    assert_eq!(c.placement.resize_shrink, ResizeShrink::Admitted);
    let c = Config::parse("resize_shrink: any\n", "t").expect("valid");
    assert_eq!(c.placement.resize_shrink, ResizeShrink::Any);
    assert!(
        c.to_yaml().contains("resize_shrink: any"),
        "{}",
        c.to_yaml()
    );
    let err = Config::parse("resize_shrink: some\n", "t")
        .expect_err("unknown value")
        .to_string();
    assert!(err.contains("admitted") && err.contains("any"), "{err}");
}
