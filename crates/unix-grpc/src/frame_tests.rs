//! Framing, status and header encoding.

use super::*;
use protobuf::well_known_types::wrappers::StringValue;

fn msg(s: &str) -> StringValue {
    let mut m = StringValue::new();
    m.value = s.into();
    m
}

#[test]
fn frame_round_trip() {
    let frame = encode_frame(&msg("containerd v2.1.9")).expect("encode");
    assert_eq!(frame[0], 0);
    assert_eq!(
        u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize,
        frame.len() - 5
    );
    let back: StringValue = decode_frame(frame).expect("decode");
    assert_eq!(back.value, "containerd v2.1.9");
}

#[test]
fn empty_message_is_a_bare_header() {
    let frame = encode_frame(&StringValue::new()).expect("encode");
    assert_eq!(&frame[..], &[0, 0, 0, 0, 0]);
    let back: StringValue = decode_frame(frame).expect("decode");
    assert_eq!(back, StringValue::new());
}

#[test]
fn truncated_and_compressed_frames_are_errors() {
    let frame = encode_frame(&msg("v1")).expect("encode");
    let short = frame.slice(..frame.len() - 1);
    assert!(
        matches!(decode_frame::<StringValue>(short), Err(GrpcError::Protocol(m)) if m.contains("announces"))
    );
    assert!(matches!(
        decode_frame::<StringValue>(Bytes::from_static(&[0, 0])),
        Err(GrpcError::Protocol(_))
    ));
    let mut compressed = BytesMut::from(&frame[..]);
    compressed[0] = 1;
    assert!(
        matches!(decode_frame::<StringValue>(compressed.freeze()), Err(GrpcError::Protocol(m)) if m.contains("compressed"))
    );
}

#[test]
fn announced_length_is_checked_before_buffering() {
    assert!(matches!(
        announced_len(&[0, 0, 0], 10, "response"),
        Ok(None)
    ));
    assert!(matches!(
        announced_len(&[0, 0, 0, 0, 10], 10, "response"),
        Ok(Some(10))
    ));
    assert!(matches!(
        announced_len(&[0, 0xff, 0xff, 0xff, 0xff], 16 << 20, "response"),
        Err(GrpcError::TooLarge {
            len: 4294967295,
            ..
        })
    ));
    assert!(matches!(
        announced_len(&[1, 0, 0, 0, 1], 10, "response"),
        Err(GrpcError::Protocol(_))
    ));
}

#[test]
fn percent_coding() {
    assert_eq!(percent_decode(b"plain"), "plain");
    assert_eq!(percent_decode(b"a%20b%3Ac"), "a b:c");
    assert_eq!(percent_decode(b"bad%zzescape%"), "bad%zzescape%");
    assert_eq!(percent_decode(b"%E2%9C%93"), "\u{2713}");
    for s in [
        "pod x in namespace y not found",
        "100%",
        "line\nbreak",
        "\u{2713} ok",
    ] {
        let enc = percent_encode(s);
        assert!(enc.bytes().all(|b| (0x20..=0x7e).contains(&b)), "{enc}");
        assert_eq!(percent_decode(enc.as_bytes()), s);
    }
}

#[test]
fn timeout_header() {
    assert_eq!(grpc_timeout(Duration::from_secs(2)), "2000m");
    assert_eq!(grpc_timeout(Duration::from_secs(200_000)), "200000S");
}

#[test]
fn status_parsing() {
    let mut h = http::HeaderMap::new();
    assert!(status_from(&h).is_none());
    h.insert("grpc-status", http::HeaderValue::from_static("0"));
    assert!(matches!(status_from(&h), Some(Ok(()))));
    h.insert("grpc-status", http::HeaderValue::from_static("2"));
    h.insert(
        "grpc-message",
        http::HeaderValue::from_static("plugin%20said%20no"),
    );
    match status_from(&h) {
        Some(Err(GrpcError::Status { code, message })) => {
            assert_eq!(code, 2);
            assert_eq!(message, "plugin said no");
        }
        other => panic!("unexpected {other:?}"),
    }
    let err = GrpcError::Status {
        code: 2,
        message: "x".into(),
    };
    assert_eq!(err.to_string(), "rpc error: code = Unknown desc = x");
    assert_eq!(err.code(), Some(Code::UNKNOWN));
}
