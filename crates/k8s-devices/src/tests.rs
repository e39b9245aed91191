use super::excerpt;

#[test]
fn excerpt_cuts_long_and_multibyte_input() {
    assert_eq!(excerpt("short"), "short");
    let long = "é".repeat(100);
    let e = excerpt(&long);
    assert!(e.ends_with("(200 bytes)"), "{e}");
    assert!(e.len() < 90);
}
