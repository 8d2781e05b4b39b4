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
//! [`run`] is the rotation loop: at the kubelet's jittered deadline (70–90 % of the
//! certificate's life) it makes a new key, asks for a certificate with the node's own identity
//! (or the bootstrap credentials once the current one has expired), stores the pair in
//! `--cert-dir` and puts it in the slot.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tracing::{info, warn};

use super::bootstrap::{self, CsrName};
use super::certificate::{self, CertInfo};
use super::throttle::{Limit, ThrottleLayer};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client pair as the slot holds it.
struct Pair {
    key: Arc<CertifiedKey>,
    info: CertInfo,
}

/// The node's current client certificate, shared by every connection's handshake; a swap
/// closes the connections made before it.
#[derive(Clone)]
pub struct ClientCertSlot {
    pair: Arc<RwLock<Arc<Pair>>>,
    generation: Arc<watch::Sender<u64>>,
}

impl std::fmt::Debug for ClientCertSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCertSlot").field("generation", &*self.generation.borrow()).finish()
    }
}

/// Parses a certificate chain and its key (PEM) into what rustls presents.
fn parse_pair(cert_pem: &[u8], key_pem: &[u8]) -> Result<Pair, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no certificate in the PEM".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("the key PEM: {e}"))?;
    let info = certificate::cert_info(cert_pem).ok_or("the certificate does not parse")?;
    let provider = rustls::crypto::ring::default_provider();
    let key =
        CertifiedKey::from_der(certs, key, &provider).map_err(|e| format!("the key and certificate: {e}"))?;
    Ok(Pair { key: Arc::new(key), info })
}

impl ClientCertSlot {
    /// A slot holding `cert_pem` and `key_pem`.
    pub fn new(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, String> {
        Ok(ClientCertSlot {
            pair: Arc::new(RwLock::new(Arc::new(parse_pair(cert_pem, key_pem)?))),
            generation: Arc::new(watch::channel(0).0),
        })
    }

    /// The certificate in use.
    pub fn info(&self) -> CertInfo {
        self.current().info.clone()
    }

    fn current(&self) -> Arc<Pair> {
        match self.pair.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Puts a new pair in: new handshakes present it, and every connection made before is
    /// closed.
    pub fn swap(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), String> {
        let pair = Arc::new(parse_pair(cert_pem, key_pem)?);
        match self.pair.write() {
            Ok(mut p) => *p = pair,
            Err(poisoned) => *poisoned.into_inner() = pair,
        }
        self.generation.send_modify(|g| *g += 1);
        Ok(())
    }
}

/// rustls asks this at each handshake.
#[derive(Debug)]
struct Resolver(ClientCertSlot);

impl ResolvesClientCert for Resolver {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current().key.clone())
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
        let mut generation = self.slot.generation.subscribe();
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

/// What the rotation loop needs.
pub struct Rotation {
    pub slot: ClientCertSlot,
    /// An unthrottled client on the slot: the node asks for its next certificate as itself.
    pub client: kube::Client,
    pub node_name: String,
    pub cert_dir: PathBuf,
    /// `--bootstrap-kubeconfig`, used when the current certificate has expired (a node that
    /// was down past its certificate's life asks as a bootstrapper again, as the kubelet).
    pub bootstrap_kubeconfig: Option<PathBuf>,
}

/// Renews the client certificate at each rotation deadline until `cancel`.
pub async fn run(r: Rotation, cancel: CancellationToken) {
    let mut retry = Duration::from_secs(2);
    let mut deadline = None;
    loop {
        let info = r.slot.info();
        let due = *deadline.get_or_insert_with(|| {
            let due = certificate::rotation_deadline(info.not_before, info.not_after, fastrand::f64());
            let at = jiff::Timestamp::try_from(due).map(|t| t.to_string()).unwrap_or_default();
            info!(deadline = %at, not_after = ?info.not_after, "client certificate rotation scheduled");
            due
        });
        let wait = due.duration_since(SystemTime::now()).unwrap_or_default();
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        info!(common_name = %info.common_name, "rotating the client certificate");
        match renew(&r, &info).await {
            Ok(()) => {
                retry = Duration::from_secs(2);
                deadline = None;
            }
            Err(e) => {
                warn!(error = %crate::error_chain(&e), retry_in_s = retry.as_secs(), "rotating the client certificate failed; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(Duration::from_secs(300));
            }
        }
    }
}

/// One rotation: a new key, a CSR, the pair stored and swapped in.
async fn renew(r: &Rotation, current: &CertInfo) -> Result<(), bootstrap::CsrError> {
    let req = certificate::request(&r.node_name, None)?;
    let client = match &r.bootstrap_kubeconfig {
        Some(boot) if !current.valid_at(SystemTime::now()) => {
            warn!("the client certificate has expired; asking for a new one with the bootstrap credentials");
            super::connect::client(boot)
                .await
                .map_err(|e| bootstrap::CsrError::Bootstrap { path: boot.clone(), reason: e.reason })?
        }
        _ => r.client.clone(),
    };
    let cert =
        bootstrap::request_certificate(&client, &req.csr_pem, CsrName::Generate, bootstrap::CSR_WAIT).await?;
    let pair = bootstrap::store(&r.cert_dir, cert.clone(), req.key_pem.clone()).await?;
    r.slot.swap(cert.as_bytes(), req.key_pem.as_bytes()).map_err(|reason| bootstrap::CsrError::File {
        what: "loading the new pair",
        path: pair.clone(),
        source: std::io::Error::other(reason),
    })?;
    let info = r.slot.info();
    info!(pair = %pair.display(), not_after = ?info.not_after, "client certificate rotated; connections made with the old one closed");
    Ok(())
}
