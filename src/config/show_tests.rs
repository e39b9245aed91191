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
