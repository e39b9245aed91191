//! Cases from cncf-tags/container-device-interface `pkg/parser/parser_test.go`
//! (`TestQualifiedName`) and `pkg/cdi/annotations_test.go` (`TestAnnotationKey`,
//! `TestParseAnnotation`), plus what the device plugins really send.

use super::*;

fn qn(v: &str, c: &str, n: &str) -> QualifiedName {
    QualifiedName {
        vendor: v.into(),
        class: c.into(),
        name: n.into(),
    }
}

#[test]
fn qualified_names_from_the_cdi_parser_tests() {
    let valid = [
        ("vendor.com/class=dev", qn("vendor.com", "class", "dev")),
        ("a/b=c", qn("a", "b", "c")),
        ("aa/b=cc", qn("aa", "b", "cc")),
        ("a/bb=cc", qn("a", "bb", "cc")),
        ("vendor.com/class=0", qn("vendor.com", "class", "0")),
        (
            "vendor1.com/class1=dev1",
            qn("vendor1.com", "class1", "dev1"),
        ),
        (
            "vendor1.com/class.subclass=dev1",
            qn("vendor1.com", "class.subclass", "dev1"),
        ),
        (
            "other-vendor1.com/class_1=dev_1",
            qn("other-vendor1.com", "class_1", "dev_1"),
        ),
        (
            "yet_another-vendor2.com/c-lass_2=dev_1:2.3",
            qn("yet_another-vendor2.com", "c-lass_2", "dev_1:2.3"),
        ),
    ];
    for (device, want) in valid {
        let got = parse_qualified_name(device).unwrap_or_else(|e| panic!("{device}: {e}"));
        assert_eq!(got, want, "{device}");
        assert_eq!(got.to_string(), device, "round trip");
        assert!(is_qualified_name(device));
    }
}

#[test]
fn parsable_but_invalid_names_from_the_cdi_parser_tests() {
    // (device, the split ParseDevice returns, the part that is invalid)
    let cases = [
        (
            "_invalid.com/class=dev",
            ("_invalid.com", "class", "dev"),
            Part::Vendor,
        ),
        (
            "invalid2.com-/class=dev",
            ("invalid2.com-", "class", "dev"),
            Part::Vendor,
        ),
        (
            "invalid3.com/_class=dev",
            ("invalid3.com", "_class", "dev"),
            Part::Class,
        ),
        (
            "invalid4.com/class_=dev",
            ("invalid4.com", "class_", "dev"),
            Part::Class,
        ),
        (
            "invalid5.com/class=-dev",
            ("invalid5.com", "class", "-dev"),
            Part::Name,
        ),
        (
            "invalid6.com/class=dev:",
            ("invalid6.com", "class", "dev:"),
            Part::Name,
        ),
        ("*.com/*dev=*gpu*", ("*.com", "*dev", "*gpu*"), Part::Vendor),
    ];
    for (device, split, bad) in cases {
        assert_eq!(split_device(device), Some(split), "{device}");
        match parse_qualified_name(device) {
            Err(CdiError::Invalid { part, .. }) => assert_eq!(part, bad, "{device}"),
            other => panic!("{device}: {other:?}"),
        }
        assert!(!is_qualified_name(device));
    }
}

#[test]
fn unqualified_names() {
    for device in [
        "",
        "/dev/nvidia0",
        "gpu0",
        "nvidia.com/gpu",
        "nvidia.com=0",
        "=0",
        "/gpu=0",
        "nvidia.com/=0",
        "nvidia.com/gpu=",
    ] {
        assert!(
            matches!(
                parse_qualified_name(device),
                Err(CdiError::Unqualified { .. })
            ),
            "{device:?}"
        );
    }
}

#[test]
fn names_the_device_plugins_really_send() {
    // NVIDIA device plugin, uuid and index device-id strategies, MIG index, "all".
    for (device, name) in [
        (
            "nvidia.com/gpu=GPU-8a0e7d6c-3d5b-4e8a-9f1a-0d7f2e1c5b3a",
            "GPU-8a0e7d6c-3d5b-4e8a-9f1a-0d7f2e1c5b3a",
        ),
        ("nvidia.com/gpu=0", "0"),
        ("nvidia.com/gpu=0:1", "0:1"),
        (
            "nvidia.com/gpu=MIG-1f1f6b8e-8a46-5b2c-9d0b-3c1d7b0e9e11",
            "MIG-1f1f6b8e-8a46-5b2c-9d0b-3c1d7b0e9e11",
        ),
        ("nvidia.com/gpu=all", "all"),
        ("nvidia.com/gdrcopy=all", "all"),
        // RDMA shared device plugin in CDI mode: the PCI address of the HCA.
        ("nvidia.com/net-rdma=0000:3b:00.0", "0000:3b:00.0"),
    ] {
        assert_eq!(
            parse_qualified_name(device).map(|q| q.name),
            Ok(name.to_string())
        );
    }
    // The old MIG form has '/' in the name: not a valid CDI name.
    assert!(!is_qualified_name("nvidia.com/gpu=MIG-GPU-8a0e7d6c/1/0"));
}

