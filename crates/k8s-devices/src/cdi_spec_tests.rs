use super::*;

/// A per-claim spec as the NVIDIA DRA driver writes it (`k8s.gpu.nvidia.com-claim_<uid>.yaml`):
/// spec-level control nodes and env, one device per GPU named `<claimUID>-gpu-<minor>`.
const NVIDIA_CLAIM_YAML: &str = r#"
cdiVersion: 0.5.0
kind: k8s.gpu.nvidia.com/claim
devices:
- name: 6f1a0c5e-1111-2222-3333-444455556666-gpu-1
  containerEdits:
    env:
    - NVIDIA_VISIBLE_DEVICES=1
    deviceNodes:
    - path: /dev/nvidia1
      hostPath: /dev/nvidia1
containerEdits:
  env:
  - NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64
  deviceNodes:
  - path: /dev/nvidiactl
  - path: /dev/nvidia-uvm
  mounts:
  - hostPath: /usr/lib64/libcuda.so.1
    containerPath: /usr/lib64/libcuda.so.1
    options: [ro, nosuid, nodev, bind]
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, update-ldcache]
"#;

#[test]
fn nvidia_claim_spec_in_yaml_parses_with_both_levels_of_edits() {
    let s = parse(NVIDIA_CLAIM_YAML.as_bytes(), Format::Yaml).expect("parses");
    assert_eq!(s.kind, "k8s.gpu.nvidia.com/claim");
    assert_eq!(s.devices.len(), 1);
    let d = &s.devices[0];
    assert_eq!(d.container_edits.device_nodes[0].host(), "/dev/nvidia1");
    assert_eq!(d.container_edits.env, ["NVIDIA_VISIBLE_DEVICES=1"]);
    let paths: Vec<&str> = s
        .container_edits
        .device_nodes
        .iter()
        .map(DeviceNode::host)
        .collect();
    assert_eq!(paths, ["/dev/nvidiactl", "/dev/nvidia-uvm"]);
    assert_eq!(s.container_edits.mounts[0].options.len(), 4);
    assert_eq!(s.container_edits.hooks.len(), 1);
    // A name starting with a digit needs 0.5.0.
    assert_eq!(required_version(&s), "0.5.0");
}

#[test]
fn generic_vendor_spec_in_json_with_net_devices_needs_1_1_0() {
    let json = |version: &str| {
        format!(
            r#"{{"cdiVersion": "{version}", "kind": "example.com/accel",
              "devices": [{{"name": "fn0", "containerEdits": {{
                 "deviceNodes": [{{"path": "/dev/accel/accel0", "type": "c", "major": 261, "minor": 0}}],
                 "netDevices": [{{"hostInterfaceName": "ens5f0", "name": "net1"}}]}}}}]}}"#
        )
    };
    let s = parse(json("1.1.0").as_bytes(), Format::Json).expect("1.1.0 parses");
    let n = &s.devices[0].container_edits.device_nodes[0];
    assert_eq!((n.kind.as_str(), n.major, n.minor), ("c", 261, 0));
    assert_eq!(
        s.devices[0].container_edits.net_devices[0].host_interface_name,
        "ens5f0"
    );
    assert_eq!(
        parse(json("v1.1.0").as_bytes(), Format::Json).map(|_| ()),
        Ok(())
    );
    let old = parse(json("1.0.0").as_bytes(), Format::Json).expect_err("netDevices in 1.0.0");
    assert!(matches!(old, SpecError::Version { .. }), "{old}");
}

#[test]
fn every_accepted_version_parses_and_others_are_refused() {
    for v in VERSIONS {
        let text = format!(
            "cdiVersion: \"{v}\"\nkind: vendor.com/dev\ndevices:\n- name: d0\n  containerEdits:\n    deviceNodes:\n    - path: /dev/vendor0\n"
        );
        let s = parse(text.as_bytes(), Format::Yaml).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(s.devices[0].name, "d0", "{v}");
    }
    for v in ["0.1.0", "0.2.0", "1.2.0", "", "latest"] {
        let text = format!("cdiVersion: \"{v}\"\nkind: vendor.com/dev\ndevices:\n- name: d0\n");
        let e = parse(text.as_bytes(), Format::Yaml).expect_err(v);
        assert!(matches!(e, SpecError::Version { .. }), "{v}: {e}");
    }
}

