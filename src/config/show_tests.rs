use super::*;

#[test]
fn the_written_configuration_parses_back_to_itself() {
    let texts = [
        "",
        "policy: single-numa-node\nscope: pod\nreserved_cpus: \"0-1,4\"\ngpu_mode: remap\n\
         allow_device_annotations: true\nfull_pcpus_only: true\nexempt_namespaces: [kube-system]\n\
         isolated_namespaces: [rt]\nexclusive_annotation_namespaces: [batch]\n\
         podresources_timeout_ms: 700\ntrust_visible_devices_env: true\n\
         cri_socket: /run/k3s/containerd/containerd.sock\nstate_dir: /tmp/s\nstate_fsync: true\n\
         replace_offlined_cpus: true\nverify_remote_memory_threshold: 70\n\
         metrics_address: \"127.0.0.1:9464\"\nlog_format: json\nlog_level: debug\n\
         plugin_idx: \"07\"\nevict_refused_after: 1h30m\nnrt: {publish: false, node_name: w1, gpu_resource: null, \
         rdma_nic_resource: rdma/hca, resync_seconds: 30, take_over_foreign: true}\n",
        "podresources_socket: \"\"\ncri_socket: \"\"\nleave_to_others: [mems, cpus]\n",
    ];
    for text in texts {
        let c = Config::parse(text, "t").expect("valid");
        let yaml = c.to_yaml();
        let back = Config::parse(&yaml, "written").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        assert_eq!(back, c, "{yaml}");
    }
    let defaults = Config::default().to_yaml();
    assert!(defaults.starts_with("policy: best-effort\n"), "{defaults}");
    assert!(defaults.contains("\nnrt:\n  publish: true\n"), "{defaults}");
}

/// A value for each key, or none: every shape a key takes (lists, nulls, the empty string
/// that turns a feature off, every enum value).
fn any_config_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    use proptest::sample::select;
    let pick = |key: &'static str, values: &'static [&'static str]| {
        proptest::option::of(select(values))
            .prop_map(move |v| v.map(|v| format!("{key}: {v}\n")).unwrap_or_default())
    };
    let keys = vec![
        pick(
            "policy",
            &["none", "best-effort", "restricted", "single-numa-node"],
        ),
        pick("scope", &["container", "pod"]),
        pick("reserved_cpus", &["\"\"", "\"0\"", "\"0-1,3\""]),
        pick("gpu_mode", &["keep", "remap"]),
        pick("scheduler_choice", &["required", "preferred"]),
        pick(
            "numa_choice",
            &["best-fit", "most-allocated", "least-allocated"],
        ),
        pick("allow_device_annotations", &["true", "false"]),
        pick("full_pcpus_only", &["true", "false"]),
        pick("exclusive_headroom", &["0", "2", "4096"]),
        pick(
            "mempolicy",
            &[
                "none",
                "bind",
                "interleave",
                "preferred-many",
                "weighted-interleave",
            ],
        ),
        pick("cpu_spread", &["by-device", "even", "pack"]),
        pick("resize_shrink", &["admitted", "any"]),
        pick("exempt_namespaces", &["[]", "[kube-system, monitoring]"]),
        pick("exclusive_annotation_namespaces", &["[]", "[batch]"]),
        pick("isolated_namespaces", &["[]", "[rt]"]),
        pick(
            "podresources_socket",
            &["\"\"", "/var/lib/kubelet/pod-resources/kubelet.sock"],
        ),
        pick(
            "podresources_resources",
            &["[nvidia.com/gpu]", "[rdma/*, nvidia.com/mig-*]"],
        ),
        pick("podresources_timeout_ms", &["1", "300", "700"]),
        pick("trust_visible_devices_env", &["true", "false"]),
        pick(
            "trusted_schedulers",
            &["[]", "[koordinator]", "[crane, koordinator]"],
        ),
        pick(
            "cri_socket",
            &["\"\"", "null", "/run/k3s/containerd/containerd.sock"],
        ),
        pick(
            "cdi_spec_dirs",
            &["[]", "[/etc/cdi]", "[/etc/cdi, /var/run/cdi]"],
        ),
        pick("leave_to_others", &["[]", "[cpus]", "[mems, devices]"]),
        pick("create_dev_char_links", &["true", "false"]),
        pick("state_dir", &["null", "/var/lib/nri-align"]),
        pick("state_fsync", &["true", "false"]),
        pick("exclusive_cpu_quota", &["disable", "keep"]),
        pick("replace_offlined_cpus", &["true", "false"]),
        pick("verify_remote_memory_threshold", &["0", "50", "99"]),
        pick(
            "metrics_address",
            &["null", "\"\"", "\"127.0.0.1:9464\"", "\"[::1]:1\""],
        ),
        pick("log_format", &["text", "json"]),
        pick("log_level", &["null", "debug", "\"nri_align=trace\""]),
        pick("plugin_idx", &["null", "\"07\"", "\"99\""]),
        pick("evict_refused_after", &["null", "10m", "1h30m"]),
        pick(
            "nrt",
            &[
                "{}",
                "{publish: false}",
                "{node_name: w1, gpu_resource: null, rdma_nic_resource: rdma/hca, \
                 resync_seconds: 30, take_over_foreign: true}",
            ],
        ),
    ];
    keys.prop_map(|lines| lines.concat())
}