#[test]
fn non_ascii_and_oversized_input() {
    assert!(!is_qualified_name("nvidiä.com/gpu=0"));
    assert!(!is_qualified_name("nvidia.com/gpu=0é"));
    assert!(!is_qualified_name("nvidia.com/gpu=é0"));
    let huge = format!("nvidia.com/gpu={}", "a".repeat(MAX_INPUT_LEN));
    assert!(matches!(
        parse_qualified_name(&huge),
        Err(CdiError::TooLarge { .. })
    ));
    let msg = parse_qualified_name(&format!("x/y=-{}", "b".repeat(1000)))
        .expect_err("invalid")
        .to_string();
    assert!(msg.len() < 300, "error echoes the whole input: {msg}");
}

#[test]
fn annotation_keys_from_the_cdi_tests() {
    let bad = [
        ("", "device"),
        ("plugin", ""),
        ("_vendor.class", "device"),
        ("vendor.class", "device_"),
        ("ven.dor-cl+ass", "device"),
        ("vendor.class", "dev+ice"),
        (
            "123456789012345678901234567890123456789012345678901234567",
            "device",
        ),
    ];
    for (plugin, dev) in bad {
        assert!(annotation_key(plugin, dev).is_err(), "{plugin:?} {dev:?}");
    }
    assert_eq!(
        annotation_key("vendor.class", "device").as_deref(),
        Ok("cdi.k8s.io/vendor.class_device")
    );
    assert_eq!(
        annotation_key("v-e.n_d.or.cl-as_s", "d_e-v-i-c_e").as_deref(),
        Ok("cdi.k8s.io/v-e.n_d.or.cl-as_s_d_e-v-i-c_e")
    );
    assert_eq!(
        annotation_key("v-e.n_d.or.cl-as_s", "d-e/v/i/c-e").as_deref(),
        Ok("cdi.k8s.io/v-e.n_d.or.cl-as_s_d-e_v_i_c-e")
    );
    // The NVIDIA device plugin's key: plugin "nvidia-device-plugin", a random UUID per response.
    assert_eq!(
        annotation_key(
            "nvidia-device-plugin",
            "3b1d6b9e-1c1e-4a53-9a57-6f3f0c2b8d11"
        )
        .as_deref(),
        Ok("cdi.k8s.io/nvidia-device-plugin_3b1d6b9e-1c1e-4a53-9a57-6f3f0c2b8d11")
    );
    // The RDMA shared device plugin's key: AnnotationKey("nvidia.com", "net-rdma").
    assert_eq!(
        annotation_key("nvidia.com", "net-rdma").as_deref(),
        Ok("cdi.k8s.io/nvidia.com_net-rdma")
    );
}

#[test]
fn annotations_with_one_and_several_devices() {
    let annotations = [
        ("io.kubernetes.container.hash", "1a2b3c"),
        (
            "cdi.k8s.io/vendor.class_device",
            "vendor.com/device=one,vendor.com/device=two",
        ),
        (
            "cdi.k8s.io/vendor3.class2_device",
            "vendor3.com/device=three",
        ),
    ];
    let got = parse_annotations(annotations).expect("valid");
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].key, "cdi.k8s.io/vendor.class_device");
    assert_eq!(
        got[0].devices,
        vec![
            qn("vendor.com", "device", "one"),
            qn("vendor.com", "device", "two")
        ]
    );
    assert_eq!(got[1].devices, vec![qn("vendor3.com", "device", "three")]);
    assert_eq!(annotation_value(&got[0].devices), annotations[1].1);
}

#[test]
fn one_bad_device_fails_the_parse() {
    let annotations = [
        ("cdi.k8s.io/vendor1.class_device", "vendor1.com/device=ok"),
        (
            "cdi.k8s.io/vendor2.class_device",
            "vendor2.com/device=ok,not-a-cdi-device",
        ),
    ];
    assert!(matches!(
        parse_annotations(annotations),
        Err(CdiError::Unqualified { .. })
    ));
    // An empty value splits into one empty device: refused, as by ParseAnnotations.
    assert!(parse_annotations([("cdi.k8s.io/x_y", "")]).is_err());
}

#[test]
fn too_many_devices_is_an_error_not_an_allocation() {
    let value = vec!["v.com/c=d"; MAX_ENTRIES + 1].join(",");
    assert!(matches!(
        parse_annotations([("cdi.k8s.io/x_y", value.as_str())]),
        Err(CdiError::TooLarge { .. })
    ));
}
