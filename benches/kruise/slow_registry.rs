//! A slow registry: an HTTP reverse proxy on loopback in front of the project's registry that
//! answers every request only after a fixed delay. A pull through it costs the delay once per
//! request (resolving the tag, the manifest, each blob it lacks), however small the image, so
//! "the agent pulled" shows up as time in what the rollout measures.

use std::convert::Infallible;
use std::time::Duration;

use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio_util::sync::CancellationToken;

type Body = BoxBody<Bytes, hyper::Error>;

/// Starts the proxy on `listen` (host:port) for `upstream` (host:port, plain http); it runs
/// until the returned token is cancelled.
pub async fn start(listen: &str, upstream: &str, delay: Duration) -> CancellationToken {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .unwrap_or_else(|e| panic!("slow registry: bind {listen}: {e}"));
    let stop = CancellationToken::new();
    let client: Client<HttpConnector, Incoming> = Client::builder(TokioExecutor::new()).build_http();
    let upstream = upstream.to_string();
    let token = stop.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = token.cancelled() => return,
                r = listener.accept() => match r {
                    Ok(s) => s,
                    Err(_) => continue,
                },
            };
            let (client, upstream) = (client.clone(), upstream.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req| forward(client.clone(), upstream.clone(), delay, req));
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    stop
}

async fn forward(
    client: Client<HttpConnector, Incoming>,
    upstream: String,
    delay: Duration,
    mut req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    tokio::time::sleep(delay).await;
    let path = req.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    let uri = match format!("http://{upstream}{path}").parse() {
        Ok(u) => u,
        Err(e) => return Ok(error(format!("bad uri: {e}"))),
    };
    *req.uri_mut() = uri;
    if let Ok(host) = upstream.parse() {
        req.headers_mut().insert(hyper::header::HOST, host);
    }
    match client.request(req).await {
        Ok(resp) => Ok(resp.map(|b| b.boxed())),
        Err(e) => Ok(error(format!("upstream: {e}"))),
    }
}

fn error(msg: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(msg)).map_err(|never| match never {}).boxed());
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
}
