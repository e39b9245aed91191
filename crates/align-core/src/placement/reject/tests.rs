use std::sync::Arc;

use super::*;
use crate::placement::policy::Policy;
use crate::placement::resolve::resolve;
use crate::placement::test_requests::request;
use crate::topology::testing::TopologyBuilder;
use crate::topology::CpuSet;

/// The refusal of 6 exclusive CPUs on two nodes of four, searched on `allowed` under a policy
/// that sets no width (`usize::MAX`).
fn refusal(allowed: &[bool]) -> String {
    let topo = Arc::new(TopologyBuilder::new().sockets(2).cores(4).build());
    let ledger = Ledger::new(topo, CpuSet::new());
    let config = PlacementConfig {
        policy: Policy::BestEffort,
        ..PlacementConfig::default()
    };
    let r = resolve(&ledger, &config, &request(1, 6)).expect("resolved");
    let need = Need {
        cpus: 6,
        ..Need::default()
    };
    let shape = Shape {
        pin: None,
        limit: usize::MAX,
    };
    unalignable(
        &ledger,
        &r,
        &numa::caps(&ledger, false),
        allowed,
        &shape,
        &need,
        &crate::placement::reject::given::Fixed {
            gpus: &[],
            nics: &[],
            keep: false,
        },
    )
    .to_string()
}

#[test]
fn an_unbounded_width_is_worded_never_printed_as_a_number() {
    let everywhere = refusal(&[true, true]);
    assert!(
        everywhere.contains("fit any number of NUMA nodes"),
        "{everywhere}"
    );
    let one = refusal(&[false, true]);
    assert!(one.contains("fit the allowed NUMA node 1"), "{one}");
    for msg in [everywhere, one] {
        assert!(
            !msg.contains(&usize::MAX.to_string()) && !msg.contains(&u64::MAX.to_string()),
            "{msg}"
        );
    }
}
