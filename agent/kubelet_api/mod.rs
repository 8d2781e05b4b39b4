//! The kubelet's HTTPS API on `--node-ip`:`--port` (10250), the part `kubectl logs`, `exec`,
//! `attach` and `port-forward` need:
//! TLS with the serving certificate, client certificates verified against `--client-ca-file`,
//! authentication by certificate or bearer token (`TokenReview`), authorization on
//! `nodes/<subresource>` by `SubjectAccessReview` as the kubelet maps paths, then `/healthz` and
//! `/containerLogs/{namespace}/{pod}/{container}`, `/exec`, `/attach`, `/portForward`, and the
//! node's resource statistics and pods (`/stats/summary`, `/metrics/resource`, `/pods`,
//! `/configz`, from `stats` and the registry). HTTP/1.1
//! and HTTP/2 (ALPN) on hyper.
//!
//! It owns the listener and its connections. Pods and their statuses come from the agent's
//! [`Registry`]; the log files are the runtime's (read as `crilet logs` reads them, `cli::logs`);
//! the reviews are the API server's answers. Exec, attach and port-forward sessions are the
//! runtime's (CRI streaming), proxied (`streaming`).

mod auth;
mod logs;
mod routes;
mod streaming;
mod tls;

#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use self::auth::{Authenticator, KubeReviewer, Reviewer};
use self::routes::KubeletApi;
pub use self::tls::{BindError, ClientCaError, load_pair};
use crate::cluster::cert_slot::CertSlot;
use crate::cri::CriClient;
use crate::registry::Registry;
use crate::stats::Collector;

/// A client that has not finished its TLS handshake, or sent its request headers, by then is
/// dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How the kubelet API is served.
#[derive(Debug, Clone)]
pub struct Config {
    /// `--node-ip`:`--port`.
    pub bind: SocketAddr,
    /// The serving certificate, asked at each handshake (see `cluster::serving_cert`).
    pub serving: CertSlot,
    /// `--client-ca-file`: client certificates are verified against it (and not required).
    pub client_ca_file: Option<PathBuf>,
    /// The Node's name: the object that access is reviewed on (`nodes/<name>/<subresource>`).
    pub node_name: String,
    /// What `/configz` answers: `{"kubeletconfig": {...}}`.
    pub configz: serde_json::Value,
}

/// The bound kubelet API, ready to serve.
pub struct Server {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    api: Arc<KubeletApi<KubeReviewer>>,
}

/// Reads the client CA file and binds the address now, so a bad file or a busy address stops
/// the agent at start with the file (or address) and the reason ([`BindError`]). Reviews go to
/// the API server through `client`; pods are looked up in `registry`.
pub async fn bind(
    cfg: Config,
    client: kube::Client,
    registry: Registry,
    cri: CriClient,
    stats: Collector,
) -> anyhow::Result<Server> {
    let tls = tls::server_config(cfg.serving, cfg.client_ca_file.as_deref())?;
    let listener = TcpListener::bind(cfg.bind)
        .await
        .map_err(|source| BindError::Listen { address: cfg.bind, source })?;
    let api = KubeletApi {
        auth: Authenticator::new(KubeReviewer { client }),
        registry,
        node_name: cfg.node_name,
        cri,
        stats,
        configz: cfg.configz,
    };
    Ok(Server { listener, acceptor: TlsAcceptor::from(Arc::new(tls)), api: Arc::new(api) })
}

impl Server {
    /// The address bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `cancel` fires; then open connections (and followed logs) are closed and
    /// this returns once their tasks have ended.
    pub async fn serve(self, cancel: CancellationToken) {
        serve(self.listener, self.acceptor, self.api, cancel).await;
    }
}

/// The accept loop, for any [`Reviewer`] (tests use a fake one).
pub(crate) async fn serve<R: Reviewer>(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    api: Arc<KubeletApi<R>>,
    cancel: CancellationToken,
) {
    let local = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    info!(address = %local, "serving the kubelet API");
    let tracker = TaskTracker::new();
    loop {
        let (tcp, peer) = tokio::select! {
            _ = cancel.cancelled() => break,
            r = listener.accept() => match r {
                Ok(v) => v,
                Err(e) => {
                    // EMFILE and the like: back off a little rather than spin.
                    warn!(error = %e, "accepting a kubelet API connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (acceptor, api, cancel) = (acceptor.clone(), api.clone(), cancel.clone());
        tracker.spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return debug!(peer = %peer, error = %e, "TLS handshake failed"),
                Err(_) => return debug!(peer = %peer, "TLS handshake timed out"),
            };
            let cert_user = stream.get_ref().1.peer_certificates().and_then(<[_]>::first).and_then(tls::certificate_user);
            let conn_cancel = cancel.clone();
            let service = service_fn(move |req| {
                let (api, user, cancel) = (api.clone(), cert_user.clone(), conn_cancel.clone());
                async move { Ok::<_, Infallible>(api.handle(req, user, cancel).await) }
            });
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder.http1().timer(TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
            builder.http2().timer(TokioTimer::new());
            // With upgrades: exec, attach and port-forward switch the connection's protocol.
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            tokio::select! {
                _ = cancel.cancelled() => {}
                r = conn => if let Err(e) = r { debug!(peer = %peer, error = %e, "kubelet API connection ended") },
            }
        });
    }
    tracker.close();
    tracker.wait().await;
}
