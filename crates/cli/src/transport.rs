//! Requests hyper refuses before any API sees them (a request URI longer
//! than 65534 bytes: 414; a request head larger than its buffer: 431) get
//! an error body in the format of the API their path belongs to, like any
//! other error: hyper itself answers them with an empty body, so the
//! connection's writes are watched for exactly those two answers, and the
//! answer is rewritten with the API's error body.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::HttpBody;
use axum::http::{HeaderMap, StatusCode};
use berth_http::ApiError;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;

use crate::paths::RootApi;
use crate::services::Services;

/// hyper's longest request URI.
const MAX_URI: usize = 65534;

/// How much of a request's first bytes is kept to find its API.
const HEAD_KEPT: usize = 512;

/// A listener whose connections answer hyper's 414 and 431 in the API's
/// error format.
pub(crate) struct ErrorBodies {
    inner: Accepting,
    local: SocketAddr,
    services: Arc<Services>,
    root: Option<RootApi>,
}

/// A connection's byte stream: plain TCP, or TLS over TCP.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// Where connections come from.
enum Accepting {
    /// Straight from the TCP listener.
    Plain(TcpListener),
    /// From the task that accepts TCP connections and runs each TLS
    /// handshake on its own (a slow handshake holds up no other client).
    Tls(tokio::sync::mpsc::Receiver<(Box<dyn Stream>, SocketAddr)>),
}

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl ErrorBodies {
    /// Wrap `inner`, with TLS when `tls` is given; `root` as for
    /// [`crate::router::router`].
    pub(crate) fn new(
        inner: TcpListener,
        services: Arc<Services>,
        root: Option<RootApi>,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> io::Result<Self> {
        let local = inner.local_addr()?;
        let inner = match tls {
            None => Accepting::Plain(inner),
            Some(acceptor) => {
                let (tx, rx) = tokio::sync::mpsc::channel(1024);
                let mut inner = inner;
                tokio::spawn(async move {
                    loop {
                        let (tcp, addr) = axum::serve::Listener::accept(&mut inner).await;
                        let (acceptor, tx) = (acceptor.clone(), tx.clone());
                        tokio::spawn(async move {
                            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                                Ok(Ok(stream)) => {
                                    let _ = tx.send((Box::new(stream) as Box<dyn Stream>, addr)).await;
                                }
                                Ok(Err(err)) => tracing::debug!(peer = %addr, error = %err, "TLS handshake failed"),
                                Err(_) => tracing::debug!(peer = %addr, "TLS handshake timed out"),
                            }
                        });
                    }
                });
                Accepting::Tls(rx)
            }
        };
        Ok(ErrorBodies { inner, local, services, root })
    }
}

/// The TLS acceptor for a certificate chain and key in PEM files.
pub(crate) fn tls_acceptor(cert: &std::path::Path, key: &std::path::Path) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use anyhow::Context as _;
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading the certificate chain {}", cert.display()))?;
    anyhow::ensure!(!chain.is_empty(), "no certificate in {}", cert.display());
    let key =
        PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading the private key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the certificate and the key do not go together")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The peer of a connection, as `ConnectInfo` (who may read `/metrics`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, ErrorBodies>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, ErrorBodies>) -> Self {
        Peer(*stream.remote_addr())
    }
}

