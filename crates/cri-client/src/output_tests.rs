use super::*;

#[test]
fn ids_are_truncated() {
    assert_eq!(short_id("0123456789abcdef0123"), "0123456789abc");
    assert_eq!(short_id("abc"), "abc");
}

#[test]
fn ages() {
    let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
    let ns = |s: u64| i64::try_from((1_000_000 - s) * 1_000_000_000).expect("fits");
    assert_eq!(age(ns(0), now), "Less than a second ago");
    assert_eq!(age(ns(5), now), "5 seconds ago");
    assert_eq!(age(ns(60), now), "About a minute ago");
    assert_eq!(age(ns(600), now), "10 minutes ago");
    assert_eq!(age(ns(3600), now), "About an hour ago");
    assert_eq!(age(ns(86_400 * 3), now), "3 days ago");
}

#[test]
fn table_pads_columns() {
    let t = table(
        &["ID", "NAME"],
        &[
            vec!["a".into(), "first".into()],
            vec!["bbbb".into(), "x".into()],
        ],
    );
    assert_eq!(t, "ID     NAME\na      first\nbbbb   x\n");
}

#[test]
fn log_lines() {
    let l = parse_log_line("2024-01-01T00:00:00.000000001Z stdout F hello world").expect("line");
    assert_eq!(l.stream, Stream::Stdout);
    assert!(l.full);
    assert_eq!(l.content, "hello world");
    let p = parse_log_line("2024-01-01T00:00:00Z stderr P part").expect("partial");
    assert_eq!(p.stream, Stream::Stderr);
    assert!(!p.full);
    let empty = parse_log_line("2024-01-01T00:00:00Z stdout F").expect("empty");
    assert_eq!(empty.content, "");
    assert!(parse_log_line("garbage").is_none());
    assert!(parse_log_line("ts stdin F x").is_none());
}

#[test]
fn tail_counts_full_entries() {
    let raw = [
        "t stdout F one",
        "t stdout P tw",
        "t stdout F o",
        "t stdout F three",
    ];
    let lines: Vec<_> = raw.iter().filter_map(|l| parse_log_line(l)).collect();
    let last2 = tail(lines.clone(), Some(2));
    let text: Vec<_> = last2.iter().map(|l| l.content).collect();
    assert_eq!(text, vec!["tw", "o", "three"]);
    assert_eq!(tail(lines.clone(), Some(0)).len(), 0);
    assert_eq!(tail(lines.clone(), None).len(), 4);
    assert_eq!(tail(lines, Some(10)).len(), 4);
}
