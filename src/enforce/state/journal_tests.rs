use super::*;

fn rec(cpus: &str) -> Record {
    let mut r = Record::default();
    r.assignment.cpus = cpus.parse().expect("cpus");
    r.applied_cpus = r.assignment.cpus.clone();
    r
}

fn log() -> Vec<u8> {
    let mut b = Vec::new();
    header(&mut b);
    put(&mut b, "a", &rec("0-1")).expect("put");
    put(&mut b, "b", &rec("2-1023")).expect("put");
    del(&mut b, "a").expect("del");
    put(&mut b, "c", &rec("4")).expect("put");
    b
}

#[test]
fn replay_applies_puts_and_dels_in_order() {
    let r = replay(&log()).expect("replay");
    assert_eq!(r.records.keys().collect::<Vec<_>>(), vec!["b", "c"]);
    assert_eq!((r.lines, r.torn), (4, 0));
    assert_eq!(r.records["b"].applied_cpus.len(), 1022);
    let text = String::from_utf8(log()).expect("utf8");
    assert!(
        text.contains(r#""cpus":"2-1023""#),
        "a shared container's CPUs are one list string: {text}"
    );
}

#[test]
fn a_torn_tail_is_dropped_and_damage_before_good_lines_is_refused() {
    let whole = log();
    // Cut inside the last line: its change is lost, the rest stays.
    let cut = &whole[..whole.len() - 5];
    let r = replay(cut).expect("replay");
    assert_eq!(r.records.keys().collect::<Vec<_>>(), vec!["b"]);
    assert_eq!(r.torn, 1);
    // Zeros where the last two lines were (a power loss): both dropped.
    let mut zeroed = whole.clone();
    let text = String::from_utf8(whole.clone()).expect("utf8");
    let third = text.match_indices('\n').nth(2).expect("lines").0 + 1;
    for b in &mut zeroed[third..] {
        if *b != b'\n' {
            *b = 0;
        }
    }
    let r = replay(&zeroed).expect("replay");
    assert_eq!(r.records.keys().collect::<Vec<_>>(), vec!["a", "b"]);
    assert_eq!(r.torn, 2);
    // A flipped byte in the middle: not trusted.
    let mut flipped = whole.clone();
    let second_line = text.find('\n').expect("header") + 30;
    flipped[second_line] ^= 0x20;
    let err = replay(&flipped).expect_err("damaged");
    assert!(err.contains("line 2 is damaged"), "{err}");
}

#[test]
fn other_files_and_layouts_are_refused() {
    let err = replay(b"nri-align state log 4\n").expect_err("newer");
    assert!(err.contains("layout 4"), "{err}");
    assert!(replay(b"{\"version\": 1}").is_err());
    assert!(replay(b"").is_err());
}
