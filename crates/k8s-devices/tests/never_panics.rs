//! Every parser takes any string without panicking, and valid names round-trip (the same
//! properties a fuzzer checks, run as property tests on stable Rust).

use k8s_devices::{cdi, nvidia, rdma};
use proptest::prelude::*;

proptest! {
    #[test]
    fn parsers_take_any_input(s in ".{0,200}") {
        let _ = cdi::parse_qualified_name(&s);
        let _ = cdi::split_device(&s);
        let _ = cdi::parse_annotations([("cdi.k8s.io/a_b", s.as_str())]);
        let _ = cdi::annotation_key(&s, "id");
        let _ = nvidia::parse_visible_devices(Some(&s));
        let _ = nvidia::parse_volume_mount(&s);
        let _ = nvidia::split_replica_id(&s);
        let _ = nvidia::parse_device_node(&s);
        let _ = rdma::parse_device_node(&s);
    }

    #[test]
    fn valid_qualified_names_round_trip(
        vendor in "[a-z]([a-z0-9._-]{0,10}[a-z0-9])?",
        class in "[a-z]([a-z0-9._-]{0,10}[a-z0-9])?",
        name in "[A-Za-z0-9]([A-Za-z0-9._:-]{0,20}[A-Za-z0-9])?",
    ) {
        let device = format!("{vendor}/{class}={name}");
        let q = cdi::parse_qualified_name(&device).expect("valid by construction");
        prop_assert_eq!(q.to_string(), device);
    }

    #[test]
    fn visible_device_lists_round_trip(ids in proptest::collection::vec(0u32..64, 1..8)) {
        let value = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        match nvidia::parse_visible_devices(Some(&value)).expect("valid") {
            nvidia::VisibleDevices::List(l) => {
                let back: Vec<String> = l.iter().map(ToString::to_string).collect();
                prop_assert_eq!(back.join(","), value);
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }
}
