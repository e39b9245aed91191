use super::*;
use std::time::Duration;

#[test]
fn rfc3339_of_known_instants() {
    let at = |s| rfc3339(UNIX_EPOCH + Duration::from_secs(s));
    assert_eq!(at(0), "1970-01-01T00:00:00Z");
    assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(at(1_795_993_804), "2026-11-29T23:10:04Z");
}