#[test]
fn fields_newer_than_the_declared_version_are_refused() {
    // hostPath is 0.5.0; annotations and dotted classes 0.6.0; mount type 0.4.0.
    let cases = [
        ("0.4.0", "kind: v.com/c\ndevices:\n- name: a\n  containerEdits:\n    deviceNodes:\n    - path: /dev/x\n      hostPath: /dev/y\n"),
        ("0.5.0", "kind: v.com/c.d\ndevices:\n- name: a\n"),
        ("0.5.0", "kind: v.com/c\nannotations: {a: b}\ndevices:\n- name: a\n"),
        ("0.3.0", "kind: v.com/c\ndevices:\n- name: a\n  containerEdits:\n    mounts:\n    - {hostPath: /a, containerPath: /b, type: bind}\n"),
        ("0.4.0", "kind: v.com/c\ndevices:\n- name: 0a\n"),
    ];
    for (v, body) in cases {
        let text = format!("cdiVersion: \"{v}\"\n{body}");
        let e = parse(text.as_bytes(), Format::Yaml).expect_err(body);
        assert!(matches!(e, SpecError::Version { .. }), "{body}: {e}");
    }
}

#[test]
fn malformed_specs_are_refused_with_a_typed_error() {
    let bad: [(&[u8], Format); 7] = [
        (b"{not json", Format::Json),
        (b"cdiVersion: [", Format::Yaml),
        (b"cdiVersion: 0.6.0\nkind: novendor\ndevices:\n- name: a\n", Format::Yaml),
        (b"cdiVersion: 0.6.0\nkind: v.com/c\ndevices: []\n", Format::Yaml),
        (b"cdiVersion: 0.6.0\nkind: v.com/c\ndevices:\n- name: -bad\n", Format::Yaml),
        (
            b"cdiVersion: 0.6.0\nkind: v.com/c\ndevices:\n- name: a\n  containerEdits:\n    deviceNodes:\n    - path: dev/x\n",
            Format::Yaml,
        ),
        (b"{\"cdiVersion\": \"0.6.0\", \"devices\": []}", Format::Json),
    ];
    for (bytes, format) in bad {
        assert!(
            parse(bytes, format).is_err(),
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
    let huge = vec![b' '; MAX_SPEC_BYTES + 1];
    assert!(matches!(
        parse(&huge, Format::Json),
        Err(SpecError::TooLarge { .. })
    ));
}

#[test]
fn formats_come_from_the_extension() {
    assert_eq!(
        Format::of("k8s.gpu.nvidia.com-claim_abc.yaml"),
        Some(Format::Yaml)
    );
    assert_eq!(Format::of("vendor.yml"), Some(Format::Yaml));
    assert_eq!(Format::of("vendor.json"), Some(Format::Json));
    assert_eq!(Format::of("vendor.json.tmp"), None);
    assert_eq!(split_kind("a.com/b"), Some(("a.com", "b")));
    assert_eq!(split_kind("a.com/"), None);
}

/// The two shapes of alias bomb, inside a spec that is otherwise valid: under the size cap,
/// refused before anything is expanded.
#[test]
fn specs_whose_aliases_expand_beyond_their_size_are_refused() {
    // One long env entry anchored once and aliased by every device (a 300 KiB string aliased
    // 185,000 times took a daemon to 2.9 GiB; this is the same shape, smaller).
    let mut long = format!(
        "cdiVersion: 0.5.0\nkind: v.com/c\nx: &e \"A={}\"\ndevices:\n",
        "x".repeat(256 << 10)
    );
    for i in 0..3_000 {
        long.push_str(&format!(
            "- name: d{i}\n  containerEdits:\n    env: [*e, *e, *e, *e, *e, *e, *e, *e]\n"
        ));
    }
    assert!(long.len() <= MAX_SPEC_BYTES, "{} bytes", long.len());
    // Nested aliases: a few hundred bytes for 10^9 env entries.
    let mut laughs = "cdiVersion: 0.5.0\nkind: v.com/c\nl0: &l0 [\"A=b\", \"A=b\", \"A=b\", \"A=b\", \"A=b\", \"A=b\", \"A=b\", \"A=b\", \"A=b\", \"A=b\"]\n".to_string();
    for i in 1..=8 {
        let row = vec![format!("*l{}", i - 1); 10].join(", ");
        laughs.push_str(&format!("l{i}: &l{i} [{row}]\n"));
    }
    laughs.push_str("devices:\n- name: a\n  containerEdits:\n    env: *l8\n");
    for text in [long, laughs] {
        let err = parse(text.as_bytes(), Format::Yaml).expect_err("a bomb");
        assert!(matches!(err, SpecError::Expansion(_)), "{err}");
        assert!(err.to_string().contains("YAML aliases"), "{err}");
    }
}
