//! A fake API server on 127.0.0.1 answering an endless body and a trickled one: the bounded
//! client gives up at the size limit and at the deadline, where kube alone read on.

use std::net::SocketAddr;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

#[derive(Clone, Copy)]
enum Answer {
    /// Chunks of 64 KiB for ever, as fast as the client reads.
    Endless,
    /// One byte of a 1,000-byte body every `every`.
    Trickled(Duration),
    /// A small complete JSON body.
    Small,
}

/// Serves `answer` to every request on a port of 127.0.0.1.
async fn fake_api_server(answer: Answer) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The request head: one read suffices for a GET without a body.
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = match answer {
                    Answer::Endless => {
                        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                                    Transfer-Encoding: chunked\r\n\r\n";
                        let _ = conn.write_all(head.as_bytes()).await;
                        let chunk = format!("10000\r\n{}\r\n", " ".repeat(0x10000));
                        loop {
                            if conn.write_all(chunk.as_bytes()).await.is_err() {
                                break Ok(());
                            }
                        }
                    }
                    Answer::Trickled(every) => {
                        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                                    Content-Length: 1000\r\n\r\n";
                        let _ = conn.write_all(head.as_bytes()).await;
                        for _ in 0..1000 {
                            tokio::time::sleep(every).await;
                            if conn.write_all(b" ").await.is_err() {
                                break;
                            }
                        }
                        Ok(())
                    }
                    Answer::Small => {
                        conn.write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                              Content-Length: 11\r\n\r\n{\"a\": true}",
                        )
                        .await
                    }
                };
            });
        }
    });
    addr
}

fn bounded_client(addr: SocketAddr, limits: ResponseLimits) -> kube::Client {
    let url = format!("http://{addr}").parse().expect("url");
    let mut config = kube::Config::new(url);
    // As the daemon sets them: kube's own read timeout restarts with every byte.
    config.read_timeout = Some(Duration::from_secs(15));
    config.connect_timeout = Some(Duration::from_secs(5));
    client(config, limits).expect("client")
}

async fn get(client: &kube::Client) -> Result<String, kube::Error> {
    let req = http::Request::get("/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/n")
        .body(Vec::new())
        .expect("request");
    client.request_text(req).await
}

const LIMITS: ResponseLimits = ResponseLimits {
    max_bytes: MAX_RESPONSE_BYTES,
    total: Duration::from_secs(2),
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_body_is_cut_off_at_the_size_limit() {
    let addr = fake_api_server(Answer::Endless).await;
    let client = bounded_client(
        addr,
        ResponseLimits {
            total: Duration::from_secs(60),
            ..LIMITS
        },
    );
    // Bounded here too, so that a client reading on fails the test instead of hanging it.
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(20), get(&client))
        .await
        .expect("the client gave up")
        .expect_err("cut off");
    assert!(
        err.to_string().contains("answer is over 8388608 bytes"),
        "{err} after {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_body_is_cut_off_at_the_deadline() {
    let addr = fake_api_server(Answer::Trickled(Duration::from_millis(200))).await;
    let client = bounded_client(addr, LIMITS);
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(10), get(&client))
        .await
        .expect("the client gave up")
        .expect_err("cut off");
    let took = started.elapsed();
    assert!(err.to_string().contains("not complete within 2s"), "{err}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_answer_is_read_whole() {
    let addr = fake_api_server(Answer::Small).await;
    let client = bounded_client(addr, LIMITS);
    assert_eq!(get(&client).await.expect("answer"), "{\"a\": true}");
}
