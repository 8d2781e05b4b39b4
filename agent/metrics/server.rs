//! The HTTP endpoint of `--metrics-bind-address`: `GET /metrics` (Prometheus text format) and
//! `GET /healthz`; any other path is 404. Plain HTTP/1 on hyper; meant for a loopback address.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::registry::Registry;

/// A client that has not sent its request headers after this long is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// At most this many connections are served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 32;

/// The metrics address could not be used.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on the metrics address {address}")]
pub struct BindError {
    pub address: String,
    #[source]
    pub source: std::io::Error,
}

/// Binds `address` (`HOST:PORT`) now, so a bad or busy address stops the agent at start.
pub fn bind(address: &str) -> Result<TcpListener, BindError> {
    let fail = |source| BindError { address: address.to_string(), source };
    let std_listener = std::net::TcpListener::bind(address).map_err(fail)?;
    std_listener.set_nonblocking(true).map_err(fail)?;
    TcpListener::from_std(std_listener).map_err(fail)
}

/// Serves `/metrics` and `/healthz` on `listener` until `cancel` fires.
pub async fn serve(
    listener: TcpListener,
    registry: Registry,
    metrics: Arc<super::Metrics>,
    cancel: CancellationToken,
) {
    let local = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    info!(address = %local, "serving /metrics and /healthz");
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let (stream, peer) = tokio::select! {
            _ = cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok(v) => v,
                Err(e) => {
                    // EMFILE and the like: back off a little rather than spin.
                    warn!(error = %e, "accepting a metrics connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (registry, metrics) = (registry.clone(), metrics.clone());
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = service_fn(move |req| {
                let (registry, metrics) = (registry.clone(), metrics.clone());
                async move { Ok::<_, Infallible>(respond(&req, &registry, &metrics)) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = cancel.cancelled() => {}
                r = conn => if let Err(e) = r { debug!(peer = %peer, error = %e, "metrics connection ended") },
            }
        });
    }
}

fn respond(req: &Request<Incoming>, registry: &Registry, metrics: &super::Metrics) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
    }
    match req.uri().path() {
        "/metrics" => {
            let mut r = Response::new(Full::new(Bytes::from(metrics.encode())));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(super::CONTENT_TYPE));
            r
        }
        "/healthz" => {
            let now = jiff::Timestamp::now();
            let (code, mut body) =
                super::health::healthz(registry.liveness().check(), &registry.runtime_health(), now);
            body.push_str(&super::health::api_server_line(registry.api_health().as_ref(), now));
            text(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), body)
        }
        _ => text(StatusCode::NOT_FOUND, "404 page not found\n".into()),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}
