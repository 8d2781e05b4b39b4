//! Client certificate rotation (the kubelet's `rotateCertificates`) without a restart.
//!
//! Design: every `kube::Client` of the node shares one [`ClientCertSlot`]. The clients are
//! built on our own connector stack, whose rustls config asks the slot for the client
//! certificate at each TLS handshake (`ResolvesClientCert`), so a connection made after a
//! rotation presents the new certificate, and nobody who holds a client (the pod watch, the
//! volume manager, the kubelet API's reviews, ...) needs a new one. Connections made before
//! stay open in hyper's pool, and the API server checks the client certificate's validity on
//! every request, not only at the handshake, so an old connection would fail once the old
//! certificate expires: as the kubelet closes all its connections when it swaps the
//! certificate, every connection here watches the slot's generation and reads EOF (writes an
//! error) once it changes. The pod watch sees its stream end and the watcher re-lists and
//! watches again at once on a new connection; a request in flight at that moment fails and is
//! retried by its loop, as after any network error.
//!
//! `cluster::rotation` renews the certificate in the slot (with the node's own identity, or the
//! bootstrap credentials once the current one has expired).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;
use tower::ServiceBuilder;

use super::cert_slot::CertSlot;
use super::throttle::{Limit, ThrottleLayer};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The node's current client certificate, shared by every connection's handshake; a swap
/// closes the connections made before it (see the module's doc).
pub type ClientCertSlot = CertSlot;

/// rustls asks this at each handshake.
#[derive(Debug)]
struct Resolver(ClientCertSlot);

impl ResolvesClientCert for Resolver {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.0.key()
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Wraps a connector so each connection ends when the slot's certificate is swapped.
#[derive(Clone)]
struct ClosingConnector<C> {
    inner: C,
    slot: ClientCertSlot,
}

impl<C> tower::Service<http::Uri> for ClosingConnector<C>
where
    C: tower::Service<http::Uri> + Send,
    C::Response: hyper::rt::Read + hyper::rt::Write + Connection + Unpin + Send + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = Closing<C::Response>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        // Subscribed before the handshake: a swap during it closes this connection too, since
        // it may have presented the old certificate.
        let mut generation = self.slot.generation();
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            let io = connecting.await.map_err(Into::into)?;
            let swapped = async move {
                if generation.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            Ok(Closing { io, swapped: Box::pin(swapped), closed: false })
        })
    }
}

/// A connection that reads EOF and fails writes once the certificate it was made with has been
/// swapped out, so hyper drops it from the pool.
struct Closing<T> {
    io: T,
    swapped: Pin<Box<dyn Future<Output = ()> + Send>>,
    closed: bool,
}

impl<T> Closing<T> {
    /// Polled on every read, so an idle pooled connection (whose reader hyper keeps polling)
    /// is woken and closed at the swap, not at its next use.
    fn is_closed(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.closed && self.swapped.as_mut().poll(cx).is_ready() {
            self.closed = true;
        }
        self.closed
    }
}

impl<T: hyper::rt::Read + Unpin> hyper::rt::Read for Closing<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.is_closed(cx) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: hyper::rt::Write + Unpin> hyper::rt::Write for Closing<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.is_closed(cx) {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "connection closed: the client certificate was rotated",
            )));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<T: Connection> Connection for Closing<T> {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

/// A client with `limit` that talks to `config`'s API server presenting the slot's certificate
/// (the kubeconfig's own client certificate, if any, is not used). The kubeconfig's server,
/// CA, default namespace and any token are kept.
pub fn client(config: &kube::Config, slot: &ClientCertSlot, limit: Limit) -> Result<kube::Client, String> {
    let mut tls = config.rustls_client_config().map_err(|e| format!("TLS settings: {e}"))?;
    tls.client_auth_cert_resolver = Arc::new(Resolver(slot.clone()));
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    // kube's own stack bounds every read and write (a watch's is the kubeconfig's read timeout,
    // 300 s): the same here, or a connection the API server stopped answering hangs its caller.
    let mut timed = hyper_timeout::TimeoutConnector::new(https);
    timed.set_read_timeout(config.read_timeout);
    timed.set_write_timeout(config.write_timeout);
    let connector = ClosingConnector { inner: timed, slot: slot.clone() };
    let hyper_client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
    let auth = config.auth_layer().map_err(|e| format!("credentials: {e}"))?;
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(auth)
        .map_err(BoxError::from)
        .service(hyper_client);
    Ok(kube::client::ClientBuilder::new(service, config.default_namespace.clone())
        .with_layer(&ThrottleLayer::new(limit))
        .build())
}