proptest::proptest! {
    #[test]
    fn any_configuration_written_out_parses_back_to_itself(text in any_config_text()) {
        let c = Config::parse(&text, "t").expect("valid");
        let yaml = c.to_yaml();
        let back = Config::parse(&yaml, "written").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        proptest::prop_assert_eq!(back, c, "{}", yaml);
    }
}

#[test]
fn the_key_list_is_what_the_parser_takes_and_config_show_writes() {
    use crate::config::keys::{CONFIG_KEYS, NRT_KEYS};
    // serde lists every field it takes when it refuses one it does not (the daemon's message
    // is cut for the log: read the full list from the parser itself).
    let full = serde_yaml_ng::from_str::<crate::config::RawConfig>("zzz: 1\n")
        .expect_err("unknown")
        .to_string();
    let list = full.split("expected one of ").nth(1).expect("a list");
    let mut taken: Vec<&str> = list
        .split(", ")
        .map(|k| k.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_'))
        .filter(|k| !k.is_empty())
        .collect();
    taken.sort_unstable();
    let mut ours: Vec<&str> = CONFIG_KEYS.to_vec();
    ours.sort_unstable();
    assert_eq!(taken, ours, "{full}");
    // Every key is written (PodResources on, as by default), in the list's order.
    let written = Config::default().to_yaml();
    let top: Vec<&str> = written
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('-'))
        .filter_map(|l| l.split(':').next())
        .collect();
    assert_eq!(top, CONFIG_KEYS.to_vec(), "{written}");
    let nrt: Vec<&str> = written
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| !l.starts_with(' ') && !l.starts_with('-'))
        .filter_map(|l| l.split(':').next())
        .collect();
    assert_eq!(nrt, NRT_KEYS.to_vec(), "{written}");
}

#[test]
fn an_unknown_key_names_the_nearest_one() {
    let err = Config::parse("polcy: none\n", "t")
        .expect_err("typo")
        .to_string();
    assert!(err.ends_with("; did you mean `policy`?"), "{err}");
    let err = Config::parse("nrt: {publsh: false}\n", "t")
        .expect_err("typo")
        .to_string();
    assert!(err.ends_with("; did you mean `publish`?"), "{err}");
    // Nothing near: no guess.
    let err = Config::parse("colour: red\n", "t")
        .expect_err("unknown")
        .to_string();
    assert!(!err.contains("did you mean"), "{err}");
}
