//! Framing tests for the multiplexer, run against a raw in-memory peer.

use super::*;
use std::time::Duration;
use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};

const STEP: Duration = Duration::from_secs(5);

/// A multiplexer on one end of an in-memory pipe; the other end is driven by hand.
fn pair() -> (Mux, DuplexStream) {
    let (ours, raw) = duplex(1 << 16);
    (Mux::new(ours), raw)
}

fn frame(id: ConnId, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

async fn read_exactly(conn: &mut MuxConn, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    tokio::time::timeout(STEP, conn.read_exact(&mut buf))
        .await
        .expect("timed out reading")
        .expect("read failed");
    buf
}

#[tokio::test]
async fn header_is_big_endian_id_then_length() {
    let (mux, mut raw) = pair();
    let mut conn = mux.open(RUNTIME_SERVICE_CONN).unwrap();
    conn.write_all(b"hello").await.unwrap();
    let mut got = [0u8; HEADER_LEN + 5];
    tokio::time::timeout(STEP, raw.read_exact(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got[..4], &[0, 0, 0, 2]);
    assert_eq!(&got[4..8], &[0, 0, 0, 5]);
    assert_eq!(&got[8..], b"hello");
}

#[tokio::test]
async fn frame_split_across_many_writes_is_reassembled() {
    let (mux, mut raw) = pair();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let bytes = frame(PLUGIN_SERVICE_CONN, b"split-payload");
    for b in &bytes {
        raw.write_all(std::slice::from_ref(b)).await.unwrap();
        raw.flush().await.unwrap();
        tokio::task::yield_now().await;
    }
    assert_eq!(read_exactly(&mut conn, 13).await, b"split-payload");
}

#[tokio::test]
async fn interleaved_ids_reach_their_own_connection_in_order() {
    let (mux, mut raw) = pair();
    let mut plugin = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let mut runtime = mux.open(RUNTIME_SERVICE_CONN).unwrap();
    let mut wire = Vec::new();
    wire.extend(frame(1, b"p1-"));
    wire.extend(frame(2, b"r1-"));
    wire.extend(frame(1, b"p2-"));
    wire.extend(frame(2, b"r2"));
    wire.extend(frame(1, b"p3"));
    raw.write_all(&wire).await.unwrap();
    assert_eq!(read_exactly(&mut runtime, 5).await, b"r1-r2");
    assert_eq!(read_exactly(&mut plugin, 8).await, b"p1-p2-p3");
}

#[tokio::test]
async fn short_reads_return_the_rest_of_a_frame_later() {
    let (mux, mut raw) = pair();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    raw.write_all(&frame(1, b"abcdefgh")).await.unwrap();
    let mut small = [0u8; 3];
    let mut got = Vec::new();
    while got.len() < 8 {
        let n = tokio::time::timeout(STEP, conn.read(&mut small))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0 && n <= 3, "read {n} bytes into a 3-byte buffer");
        got.extend_from_slice(&small[..n]);
    }
    assert_eq!(got, b"abcdefgh");
}

#[tokio::test]
async fn unknown_and_reserved_ids_are_dropped() {
    let (mux, mut raw) = pair();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let mut wire = frame(7, b"nobody-listens");
    wire.extend(frame(0, b"reserved"));
    wire.extend(frame(1, b"ok"));
    raw.write_all(&wire).await.unwrap();
    assert_eq!(read_exactly(&mut conn, 2).await, b"ok");
    assert_eq!(mux.error(), None);
}

#[tokio::test]
async fn a_blocked_mux_keeps_what_the_peer_sent_first_for_connections_opened_later() {
    // The runtime side's race: the plugin may send RegisterPlugin the moment the socket is
    // accepted, before the runtime has opened connection 2.
    let (ours, mut raw) = duplex(1 << 16);
    let mux = Mux::blocked(ours);
    raw.write_all(&frame(RUNTIME_SERVICE_CONN, b"register"))
        .await
        .unwrap();
    // Give a reader that did not wait every chance to take (and drop) the frame.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut conn = mux.open(RUNTIME_SERVICE_CONN).unwrap();
    // Writing works while reading is held back.
    conn.write_all(b"hi").await.unwrap();
    let (id, payload) = tokio::time::timeout(STEP, read_frame(&mut raw))
        .await
        .unwrap()
        .unwrap()
        .expect("frame");
    assert_eq!((id, payload.as_slice()), (RUNTIME_SERVICE_CONN, &b"hi"[..]));
    mux.unblock();
    mux.unblock();
    assert_eq!(read_exactly(&mut conn, 8).await, b"register");
}

#[tokio::test]
async fn an_unblocked_mux_drops_what_came_before_the_connection_opened() {
    // The contrast that makes the test above mean something.
    let (mux, mut raw) = pair();
    raw.write_all(&frame(RUNTIME_SERVICE_CONN, b"early"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut conn = mux.open(RUNTIME_SERVICE_CONN).unwrap();
    raw.write_all(&frame(RUNTIME_SERVICE_CONN, b"late"))
        .await
        .unwrap();
    assert_eq!(read_exactly(&mut conn, 4).await, b"late");
}

#[tokio::test]
async fn closing_a_blocked_mux_ends_it_without_reading() {
    let (ours, _raw) = duplex(1 << 16);
    let mux = Mux::blocked(ours);
    mux.close();
    assert_eq!(
        tokio::time::timeout(STEP, mux.closed()).await.unwrap(),
        MuxError::Closed
    );
}

#[tokio::test]
async fn large_writes_are_split_at_the_frame_limit() {
    let (mux, mut raw) = pair();
    let mut conn = mux.open(RUNTIME_SERVICE_CONN).unwrap();
    let payload: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    conn.write_all(&payload).await.unwrap();

    let mut sizes = Vec::new();
    let mut joined = Vec::new();
    while joined.len() < payload.len() {
        let (id, chunk) = tokio::time::timeout(STEP, read_frame(&mut raw))
            .await
            .unwrap()
            .unwrap()
            .expect("frame");
        assert_eq!(id, RUNTIME_SERVICE_CONN);
        sizes.push(chunk.len());
        joined.extend(chunk);
    }
    assert_eq!(sizes, vec![4096, 4096, 1808]);
    assert_eq!(joined, payload);
}

#[tokio::test]
async fn concurrent_writers_never_mix_inside_a_frame() {
    let (mux, mut raw) = pair();
    let mut a = mux.open(1).unwrap();
    let mut b = mux.open(2).unwrap();
    let wa = tokio::spawn(async move {
        a.write_all(&vec![b'a'; 20_000]).await.unwrap();
        a
    });
    let wb = tokio::spawn(async move {
        b.write_all(&vec![b'b'; 20_000]).await.unwrap();
        b
    });
    let mut totals = [0usize; 3];
    while totals[1] + totals[2] < 40_000 {
        let (id, chunk) = read_frame(&mut raw).await.unwrap().expect("frame");
        let want = if id == 1 { b'a' } else { b'b' };
        assert!(chunk.len() <= MAX_WRITE_PAYLOAD);
        assert!(
            chunk.iter().all(|&c| c == want),
            "frame for {id} mixes data"
        );
        totals[id as usize] += chunk.len();
    }
    assert_eq!(totals[1..], [20_000, 20_000]);
    let _ = (wa.await.unwrap(), wb.await.unwrap());
}

#[tokio::test]
async fn truncated_payload_is_a_clear_error() {
    let (mux, mut raw) = pair();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let mut wire = frame(1, &[9u8; 100]);
    wire.truncate(HEADER_LEN + 10);
    raw.write_all(&wire).await.unwrap();
    drop(raw);
    let err = tokio::time::timeout(STEP, mux.closed()).await.unwrap();
    assert_eq!(
        err,
        MuxError::Truncated {
            part: "payload",
            got: 10,
            want: 100
        }
    );
    let mut buf = [0u8; 16];
    let read = conn.read(&mut buf).await.unwrap_err();
    assert_eq!(read.kind(), io::ErrorKind::UnexpectedEof);
    assert!(read.to_string().contains("10 of 100"), "{read}");
}

#[tokio::test]
async fn truncated_header_is_a_clear_error() {
    let (mux, mut raw) = pair();
    raw.write_all(&[0, 0, 0]).await.unwrap();
    drop(raw);
    let err = tokio::time::timeout(STEP, mux.closed()).await.unwrap();
    assert_eq!(
        err,
        MuxError::Truncated {
            part: "header",
            got: 3,
            want: HEADER_LEN
        }
    );
}

#[tokio::test]
async fn absurd_length_fails_without_allocating_it() {
    let (mux, mut raw) = pair();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    let mut header = 1u32.to_be_bytes().to_vec();
    header.extend_from_slice(&u32::MAX.to_be_bytes());
    raw.write_all(&header).await.unwrap();
    let err = tokio::time::timeout(STEP, mux.closed()).await.unwrap();
    assert_eq!(
        err,
        MuxError::Oversized {
            id: 1,
            len: u32::MAX as usize,
            max: MAX_READ_PAYLOAD
        }
    );
    let read = conn.read(&mut [0u8; 4]).await.unwrap_err();
    assert_eq!(read.kind(), io::ErrorKind::InvalidData);
    // A stopped multiplexer refuses writes instead of queueing them forever.
    assert!(conn.write_all(b"x").await.is_err());
}

#[tokio::test]
async fn peer_hangup_between_frames_is_eof() {
    let (mux, mut raw) = pair();
    let mut conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    raw.write_all(&frame(1, b"last")).await.unwrap();
    drop(raw);
    assert_eq!(read_exactly(&mut conn, 4).await, b"last");
    let mut rest = Vec::new();
    let n = tokio::time::timeout(STEP, conn.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 0);
    assert_eq!(mux.closed().await, MuxError::PeerClosed);
}

#[tokio::test]
async fn local_close_hangs_up_the_socket() {
    let (mux, mut raw) = pair();
    let _conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    mux.close();
    let mut buf = Vec::new();
    let n = tokio::time::timeout(STEP, raw.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 0);
    assert_eq!(mux.open(RUNTIME_SERVICE_CONN).err(), Some(MuxError::Closed));
}

#[tokio::test]
async fn ids_are_exclusive_and_reusable_after_drop() {
    let (mux, _raw) = pair();
    assert_eq!(mux.open(0).err(), Some(MuxError::ReservedId));
    let conn = mux.open(5).unwrap();
    assert_eq!(mux.open(5).err(), Some(MuxError::AlreadyOpen(5)));
    drop(conn);
    assert!(mux.open(5).is_ok());
}

#[test]
fn encode_frames_splits_and_labels_every_chunk() {
    let payload = vec![7u8; 4097];
    let wire = encode_frames(2, &payload);
    assert_eq!(wire.len(), 4097 + 2 * HEADER_LEN);
    assert_eq!(&wire[..8], &[0, 0, 0, 2, 0, 0, 0x10, 0]);
    let second = HEADER_LEN + 4096;
    assert_eq!(&wire[second..second + 8], &[0, 0, 0, 2, 0, 0, 0, 1]);
}

#[tokio::test]
async fn dropping_every_handle_closes_the_socket() {
    let (mux, mut raw) = pair();
    let conn = mux.open(PLUGIN_SERVICE_CONN).unwrap();
    drop(mux);
    // One connection still open: the socket must stay up.
    raw.write_all(&frame(1, b"still")).await.unwrap();
    drop(conn);
    let mut buf = Vec::new();
    let n = tokio::time::timeout(STEP, raw.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 0);
}
