use std::time::Instant;

use super::*;

/// The "billion laughs": `depth` levels of lists of `width` aliases of the level below,
/// 10^9 strings from well under a KiB of text.
fn laughs(depth: usize, width: usize) -> String {
    let mut text = format!("l0: &l0 [{}]\n", vec!["\"lol\""; width].join(", "));
    for i in 1..=depth {
        let row = vec![format!("*l{}", i - 1); width].join(", ");
        text.push_str(&format!("l{i}: &l{i} [{row}]\n"));
    }
    text
}

/// One long string anchored once and aliased many times (the shape that took a daemon to
/// 2.9 GiB from a 1 MiB file).
fn long_string_aliased(string: usize, aliases: usize) -> String {
    let mut text = format!("s: &s \"{}\"\nl:\n", "x".repeat(string));
    for _ in 0..aliases {
        text.push_str("- *s\n");
    }
    text
}

#[test]
fn nested_aliases_are_refused_without_expanding() {
    let text = laughs(9, 10);
    assert!(text.len() < 1024, "{} bytes", text.len());
    let start = Instant::now();
    let err = check(&text).expect_err("a billion laughs");
    assert_eq!(err.len, text.len());
    assert_eq!(err.limit, expansion_limit(text.len()));
    assert!(err.to_string().contains("YAML aliases"), "{err}");
    // Stops at the budget: far from the 10^9 nodes (a generous bound for a debug build on a
    // busy machine).
    assert!(start.elapsed().as_secs() < 10);
}

#[test]
fn a_long_string_aliased_many_times_is_refused() {
    let text = long_string_aliased(64 << 10, 10_000);
    assert!(check(&text).is_err());
    // In a second document too: every document counts.
    let two = format!("a: 1\n---\n{text}");
    assert!(check(&two).is_err());
    assert!(check_bytes(two.as_bytes()).is_err());
}

#[test]
fn ordinary_yaml_and_a_few_aliases_pass() {
    assert_eq!(check(""), Ok(()));
    assert_eq!(check("policy: none\nreserved_cpus: \"0-3\"\n"), Ok(()));
    // Anchors used the way people use them: a shared map merged a few times.
    let shared = "base: &b {a: 1, b: [x, y]}\none: *b\ntwo: *b\nthree: {<<: *b, c: 2}\n";
    assert_eq!(check(shared), Ok(()));
    // Small nesting stays within the budget.
    assert_eq!(check(&laughs(3, 10)), Ok(()));
    // Tagged values are walked too.
    assert_eq!(check("x: !custom {a: [1, 2]}\n"), Ok(()));
}

#[test]
fn a_large_document_without_aliases_passes() {
    // A list of a million one-character items: the most nodes text of its size can hold.
    let text = format!("[{}]", vec!["a"; 1 << 20].join(","));
    assert_eq!(check(&text), Ok(()));
    let long = format!("s: \"{}\"\n", "y".repeat(4 << 20));
    assert_eq!(check(&long), Ok(()));
}

#[test]
fn text_that_is_not_yaml_is_left_to_the_parser() {
    assert_eq!(check("a: [unclosed\n"), Ok(()));
    assert_eq!(check("*undefined\n"), Ok(()));
    assert_eq!(check_bytes(&[0xff, 0xfe, b':']), Ok(()));
}
