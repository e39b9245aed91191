//! Text from users and from the runtime: placement annotations, the configuration (file and
//! the runtime's drop-in) and `simulate` workloads.

use std::collections::BTreeMap;
use std::sync::Arc;

use nri_align::config::Config;
use nri_align::placement::annotations::effective;
use nri_align::placement::PlacementConfig;
use nri_align::simulate::{replay, Strategy, Workload};
use nri_align::topology::testing::TopologyBuilder;

use crate::harness::{check_error, fuzz, Outcome};

/// Annotations, one `key=value` per line, for containers `app` and `c`, with device
/// annotations allowed and refused.
#[test]
fn fuzz_annotation_parser() {
    let configs = [
        PlacementConfig::default(),
        PlacementConfig {
            allow_device_annotations: true,
            ..PlacementConfig::default()
        },
    ];
    fuzz("annotations", 8 << 10, |input| {
        let text = String::from_utf8_lossy(input);
        let annotations: BTreeMap<String, String> = text
            .lines()
            .map(|l| match l.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (l.to_string(), String::new()),
            })
            .collect();
        let mut outcome = Outcome::Rejected;
        for config in &configs {
            for container in ["app", "c"] {
                match effective(&annotations, container, config) {
                    Ok(_) => outcome = Outcome::Accepted,
                    Err(err) => check_error("annotations", &err.to_string()),
                }
            }
        }
        outcome
    });
}

/// The configuration, as a file would give it and as a runtime's drop-in.
#[test]
fn fuzz_config_parser() {
    fuzz("config", 16 << 10, |input| {
        let text = String::from_utf8_lossy(input);
        let parsed = Config::parse(&text, "fuzz.yaml");
        // The drop-in path parses the same way and agrees.
        let dropin = Config::from_dropin(&text, false);
        assert_eq!(parsed.is_ok(), dropin.is_ok(), "file and drop-in disagree");
        match parsed {
            Ok(_) => Outcome::Accepted,
            Err(err) => {
                check_error("config", &err.to_string());
                Outcome::Rejected
            }
        }
    });
}

/// `simulate` workloads: parsed, and when they parse, replayed by both strategies on a
/// four-node host (quantities, events and pod references are only checked there).
#[test]
fn fuzz_workload_parser() {
    let topo = Arc::new(TopologyBuilder::new().sockets(2).numa_per_socket(2).build());
    fuzz("workload", 16 << 10, |input| {
        let text = String::from_utf8_lossy(input);
        let workload = match Workload::parse(&text) {
            Ok(w) => w,
            Err(err) => {
                check_error("workload", &err.to_string());
                return Outcome::Rejected;
            }
        };
        let mut outcome = Outcome::Rejected;
        for strategy in [Strategy::NriAlign, Strategy::Kubelet] {
            match replay(
                topo.clone(),
                PlacementConfig::default(),
                &workload,
                strategy,
            ) {
                Ok(_) => outcome = Outcome::Accepted,
                Err(err) => check_error("replay", &err.to_string()),
            }
        }
        outcome
    });
}
