use super::*;

#[test]
fn a_megabyte_value_is_echoed_as_its_start_and_length() {
    let big = "x".repeat(1 << 20);
    assert_eq!(
        excerpt(&big),
        format!("{}… (1048576 bytes)", "x".repeat(64))
    );
    assert_eq!(
        quoted(&big),
        format!("\"{}\"… (1048576 bytes)", "x".repeat(64))
    );
    assert_eq!(excerpt("short"), "short");
    assert_eq!(quoted("a\"b"), "\"a\\\"b\"");
    // Cut on a character boundary: 'é' is two bytes.
    let e = excerpt(&"é".repeat(100));
    assert!(
        e.starts_with(&"é".repeat(32)) && e.ends_with("(200 bytes)"),
        "{e}"
    );
}

#[test]
fn long_messages_keep_their_start_and_end() {
    let m = format!(
        "policy: unknown variant `{}`, expected one of `none` at line 1",
        "y".repeat(5000)
    );
    let cut = message(&m);
    assert!(cut.len() < MAX_MESSAGE_BYTES + 64, "{}", cut.len());
    assert!(cut.starts_with("policy: unknown variant `yyy"), "{cut}");
    assert!(cut.ends_with("expected one of `none` at line 1"), "{cut}");
    assert!(cut.contains("bytes left out"), "{cut}");
    assert_eq!(message("short"), "short");
}

#[test]
fn reads_stop_at_the_limit() {
    let t = tempfile::tempdir().expect("tmp");
    let path = t.path().join("f");
    std::fs::write(&path, "abcdef").expect("write");
    assert_eq!(read_to_string(&path, 6).expect("fits"), "abcdef");
    let err = read_to_string(&path, 5).expect_err("too large");
    assert_eq!(err.to_string(), "it is larger than the 5-byte limit");
    // A device without end is read only up to the limit.
    let err = read_to_string(Path::new("/dev/zero"), 1000).expect_err("endless");
    assert!(matches!(err, ReadError::TooLarge { limit: 1000 }), "{err}");
}

#[test]
fn control_characters_are_escaped_and_the_rest_left_alone() {
    assert_eq!(printable("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
    assert_eq!(
        printable("over\rwrite\n\t\x07\x7f"),
        "over\\rwrite\\n\\t\\x07\\x7f"
    );
    // C1 controls (a single-character CSI in some terminals).
    assert_eq!(printable("a\u{9b}31m"), "a\\u{9b}31m");
    // Quotes, backslashes and non-ASCII text as they are, and not copied.
    let plain = "ns/pod-\"é\"\\x";
    assert!(matches!(printable(plain), Cow::Borrowed(s) if s == plain));
}
