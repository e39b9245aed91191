use std::time::Duration;

use super::{format, parse};

#[test]
fn units_and_their_sums_are_read() {
    assert_eq!(parse("90s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
    assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse(" 2d "), Ok(Duration::from_secs(172_800)));
    assert_eq!(parse("1s500ms"), Ok(Duration::from_millis(1500)));
}

#[test]
fn bare_numbers_unknown_units_and_junk_are_refused_with_why() {
    for (text, why) in [
        ("300", "without a unit"),
        ("5x", "unknown unit"),
        ("m", "number before"),
        ("", "empty"),
        ("1.5h", "fraction"),
        ("-5s", "number before"),
        ("99999999999999999999s", "too large"),
        ("9999999999999999d", "too long"),
    ] {
        let err = parse(text).expect_err(text);
        assert!(err.contains(why), "{text}: {err}");
    }
    let long = parse(&"1s".repeat(20)).expect_err("too long");
    assert!(long.contains("longer than"), "{long}");
}

#[test]
fn what_is_formatted_reads_back_the_same() {
    for d in [
        Duration::from_secs(90),
        Duration::from_secs(3600 + 1800),
        Duration::from_millis(1500),
        Duration::from_secs(86_400 * 3 + 7),
        Duration::ZERO,
    ] {
        assert_eq!(parse(&format(d)), Ok(d), "{}", format(d));
    }
    assert_eq!(format(Duration::from_secs(5400)), "1h30m");
}
