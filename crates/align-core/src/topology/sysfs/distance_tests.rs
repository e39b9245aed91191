use super::*;

#[test]
fn rows_are_checked_against_the_kernels_rules() {
    assert_eq!(check_row("10 21", 0, 2), Ok(vec![10, 21]));
    assert_eq!(check_row("21 10", 1, 2), Ok(vec![21, 10]));
    for (text, i, n) in [
        ("10", 0, 2),
        ("10 21 31", 0, 2),
        ("10 x", 0, 2),
        ("10 -1", 0, 2),
        ("21 10", 0, 2),
        ("10 5", 0, 2),
        ("", 0, 2),
    ] {
        assert!(check_row(text, i, n).is_err(), "{text:?} accepted");
    }
}
