//! The client against the server (and against hostile peers written with h2 directly): calls,
//! statuses, deadlines, size limits and a server that goes away.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use protobuf::well_known_types::wrappers::StringValue;
use protobuf::Message;
use unix_grpc::{Channel, ChannelOptions, GrpcError, Handler, Server, ServerOptions, Status};

fn msg(s: &str) -> StringValue {
    let mut m = StringValue::new();
    m.value = s.into();
    m
}

/// Echoes `/test.Echo/Say`, answers a big message on `/test.Echo/Big`, sleeps on
/// `/test.Echo/Slow`, and is Unimplemented for anything else.
fn echo() -> Handler {
    Arc::new(|method: String, payload: Bytes| {
        Box::pin(async move {
            match method.as_str() {
                "/test.Echo/Say" => {
                    let req = StringValue::parse_from_bytes(&payload)
                        .map_err(|e| Status::new(3, e.to_string()))?;
                    let reply = msg(&format!("you said {}", req.value));
                    Ok(Bytes::from(
                        reply
                            .write_to_bytes()
                            .map_err(|e| Status::new(13, e.to_string()))?,
                    ))
                }
                "/test.Echo/Big" => {
                    let reply = msg(&"x".repeat(2 << 20));
                    Ok(Bytes::from(
                        reply
                            .write_to_bytes()
                            .map_err(|e| Status::new(13, e.to_string()))?,
                    ))
                }
                "/test.Echo/Slow" => {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    Ok(Bytes::new())
                }
                other => Err(Status::new(
                    12,
                    format!("unknown method {other} (100% sure)"),
                )),
            }
        })
    })
}

const T: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_calls_statuses_and_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("echo.sock");
    let server = Server::bind(&sock, echo(), ServerOptions::default()).expect("bind");
    let ch = Channel::connect(&sock).await.expect("connect");

    let reply: StringValue = ch
        .unary("/test.Echo/Say", &msg("hi"), T)
        .await
        .expect("say");
    assert_eq!(reply.value, "you said hi");

    match ch
        .unary::<_, StringValue>("/test.Echo/Nope", &msg(""), T)
        .await
    {
        Err(GrpcError::Status { code: 12, message }) => {
            assert_eq!(message, "unknown method /test.Echo/Nope (100% sure)")
        }
        other => panic!("{other:?}"),
    }

    // 2 MiB answer against a 1 MiB limit: refused from the frame header on.
    let small = Channel::connect_with(
        &sock,
        ChannelOptions {
            max_message: 1 << 20,
            ..Default::default()
        },
    )
    .await
    .expect("connect");
    match small
        .unary::<_, StringValue>("/test.Echo/Big", &msg(""), T)
        .await
    {
        Err(GrpcError::TooLarge { limit, len, .. }) => {
            assert_eq!(limit, 1 << 20);
            assert!(len > 2 << 20);
        }
        other => panic!("{other:?}"),
    }
    // The default limit takes it.
    let big: StringValue = ch.unary("/test.Echo/Big", &msg(""), T).await.expect("big");
    assert_eq!(big.value.len(), 2 << 20);

    // A slow handler: the caller's deadline, not the handler, ends the call.
    let start = Instant::now();
    match ch
        .unary::<_, StringValue>("/test.Echo/Slow", &msg(""), Duration::from_millis(300))
        .await
    {
        Err(GrpcError::Timeout { timeout, .. }) => assert_eq!(timeout, Duration::from_millis(300)),
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(3));

    // Too big a request for the server.
    let tight = Server::bind(
        &dir.path().join("tight.sock"),
        echo(),
        ServerOptions {
            max_request: 16,
            ..Default::default()
        },
    )
    .expect("bind");
    let tch = Channel::connect(tight.path()).await.expect("connect");
    match tch
        .unary::<_, StringValue>("/test.Echo/Say", &msg(&"y".repeat(100)), T)
        .await
    {
        Err(GrpcError::Status { code: 8, .. }) => {}
        other => panic!("{other:?}"),
    }

    // The server goes away: calls on the open channel fail, new connections are refused.
    server.shutdown().await;
    assert!(!sock.exists(), "socket file removed");
    assert!(ch
        .unary::<_, StringValue>("/test.Echo/Say", &msg("x"), T)
        .await
        .is_err());
    assert!(matches!(
        Channel::connect(&sock).await,
        Err(GrpcError::Connect { .. })
    ));
}

/// h2's client handshake only sends the preface, so a peer that accepts and never speaks
/// HTTP/2 is noticed by the first call, which its deadline ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_answers_is_ended_by_the_call_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("mute.sock");
    let listener = tokio::net::UnixListener::bind(&sock).expect("bind");
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let opts = ChannelOptions {
        connect_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let start = Instant::now();
    let result = match Channel::connect_with(&sock, opts).await {
        Ok(ch) => ch
            .unary::<_, StringValue>("/x.Y/Z", &msg(""), Duration::from_millis(300))
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(
        matches!(result, Err(GrpcError::Timeout { .. })),
        "{result:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(3));
    hold.abort();
}

/// A raw h2 server announcing a 4 GiB message and sending 5 bytes: the client must refuse it
/// at once, without waiting for (or buffering) the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announced_huge_message_is_refused_before_buffering() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("liar.sock");
    let listener = tokio::net::UnixListener::bind(&sock).expect("bind");
    let liar = tokio::spawn(async move {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let Ok(mut conn) = h2::server::handshake(stream).await else {
            return;
        };
        let mut held = Vec::new();
        while let Some(Ok((_req, mut respond))) = conn.accept().await {
            let resp = http::Response::builder()
                .status(200)
                .header("content-type", "application/grpc")
                .body(())
                .expect("response");
            if let Ok(mut s) = respond.send_response(resp, false) {
                let _ = s.send_data(Bytes::from_static(&[0, 0xff, 0xff, 0xff, 0xff]), false);
                held.push(s);
            }
        }
    });
    let ch = Channel::connect(&sock).await.expect("connect");
    let start = Instant::now();
    match ch
        .unary::<_, StringValue>("/x.Y/Z", &msg(""), Duration::from_secs(10))
        .await
    {
        Err(GrpcError::TooLarge { len, .. }) => assert_eq!(len, u32::MAX as usize),
        other => panic!("{other:?}"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "did not wait for the body"
    );
    liar.abort();
}
