//! The kubelet API's TLS: the serving certificate from a [`CertSlot`] asked at each handshake
//! (the files `--tls-cert-file`, `--tls-private-key-file`; a self-signed pair; or one issued by
//! CSR and rotated, see `cluster::serving_cert`), and with `--client-ca-file` client
//! certificates verified against that CA, though not required (a client without one may still bring a bearer token: the
//! kubelet's `VerifyClientCertIfGiven`). A verified certificate authenticates as its subject's
//! CN, with its O values as groups (upstream's `CommonNameUserConversion`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustls::RootCertStore;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tracing::warn;

use super::auth::User;
use crate::cluster::cert_slot::CertSlot;

/// The kubelet API could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("cannot read the {what} file {}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    #[error("the {what} file {} holds no PEM certificate", path.display())]
    NoCertificate { what: &'static str, path: PathBuf },
    #[error("the certificate {} is not usable: {reason}", cert.display())]
    Unusable { cert: PathBuf, reason: String },
    #[error("no TLS protocol version is available")]
    Protocols(#[source] rustls::Error),
    #[error("the client CA file {} is not usable", path.display())]
    ClientCa {
        path: PathBuf,
        #[source]
        source: ClientCaError,
    },
    #[error("cannot serve TLS with the certificate {} and the key {}", cert.display(), key.display())]
    Tls {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("cannot listen on {address} (--node-ip, --port)")]
    Listen {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Why a client CA bundle is refused.
#[derive(Debug, thiserror::Error)]
pub enum ClientCaError {
    #[error("a certificate in it is invalid")]
    Certificate(#[source] rustls::Error),
    #[error("it cannot verify client certificates")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
}

/// The pair in `--tls-cert-file` and `--tls-private-key-file`, read now so a bad file fails at
/// start.
pub fn load_pair(cert: &Path, key: &Path) -> Result<CertSlot, BindError> {
    let chain = read_certificates("certificate", cert)?;
    let private_key = PrivateKeyDer::from_pem_file(key).map_err(|source| BindError::Read {
        what: "private key",
        path: key.to_path_buf(),
        source,
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let certified = CertifiedKey::from_der(chain, private_key, &provider)
        .map_err(|source| BindError::Tls { cert: cert.to_path_buf(), key: key.to_path_buf(), source })?;
    CertSlot::with_key(certified).map_err(|reason| BindError::Unusable { cert: cert.to_path_buf(), reason })
}

/// The TLS settings of the kubelet API: the certificate is `serving`'s at each handshake.
pub(crate) fn server_config(
    serving: CertSlot,
    client_ca: Option<&Path>,
) -> Result<rustls::ServerConfig, BindError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(BindError::Protocols)?;
    let builder = match client_ca {
        Some(path) => {
            let ca_error = |source| BindError::ClientCa { path: path.to_path_buf(), source };
            let mut roots = RootCertStore::empty();
            for c in read_certificates("client CA", path)? {
                roots.add(c).map_err(|e| ca_error(ClientCaError::Certificate(e)))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| ca_error(ClientCaError::Verifier(e)))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config =
        builder.with_cert_resolver(Arc::new(Serving { slot: serving, refused: AtomicBool::new(false) }));
    // The API server speaks HTTP/2 or HTTP/1.1 to a kubelet; both are served.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// [`server_config`] with the files' pair.
#[cfg(test)]
pub(crate) fn server_config_from_files(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<rustls::ServerConfig, BindError> {
    server_config(load_pair(cert, key)?, client_ca)
}

/// rustls asks this at each handshake: the slot's certificate, so a rotated one reaches every
/// new connection. With none yet (a serving CSR not approved), the handshake fails, as the
/// kubelet's `GetCertificate` does ("no serving certificate available for the kubelet").
#[derive(Debug)]
struct Serving {
    slot: CertSlot,
    /// The refusal is logged once, not at every client's retry.
    refused: AtomicBool,
}

impl ResolvesServerCert for Serving {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let key = self.slot.key();
        if key.is_none() && !self.refused.swap(true, Ordering::Relaxed) {
            warn!(
                "refusing TLS handshakes on the kubelet API: no serving certificate available for the kubelet \
                 yet (its kubelet-serving CertificateSigningRequest is waiting to be approved and signed)"
            );
        }
        key
    }
}

fn read_certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, BindError> {
    let read_error = |source| BindError::Read { what, path: path.to_path_buf(), source };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(read_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_error)?;
    if certs.is_empty() {
        return Err(BindError::NoCertificate { what, path: path.to_path_buf() });
    }
    Ok(certs)
}

/// The user a verified client certificate names: CN the name, each O a group. `None` without a
/// CN (upstream then tries the next authenticator).
pub(crate) fn certificate_user(cert: &CertificateDer<'_>) -> Option<User> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    // Go's pkix.Name keeps the last CN of the subject.
    let name = subject.iter_common_name().filter_map(|cn| cn.as_str().ok()).last()?;
    if name.is_empty() {
        return None;
    }
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_string).collect();
    Some(User { name: name.to_string(), groups, ..User::default() }.authenticated())
}
