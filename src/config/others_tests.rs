use super::*;
use crate::config::Config;

#[test]
fn an_absent_key_leaves_nothing_to_others() {
    let c = Config::parse("policy: best-effort\n", "test").expect("parses");
    assert!(c.leave_to_others.is_empty());
    assert!(c.leave_to_others.names().is_empty());
}

#[test]
fn the_listed_fields_are_left_and_only_those() {
    let c = Config::parse("leave_to_others: [cpus, devices, cpus]\n", "test").expect("parses");
    assert_eq!(
        c.leave_to_others,
        LeftToOthers {
            cpus: true,
            mems: false,
            devices: true
        }
    );
    assert_eq!(c.leave_to_others.names(), vec!["cpus", "devices"]);
}

#[test]
fn an_unknown_field_is_refused_with_its_name() {
    let e = Config::parse("leave_to_others: [cpus, hugepages]\n", "test")
        .expect_err("hugepages is not a field nri-align sets");
    assert!(e.to_string().contains("hugepages"), "{e}");
}