impl axum::serve::Listener for ErrorBodies {
    type Io = Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr): (Box<dyn Stream>, SocketAddr) = match &mut self.inner {
            Accepting::Plain(listener) => {
                let (io, addr) = axum::serve::Listener::accept(listener).await;
                (Box::new(io), addr)
            }
            Accepting::Tls(rx) => match rx.recv().await {
                Some(accepted) => accepted,
                None => std::future::pending().await,
            },
        };
        let conn = Connection {
            io,
            services: self.services.clone(),
            root: self.root,
            head: Vec::new(),
            line: (0, false),
            wrote: false,
            replacement: None,
        };
        (conn, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// One accepted connection.
pub(crate) struct Connection {
    io: Box<dyn Stream>,
    services: Arc<Services>,
    root: Option<RootApi>,
    /// The first bytes of the request being read (since the last answer).
    head: Vec<u8>,
    /// Length of the request line read so far, and whether it ended.
    line: (usize, bool),
    /// An answer was written since the last read.
    wrote: bool,
    /// A rewritten answer being sent: bytes, how many are sent.
    replacement: Option<(Vec<u8>, usize)>,
}

/// The status of an answer hyper wrote itself for a request it could not
/// parse, if `buf` is one we rewrite: a head only (no body), 414 or 431.
fn refused_by_hyper(buf: &[u8]) -> Option<StatusCode> {
    let status = match buf.get(..13)? {
        b"HTTP/1.1 414 " | b"HTTP/1.0 414 " => StatusCode::URI_TOO_LONG,
        b"HTTP/1.1 431 " | b"HTTP/1.0 431 " => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        _ => return None,
    };
    buf.ends_with(b"\r\n\r\n").then_some(status)
}

/// The path of the request line at the start of `head` (possibly cut).
fn request_path(head: &[u8]) -> String {
    let line = head.split(|b| *b == b'\r' || *b == b'\n').next().unwrap_or_default();
    let target = line.split(|b| *b == b' ').nth(1).unwrap_or_default();
    let text = String::from_utf8_lossy(target);
    // An absolute-form target: keep its path.
    let path = match text.find("://") {
        Some(at) => text[at + 3..].find('/').map_or("/", |p| &text[at + 3 + p..]).to_owned(),
        None => text.into_owned(),
    };
    path.split(['?', '#']).next().unwrap_or("/").to_owned()
}

impl Connection {
    /// hyper's answer `original` (status `status`) with the API's error
    /// body: the status line and hyper's headers (but its
    /// `content-length`), the API's headers, the body.
    fn rewrite(&self, original: &[u8], status: StatusCode) -> Vec<u8> {
        // A request line beyond hyper's whole buffer comes back as 431:
        // it is a URI too long all the same.
        let (line_len, line_ended) = self.line;
        let status = if !line_ended || line_len > MAX_URI { StatusCode::URI_TOO_LONG } else { status };
        let detail = if status == StatusCode::URI_TOO_LONG {
            "The request URI is longer than 65534 bytes."
        } else {
            "The request header fields are too large."
        };
        let err = ApiError::new(status, detail);
        let request_id = format!("req-{}", uuid::Uuid::new_v4());
        let path = request_path(&self.head);
        let render = self.services.error_renderer(&path, self.root);
        let mut response = render(&err, None, &request_id, &HeaderMap::new());
        let mut body = Vec::new();
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        // Error bodies are built from a string: complete at once.
        while let Poll::Ready(Some(Ok(frame))) = Pin::new(response.body_mut()).poll_frame(&mut cx) {
            if let Ok(data) = frame.into_data() {
                body.extend_from_slice(&data);
            }
        }
        let text = String::from_utf8_lossy(original);
        let mut lines = text.split("\r\n").filter(|l| !l.is_empty());
        let version = lines.next().and_then(|l| l.split(' ').next()).unwrap_or("HTTP/1.1");
        let mut out = format!("{version} {} {}\r\n", status.as_u16(), status.canonical_reason().unwrap_or(""));
        for line in lines {
            let name = line.split(':').next().unwrap_or_default().trim();
            if !name.eq_ignore_ascii_case("content-length") && !response.headers().contains_key(name) {
                out.push_str(line);
                out.push_str("\r\n");
            }
        }
        for (name, value) in response.headers() {
            out.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap_or_default()));
        }
        out.push_str(&format!("x-openstack-request-id: {request_id}\r\ncontent-length: {}\r\n\r\n", body.len()));
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(&body);
        bytes
    }

    /// Send the replacement of `buf`; `Ready(Ok(buf.len()))` once it is all
    /// sent.
    fn poll_replacement(&mut self, cx: &mut Context<'_>, consumed: usize) -> Poll<io::Result<usize>> {
        while let Some((bytes, sent)) = &mut self.replacement {
            if *sent == bytes.len() {
                self.replacement = None;
                return Poll::Ready(Ok(consumed));
            }
            match Pin::new(&mut self.io).poll_write(cx, &bytes[*sent..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *sent += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(consumed))
    }

    fn note_write(&mut self, buf: &[u8]) {
        self.wrote = true;
        if self.replacement.is_none() {
            if let Some(status) = refused_by_hyper(buf) {
                self.replacement = Some((self.rewrite(buf, status), 0));
            }
        }
    }
}

impl AsyncRead for Connection {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let result = Pin::new(&mut this.io).poll_read(cx, buf);
        let new = &buf.filled()[before..];
        if !new.is_empty() {
            if this.wrote {
                // A new request after an answer.
                this.head.clear();
                this.line = (0, false);
                this.wrote = false;
            }
            if !this.line.1 {
                match new.iter().position(|b| *b == b'\n') {
                    Some(end) => this.line = (this.line.0 + end, true),
                    None => this.line.0 += new.len(),
                }
            }
            let room = HEAD_KEPT.saturating_sub(this.head.len());
            this.head.extend_from_slice(&new[..new.len().min(room)]);
        }
        result
    }
}

impl AsyncWrite for Connection {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        this.note_write(buf);
        if this.replacement.is_some() {
            return this.poll_replacement(cx, buf.len());
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let first: &[u8] = bufs.iter().find(|b| !b.is_empty()).map_or(&[], |b| b);
        // hyper's own answers are a head alone, in one buffer.
        let alone = bufs.iter().filter(|b| !b.is_empty()).count() == 1;
        if self.replacement.is_some() || (alone && refused_by_hyper(first).is_some()) {
            return self.poll_write(cx, first);
        }
        let this = &mut *self;
        this.wrote = true;
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_hyper_answers_and_paths() {
        assert_eq!(
            refused_by_hyper(b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n\r\n"),
            Some(StatusCode::URI_TOO_LONG)
        );
        assert_eq!(
            refused_by_hyper(b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n"),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        assert_eq!(refused_by_hyper(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"), None);
        assert_eq!(refused_by_hyper(b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 5\r\n\r\nabcde"), None);
        assert_eq!(request_path(b"GET /compute/v2.1/servers?x=aaaa"), "/compute/v2.1/servers");
        assert_eq!(request_path(b"GET http://h:1/image/v2/images HTTP/1.1\r\n"), "/image/v2/images");
        assert_eq!(request_path(b"GET /resource_providers?name=aaaaaaa"), "/resource_providers");
    }
}
