//! A one-shot HTTP GET for probes and hooks, shaped like the kubelet's prober client: a new
//! connection per attempt (no keep-alive), no proxy, bounded body read.

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Body bytes kept from a response (R6.9: 10 KiB).
const MAX_BODY: usize = 10 * 1024;

#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub https: bool,
    pub host: String,
    pub port: u16,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub user_agent: String,
    /// Whole-request deadline (connect + response); `None` = unbounded.
    pub timeout: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub location: Option<String>,
    pub body: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("Get \"{url}\": {reason}")]
    Failed { url: String, reason: String },
    #[error("Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)")]
    Timeout { url: String },
}

impl HttpRequest {
    /// The request an `httpGet` action describes, sent to `host:port` (already resolved).
    pub fn for_action(
        get: &k8s_openapi::api::core::v1::HTTPGetAction,
        host: String,
        port: u16,
        user_agent: String,
        timeout: Option<Duration>,
    ) -> HttpRequest {
        HttpRequest {
            https: get.scheme.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("https")),
            host,
            port,
            path: get.path.clone().unwrap_or_else(|| "/".into()),
            headers: get.http_headers.iter().flatten().map(|h| (h.name.clone(), h.value.clone())).collect(),
            user_agent,
            timeout,
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        format!("{scheme}://{host}:{}{}", self.port, self.path)
    }
}

/// Sends one GET and reads at most 10 KiB of the body.
pub async fn http_get(req: &HttpRequest) -> Result<HttpResponse, HttpError> {
    let url = req.url();
    let fut = send(req, &url);
    match req.timeout {
        Some(t) => tokio::time::timeout(t, fut).await.map_err(|_| HttpError::Timeout { url: url.clone() })?,
        None => fut.await,
    }
}

async fn send(req: &HttpRequest, url: &str) -> Result<HttpResponse, HttpError> {
    let fail = |reason: String| HttpError::Failed { url: url.to_string(), reason };
    let addr = if req.host.contains(':') {
        format!("[{}]:{}", req.host, req.port)
    } else {
        format!("{}:{}", req.host, req.port)
    };
    let stream = TcpStream::connect(&addr).await.map_err(|e| fail(format!("dial tcp {addr}: {e}")))?;
    let (mut sender, conn_task) = if req.https {
        let server_name = rustls::pki_types::ServerName::try_from(req.host.clone())
            .map_err(|e| fail(format!("bad host name: {e}")))?;
        let tls = tokio_rustls::TlsConnector::from(insecure_tls_config())
            .connect(server_name, stream)
            .await
            .map_err(|e| fail(format!("tls: {e}")))?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| fail(e.to_string()))?;
        (
            sender,
            tokio::spawn(async move {
                let _ = conn.await;
            }),
        )
    } else {
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| fail(e.to_string()))?;
        (
            sender,
            tokio::spawn(async move {
                let _ = conn.await;
            }),
        )
    };
    let path = if req.path.starts_with('/') { req.path.clone() } else { format!("/{}", req.path) };
    let mut builder = http::Request::get(path).header(http::header::CONNECTION, "close");
    let has = |name: &str| req.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let host_given = has("host");
    let ua_given = has("user-agent");
    let accept_given = has("accept");
    if !host_given {
        builder = builder.header(http::header::HOST, format!("{}:{}", req.host, req.port));
    }
    if !ua_given {
        builder = builder.header(http::header::USER_AGENT, &req.user_agent);
    }
    if !accept_given {
        builder = builder.header(http::header::ACCEPT, "*/*");
    }
    for (k, v) in &req.headers {
        // A given empty Accept removes the header (R6.9).
        if k.eq_ignore_ascii_case("accept") && v.is_empty() {
            continue;
        }
        builder = builder.header(k.as_str(), v.as_str());
    }
    let request = builder.body(Empty::<Bytes>::new()).map_err(|e| fail(e.to_string()))?;
    let resp = sender.send_request(request).await.map_err(|e| fail(e.to_string()))?;
    let status = resp.status().as_u16();
    let location =
        resp.headers().get(http::header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut body = Vec::new();
    let mut incoming = resp.into_body();
    while body.len() < MAX_BODY {
        match incoming.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    body.extend_from_slice(data);
                }
            }
            _ => break,
        }
    }
    body.truncate(MAX_BODY);
    conn_task.abort();
    Ok(HttpResponse { status, location, body })
}

/// A TLS client config that accepts any server certificate, as the kubelet's prober does
/// (`InsecureSkipVerify`).
fn insecure_tls_config() -> std::sync::Arc<rustls::ClientConfig> {
    static CONFIG: std::sync::OnceLock<std::sync::Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            let verifier = std::sync::Arc::new(AcceptAnyCert(provider.clone()));
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| b.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth());
            // The ring provider supports the default versions; fall back to an empty root store.
            std::sync::Arc::new(config.unwrap_or_else(|_| {
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
            }))
        })
        .clone()
}

#[derive(Debug)]
struct AcceptAnyCert(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
