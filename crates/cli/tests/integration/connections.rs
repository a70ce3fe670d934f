//! Connection bounds (issue 40): an idle keep-alive connection is closed
//! after `--keepalive-timeout`, `0` closes after every response, a
//! connection serves at most `--max-requests-per-connection` requests, and
//! a request head that does not arrive in `--header-read-timeout` ends the
//! connection. Raw TCP on loopback, so what the server does to the socket
//! is what is seen.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::TestServer;

async fn connect(server: &TestServer) -> TcpStream {
    let addr = server.base.trim_start_matches("http://");
    TcpStream::connect(addr).await.expect("connect")
}

/// Send one `GET /` and read its whole answer (head and body, by
/// Content-Length); returns the head.
async fn get_root(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Auth-Token: admin\r\nAccept: application/json\r\n\r\n")
        .await
        .expect("write");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("an answer in time")
            .expect("read");
        assert!(n > 0, "closed before the answer: {:?}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().expect("length"))
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                assert!(head.starts_with("http/1.1 200"), "{head}");
                return head;
            }
        }
    }
}

/// How long until the server closes the connection (EOF), up to `limit`.
/// The only bytes allowed before the end are a `408 Request Timeout`
/// (hyper's answer to a head that did not arrive in time).
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut chunk = [0u8; 256];
    let mut seen = Vec::new();
    loop {
        let left = limit.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(n)) => {
                seen.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&seen);
                assert!(text.starts_with("HTTP/1.1 408"), "unexpected bytes: {text:?}");
            }
            Err(_) => return None,
        }
    }
}

#[tokio::test]
async fn idle_keepalive_connections_are_closed_after_the_timeout() {
    let server = TestServer::start_with_args("conn-idle", &["--keepalive-timeout", "1"]).await;
    let mut stream = connect(&server).await;
    get_root(&mut stream).await;
    // Busy within the timeout: the connection stays usable.
    tokio::time::sleep(Duration::from_millis(300)).await;
    get_root(&mut stream).await;
    let closed = closed_within(&mut stream, Duration::from_secs(5)).await.expect("closed when idle");
    assert!(closed >= Duration::from_millis(800), "closed too early: {closed:?}");
    assert!(closed <= Duration::from_millis(2500), "closed too late: {closed:?}");

    // The default (5 s) keeps a connection at least a second.
    let server = TestServer::start_with_args("conn-default", &[]).await;
    let mut stream = connect(&server).await;
    get_root(&mut stream).await;
    assert_eq!(closed_within(&mut stream, Duration::from_secs(1)).await, None, "the default is 5 s");
    let closed = closed_within(&mut stream, Duration::from_secs(8)).await.expect("closed within the default");
    assert!(closed >= Duration::from_secs(3), "{closed:?}");
}

#[tokio::test]
async fn zero_closes_after_every_response_and_requests_per_connection_are_capped() {
    let server = TestServer::start_with_args("conn-zero", &["--keepalive-timeout", "0"]).await;
    let mut stream = connect(&server).await;
    let head = get_root(&mut stream).await;
    assert!(head.contains("connection: close"), "{head}");
    assert!(closed_within(&mut stream, Duration::from_secs(2)).await.is_some(), "closed after the response");

    let server = TestServer::start_with_args("conn-cap", &["--max-requests-per-connection", "3"]).await;
    let mut stream = connect(&server).await;
    for _ in 0..2 {
        let head = get_root(&mut stream).await;
        assert!(!head.contains("connection: close"), "{head}");
    }
    let head = get_root(&mut stream).await;
    assert!(head.contains("connection: close"), "the third answer says so: {head}");
    assert!(closed_within(&mut stream, Duration::from_secs(2)).await.is_some(), "closed after the third");
}

#[tokio::test]
async fn a_request_head_that_never_ends_is_cut_off() {
    let args = ["--header-read-timeout", "1", "--keepalive-timeout", "1"];
    let server = TestServer::start_with_args("conn-head", &args).await;
    let mut stream = connect(&server).await;
    stream.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.expect("write");
    let closed = closed_within(&mut stream, Duration::from_secs(5)).await.expect("cut off");
    assert!(closed >= Duration::from_millis(800), "{closed:?}");
    // A silent new connection too.
    let mut silent = connect(&server).await;
    assert!(closed_within(&mut silent, Duration::from_secs(5)).await.is_some(), "a silent connection is closed");
}

/// A keep-alive timeout longer than the head timeout is honoured: hyper's
/// head timer (which also runs between requests) is stretched to it.
#[tokio::test]
async fn a_long_keepalive_outlasts_a_shorter_header_read_timeout() {
    let args = ["--keepalive-timeout", "3", "--header-read-timeout", "1"];
    let server = TestServer::start_with_args("conn-long-idle", &args).await;
    let mut stream = connect(&server).await;
    get_root(&mut stream).await;
    assert_eq!(closed_within(&mut stream, Duration::from_millis(2000)).await, None, "kept past the head timeout");
    assert!(closed_within(&mut stream, Duration::from_secs(4)).await.is_some(), "closed after the keep-alive");
}
