//! Serving HTTP/1.1 connections with the bounds every production HTTP
//! server has: an idle keep-alive timeout (Apache's `KeepAliveTimeout`),
//! a cap on requests per connection (`MaxKeepAliveRequests`) and a time
//! limit on reading a request's head (`RequestReadTimeout header=`).
//!
//! Why it matters beyond hygiene: nova-scheduler and nova-conductor open
//! their Placement connection in the parent process and then fork their
//! workers, so several processes share one TCP connection. A server that
//! keeps an idle connection open forever lets their requests interleave
//! on it, and each worker reads another's answer. Placement behind Apache
//! or uWSGI closes the idle connection after a few seconds, so the
//! inherited connection is dead before a worker uses it; berth now does
//! the same.
//!
//! hyper's own header-read timer runs from the moment a connection waits
//! for a request head, so it also bounds how long a new connection may
//! stay silent; the keep-alive timeout is this module's own: once a
//! connection has answered a request and has none in flight (its response
//! body fully sent), it is shut down gracefully after the timeout. A long
//! poll (the agents' `/agent/v1/work`) is a request in flight, never idle.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::ConnectInfo;
use axum::http::header::CONNECTION;
use axum::http::{HeaderValue, Request};
use hyper::body::Incoming;
use tokio::sync::watch;
use tower_service::Service;

use crate::transport::{Connection, ErrorBodies, Peer};

/// The bounds on each connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionLimits {
    /// How long a connection may stay idle between requests; zero closes
    /// it after every response (no keep-alive).
    pub(crate) keepalive_timeout: Duration,
    /// Requests served on one connection before it is closed (after that
    /// request's response); 0: no cap.
    pub(crate) max_requests: u64,
    /// How long a request's head may take to arrive (also how long a new
    /// connection may stay silent).
    pub(crate) header_read_timeout: Duration,
}

/// Defaults: Apache's `KeepAliveTimeout 5`, a cap far above what a
/// benchmark client's connection sees in a run, and hyper's own 30 s.
pub(crate) const DEFAULT_KEEPALIVE_TIMEOUT_SECS: u64 = 5;
/// See [`DEFAULT_KEEPALIVE_TIMEOUT_SECS`].
pub(crate) const DEFAULT_MAX_REQUESTS_PER_CONNECTION: u64 = 10_000;
/// See [`DEFAULT_KEEPALIVE_TIMEOUT_SECS`].
pub(crate) const DEFAULT_HEADER_READ_TIMEOUT_SECS: u64 = 30;

/// Serve `router` on every connection `listener` accepts until `shutdown`
/// resolves, then stop accepting, let each connection finish the request
/// it is serving, and return when all are closed (as `axum::serve`'s
/// graceful shutdown does).
pub(crate) async fn serve(
    mut listener: ErrorBodies,
    router: axum::Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            (io, addr) = axum::serve::Listener::accept(&mut listener) => {
                connections.spawn(serve_connection(io, addr, router.clone(), limits, stop_rx.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while connections.join_next().await.is_some() {}
}

/// What a connection's watcher follows: requests in flight (until their
/// response body is sent or dropped) and requests begun.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Activity {
    in_flight: usize,
    begun: u64,
}

async fn serve_connection(
    io: Connection,
    addr: SocketAddr,
    router: axum::Router,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
) {
    let (activity_tx, mut activity_rx) = watch::channel(Activity::default());
    let activity = Arc::new(activity_tx);
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let mut router = router.clone();
        request.extensions_mut().insert(ConnectInfo(Peer(addr)));
        let (guard, begun) = InFlight::begin(activity.clone());
        async move {
            let mut response = router.call(request.map(Body::new)).await?;
            if limits.max_requests > 0 && begun >= limits.max_requests {
                // The last request this connection takes: say so, and
                // hyper closes the connection once this answer is out.
                response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, Infallible>(response.map(|body| Body::new(Guarded { body, _guard: guard })))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        // hyper's head timer also runs while a kept-alive connection
        // waits for its next request: never shorter than the keep-alive
        // timeout, or it would close idle connections first.
        .header_read_timeout(limits.header_read_timeout.max(limits.keepalive_timeout))
        .keep_alive(!limits.keepalive_timeout.is_zero());
    let mut conn = pin!(builder.serve_connection(hyper_util::rt::TokioIo::new(io), service));
    let mut closing = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(err) = result {
                    tracing::trace!(peer = %addr, error = %err, "connection ended");
                }
                return;
            }
            reason = close_when_due(&mut activity_rx, limits), if !closing => {
                tracing::trace!(peer = %addr, reason, "closing the connection");
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            changed = stop.changed(), if !closing => {
                if changed.is_err() || *stop.borrow() {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Resolves when the connection should close: it has answered at least
/// one request and stayed idle for the keep-alive timeout. Never for a
/// connection that has not served a request yet (hyper's header-read
/// timeout bounds that one); the request cap is the last answer's
/// `Connection: close`, which hyper honours itself.
async fn close_when_due(activity: &mut watch::Receiver<Activity>, limits: ConnectionLimits) -> &'static str {
    loop {
        let now = *activity.borrow_and_update();
        if now.in_flight == 0 && now.begun > 0 && !limits.keepalive_timeout.is_zero() {
            match tokio::time::timeout(limits.keepalive_timeout, activity.changed()).await {
                Err(_elapsed) => return "keep-alive timeout",
                Ok(Ok(())) => continue,
                Ok(Err(_)) => return std::future::pending().await,
            }
        }
        if activity.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// One request in flight on a connection, from its head until its
/// response body is sent (or dropped).
struct InFlight(Arc<watch::Sender<Activity>>);

impl InFlight {
    /// The request's guard, and how many requests the connection has
    /// begun with this one.
    fn begin(activity: Arc<watch::Sender<Activity>>) -> (Self, u64) {
        let mut begun = 0;
        activity.send_modify(|a| {
            a.in_flight += 1;
            a.begun += 1;
            begun = a.begun;
        });
        (InFlight(activity), begun)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|a| a.in_flight -= 1);
    }
}

/// A response body that holds its request's [`InFlight`] until it is
/// done with.
struct Guarded {
    body: Body,
    _guard: InFlight,
}

impl HttpBody for Guarded {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
