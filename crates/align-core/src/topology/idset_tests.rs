use super::*;

#[test]
fn list_format_round_trips() {
    for s in ["", "0", "0-3", "0-3,8,10-11", "63-65,127-128,1023"] {
        let set = IdSet::parse_list(s).expect("parse");
        assert_eq!(set.to_string(), s);
    }
    assert_eq!(IdSet::parse_list(" 1 , 3-4\n").expect("parse").len(), 3);
}

#[test]
fn bad_lists_are_errors() {
    for s in ["a", "3-1", "1-", ",", "99999999"] {
        assert!(IdSet::parse_list(s).is_err(), "{s} should fail");
    }
    // A megabyte list (a config value, a sysfs file) is not echoed whole.
    let huge = format!("0,{}x", "1,".repeat(500_000));
    let msg = IdSet::parse_list(&huge).expect_err("bad").to_string();
    assert!(msg.len() < 1200, "{} bytes", msg.len());
    assert!(msg.contains("(1000003 bytes)"), "{msg}");
}

#[test]
fn a_long_list_of_repeated_ranges_parses_in_linear_time() {
    // 80 KB of the widest range: inserted id by id this took tens of seconds.
    let huge = "0-1048575,".repeat(8_000);
    let started = std::time::Instant::now();
    let set = IdSet::parse_list(huge.trim_end_matches(',')).expect("parse");
    assert_eq!(set.len(), MAX_ID as usize);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // Overlapping, touching, unsorted and single ids merge as the id-by-id loop did.
    let set = IdSet::parse_list("70-130,5,0-3,4,64-69,200,131").expect("parse");
    assert_eq!(set.to_string(), "0-5,64-131,200");
    assert_eq!(IdSet::parse_list("63").expect("one").to_string(), "63");
    assert_eq!(IdSet::parse_list("0-63").expect("word").len(), 64);
}

#[test]
fn a_list_longer_than_the_hosts_ids_need_is_refused_before_parsing() {
    // Every id below 256 written alone: the longest list such a host can need.
    let every: Vec<String> = (0..256).map(|i| i.to_string()).collect();
    let every = every.join(",");
    assert!(every.len() <= IdSet::longest_list(256));
    assert_eq!(
        IdSet::parse_list_below(&every, 256).expect("fits").len(),
        256
    );
    let long = format!("0-255{}", ",0".repeat(IdSet::longest_list(256)));
    let e = IdSet::parse_list_below(&long, 256).expect_err("too long");
    assert!(e.reason.starts_with("longer than any list"), "{e}");
    assert!(IdSet::parse_list_below("256", 256).is_err());
    assert_eq!(IdSet::longest_list(10), 10 * 2 + 16);
    assert_eq!(IdSet::longest_list(100), 10 * 2 + 90 * 3 + 16);
}

#[test]
fn set_algebra() {
    let a: IdSet = "0-7".parse().expect("a");
    let b: IdSet = "4-11".parse().expect("b");
    assert_eq!(a.intersection(&b).to_string(), "4-7");
    assert_eq!(a.union(&b).to_string(), "0-11");
    assert_eq!(a.difference(&b).to_string(), "0-3");
    assert_eq!(a.intersection_len(&b), 4);
    assert!(a.intersection(&b).is_subset(&a));
    assert!(!a.is_disjoint(&b));
    let mut c = a.clone();
    c.subtract(&b);
    assert_eq!(c, a.difference(&b));
    assert_eq!(a.difference(&a), IdSet::new());
}

#[test]
fn trailing_zero_words_do_not_make_sets_differ() {
    use std::hash::{BuildHasher, RandomState};
    let mut a: IdSet = "1,200".parse().expect("a");
    a.remove(200);
    let b: IdSet = "1".parse().expect("b");
    assert_eq!(a, b);
    let h = RandomState::new();
    assert_eq!(h.hash_one(&a), h.hash_one(&b));
    let mut e: IdSet = "130".parse().expect("e");
    e.subtract(&"130".parse().expect("same"));
    assert_eq!(e, IdSet::new());
    assert_ne!(a, IdSet::new());
}

#[test]
fn ids_beyond_the_bound_are_refused_in_both_serialised_forms() {
    // Unbounded, `[4294967295]` would allocate 512 MiB and abort.
    let e = serde_json::from_str::<IdSet>("[0, 4294967295]").expect_err("refused");
    assert!(e.to_string().contains("too large"), "{e}");
    assert!(serde_json::from_str::<IdSet>(&format!("[{MAX_ID}]")).is_err());
    assert!(serde_json::from_str::<IdSet>("\"0-4294967295\"").is_err());
    let ok: IdSet = serde_json::from_str(&format!("[1, {}]", MAX_ID - 1)).expect("ok");
    assert_eq!(ok.len(), 2);
}

proptest::proptest! {
    #[test]
    fn runs_are_the_ids_grouped_by_consecutive_ones(
        ids in proptest::collection::btree_set(0u32..700, 0..300),
    ) {
        let set: IdSet = ids.iter().copied().collect();
        let mut expected: Vec<(u32, u32)> = Vec::new();
        for id in &ids {
            match expected.last_mut() {
                Some((_, hi)) if *hi + 1 == *id => *hi = *id,
                _ => expected.push((*id, *id)),
            }
        }
        proptest::prop_assert_eq!(set.runs().collect::<Vec<_>>(), expected.clone());
        let text = expected
            .iter()
            .map(|(lo, hi)| if lo == hi { lo.to_string() } else { format!("{lo}-{hi}") })
            .collect::<Vec<_>>()
            .join(",");
        proptest::prop_assert_eq!(set.to_string(), text);
    }
}
