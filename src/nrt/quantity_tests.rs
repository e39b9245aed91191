use super::*;

#[test]
fn bytes_use_the_largest_exact_binary_suffix() {
    assert_eq!(bytes(0), "0");
    assert_eq!(bytes(512), "512");
    assert_eq!(bytes(1536), "1536");
    assert_eq!(bytes(536_870_912), "512Mi");
    assert_eq!(bytes(1 << 30), "1Gi");
    assert_eq!(bytes(3 << 40), "3Ti");
    assert_eq!(bytes(1 << 60), "1Ei");
    assert_eq!(bytes(1 << 63), "8Ei");
    assert_eq!(bytes(511 * 1024 * 1024 + 4096), "523268Ki");
    assert_eq!(count(0), "0");
    assert_eq!(count(224), "224");
}

#[test]
fn parse_reads_every_suffix_and_round_trips_what_we_write() {
    for n in [
        0u64,
        1,
        1023,
        1024,
        1536,
        536_870_912,
        1 << 30,
        (1 << 62) + 1024,
    ] {
        assert_eq!(parse(&bytes(n)), Some(n as i128), "{n}");
    }
    assert_eq!(parse("100m"), Some(1));
    assert_eq!(parse("1500m"), Some(2));
    assert_eq!(parse("2000m"), Some(2));
    assert_eq!(parse("1.5Gi"), Some(1_610_612_736));
    assert_eq!(parse("2k"), Some(2000));
    assert_eq!(parse("1M"), Some(1_000_000));
    assert_eq!(parse("2e3"), Some(2000));
    assert_eq!(parse("1E2"), Some(100));
    assert_eq!(parse(".5"), Some(1));
    assert_eq!(parse("+7"), Some(7));
    assert_eq!(parse("-3Ki"), Some(-3072));
    for bad in ["", "Gi", "1.2.3", "1Xi", "abc", "1e", "1e999", "--1"] {
        assert_eq!(parse(bad), None, "{bad:?}");
    }
}

#[test]
fn int_or_string_accepts_both_json_forms() {
    #[derive(Deserialize)]
    struct Q {
        #[serde(deserialize_with = "de_int_or_string")]
        q: String,
    }
    let a: Q = serde_json::from_str(r#"{"q": 20}"#).expect("int");
    let b: Q = serde_json::from_str(r#"{"q": "20Gi"}"#).expect("string");
    assert_eq!((a.q.as_str(), b.q.as_str()), ("20", "20Gi"));
}
