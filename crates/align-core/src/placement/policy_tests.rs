use super::*;

#[test]
fn names_round_trip_and_unknown_names_list_the_choices() {
    for p in ["none", "best-effort", "restricted", "single-numa-node"] {
        assert_eq!(p.parse::<Policy>().expect("known").to_string(), p);
    }
    let err = "single-numa".parse::<Policy>().expect_err("unknown");
    assert_eq!(
            err.to_string(),
            "unknown policy \"single-numa\"; expected one of: none best-effort restricted single-numa-node"
        );
}
