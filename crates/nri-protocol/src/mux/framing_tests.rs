use super::*;

fn header(len: u32, stream: u32, kind: u8, flags: u8) -> Vec<u8> {
    let mut h = len.to_be_bytes().to_vec();
    h.extend_from_slice(&stream.to_be_bytes());
    h.extend_from_slice(&[kind, flags]);
    h
}

#[test]
fn requests_pass_in_pieces_of_any_size() {
    let mut stream = header(5, 1, 1, 0);
    stream.extend_from_slice(b"hello");
    stream.extend(header(0, 3, 1, 0));
    stream.extend(header(2, 5, 3, 0x1));
    stream.extend_from_slice(b"ok");
    for piece in [1, 3, 10, 11, 100] {
        let mut f = RequestFraming::new();
        for chunk in stream.chunks(piece) {
            f.feed(chunk).expect("valid stream");
        }
        assert_eq!(f.messages(), 3, "pieces of {piece}");
    }
}

#[test]
fn headers_no_client_sends_are_refused_and_stay_refused() {
    let cases = [
        (header(0xdead_beef, 1, 1, 0), "more than the limit"),
        (
            header(TTRPC_MAX_PAYLOAD + 1, 1, 1, 0),
            "more than the limit",
        ),
        (header(4, 1, 2, 0), "message type 2"),
        (header(4, 1, 0, 0), "message type 0"),
        (header(4, 2, 1, 0), "stream id 2"),
        (header(4, 0, 1, 0), "stream id 0"),
        (header(4, 1, 1, 0x80), "flags 0x80"),
    ];
    for (bytes, says) in cases {
        let mut f = RequestFraming::new();
        let err = f.feed(&bytes).expect_err(says);
        assert!(err.to_string().contains(says), "{err}");
        assert_eq!(f.feed(&header(0, 1, 1, 0)), Err(err));
    }
    // A full-size message is fine.
    let mut f = RequestFraming::new();
    f.feed(&header(TTRPC_MAX_PAYLOAD, 7, 1, 0)).expect("limit");
}
