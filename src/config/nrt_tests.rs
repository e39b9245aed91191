use crate::config::Config;

#[test]
fn defaults_publish_gpus_under_the_nvidia_name_and_no_nics() {
    let c = Config::parse("", "t").expect("empty");
    assert!(c.nrt.publish);
    assert_eq!(c.nrt.node_name, None);
    assert_eq!(c.nrt.resources.gpu.as_deref(), Some("nvidia.com/gpu"));
    assert_eq!(c.nrt.resources.rdma_nic, None);
    assert_eq!(c.nrt.resync_seconds, 60);
    assert!(!c.nrt.take_over_foreign);
    assert!(!c.nrt_settings("n").take_over_foreign);
    // `nrt:` alone (null) is the defaults too.
    assert_eq!(Config::parse("nrt:\n", "t").expect("null").nrt, c.nrt);
}

#[test]
fn every_key_is_read_and_null_turns_a_device_off() {
    let c = Config::parse(
        "nrt:\n  publish: false\n  node_name: worker-a.example\n  gpu_resource: null\n  \
             rdma_nic_resource: intel.com/sriov_rdma\n  resync_seconds: 5\n  \
             take_over_foreign: true\n",
        "t",
    )
    .expect("valid");
    assert!(!c.nrt.publish);
    assert_eq!(c.nrt.node_name.as_deref(), Some("worker-a.example"));
    assert_eq!(c.nrt.resources.gpu, None);
    assert_eq!(
        c.nrt.resources.rdma_nic.as_deref(),
        Some("intel.com/sriov_rdma")
    );
    assert_eq!(c.nrt.resync_seconds, 5);
    assert!(c.nrt.take_over_foreign);
    // It reaches the publisher with the settings, so a reload changes it.
    assert!(c.nrt_settings("n").take_over_foreign);
    assert!(c
        .restart_only_changes(&Config::parse("", "t").expect("empty"))
        .iter()
        .all(|k| *k != "nrt.take_over_foreign"));
}

#[test]
fn bad_values_name_the_key_and_what_would_do() {
    let err = |text: &str| Config::parse(text, "f.yaml").expect_err(text).to_string();
    let e = err("nrt:\n  node_name: Worker_A\n");
    assert!(
        e.contains("nrt.node_name \"Worker_A\"") && e.contains("f.yaml"),
        "{e}"
    );
    let e = err("nrt:\n  gpu_resource: gpu\n");
    assert!(
        e.contains("nrt.gpu_resource \"gpu\"") && e.contains("nvidia.com/gpu"),
        "{e}"
    );
    let e = err("nrt:\n  rdma_nic_resource: \"rdma/\"\n");
    assert!(e.contains("nrt.rdma_nic_resource"), "{e}");
    let e = err("nrt:\n  resync_seconds: 0\n");
    assert!(e.contains("out of range"), "{e}");
    let e = err("nrt:\n  take_over_foreign: yes please\n");
    assert!(e.contains("take_over_foreign"), "{e}");
    let e = err("nrt:\n  publsh: true\n");
    assert!(e.contains("unknown field `publsh`"), "{e}");
}
